//! TLS as libpq does it, on OpenSSL: the connector for a mode and its settings (root
//! certificates, revocation lists, a client certificate), and libpq's host name check.
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use openssl::nid::Nid;
use openssl::pkey::PKey;
use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode, SslVersion};
use openssl::x509::store::{X509Lookup, X509StoreBuilder};
use openssl::x509::verify::X509VerifyFlags;
use openssl::x509::{X509Ref, X509VerifyResult};
use postgres_openssl::MakeTlsConnector;

use super::{SslMode, TlsSettings};
use crate::{Error, Result};

/// `~/.postgresql/<name>`, where libpq looks for the files not given.
fn default_file(name: &str) -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| Path::new(&home).join(".postgresql").join(name))
}

/// The connectors made in this process, one per TLS settings and mode, with what their files
/// looked like then. Making one costs 17-28 ms of CPU (OpenSSL parses the system's root
/// certificates, even where they are then replaced), which every connection paid: a host's
/// start took 45-75 ms where its queries took 5. One is made again whenever a file libpq would
/// read (root certificate, revocation lists, client certificate and key) changed, appeared or
/// went, so a rotated file is picked up by the next connection, as with libpq.
#[derive(Default)]
pub(super) struct ConnectorCache {
    made_for: std::sync::Mutex<std::collections::HashMap<(TlsSettings, SslMode), Made>>,
    /// How many connectors were made (for the tests).
    made: std::sync::atomic::AtomicUsize,
}

/// A connector, and the files it read as they were when it was made.
type Made = (Vec<FileStamp>, MakeTlsConnector);

/// A file's path and, when it exists, its modification time, length and permissions (libpq
/// refuses a key others may read).
type FileStamp = (PathBuf, Option<(Option<std::time::SystemTime>, u64, u32)>);

impl ConnectorCache {
    /// The process's cache.
    pub(super) fn shared() -> &'static ConnectorCache {
        static SHARED: std::sync::OnceLock<ConnectorCache> = std::sync::OnceLock::new();
        SHARED.get_or_init(ConnectorCache::default)
    }

    /// The connector for `settings` in `mode`: the last one made, if its files are as they were.
    pub(super) fn get(&self, settings: &TlsSettings, mode: SslMode) -> Result<MakeTlsConnector> {
        let stamps = file_stamps(settings);
        let key = (settings.clone(), mode);
        if let Some((s, c)) = self.made_for.lock().expect("connector cache lock").get(&key) {
            if *s == stamps {
                return Ok(c.clone());
            }
        }
        // Made outside the lock: connections with other settings need not wait for it.
        let made = connector(settings, mode)?;
        self.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.made_for.lock().expect("connector cache lock").insert(key, (stamps, made.clone()));
        Ok(made)
    }
}

/// The files a connector for `settings` reads (given, or at libpq's default paths).
fn file_stamps(settings: &TlsSettings) -> Vec<FileStamp> {
    let root = settings.root_cert.as_deref().filter(|r| *r != "system").map(PathBuf::from);
    let files = [
        root.or_else(|| default_file("root.crt")),
        settings.crl.clone().or_else(|| default_file("root.crl")),
        settings.crl_dir.clone(),
        settings.cert.clone().or_else(|| default_file("postgresql.crt")),
        settings.key.clone().or_else(|| default_file("postgresql.key")),
    ];
    files
        .into_iter()
        .flatten()
        .map(|path| {
            let stamp = std::fs::metadata(&path).ok().map(|m| (m.modified().ok(), m.len(), permissions(&m)));
            (path, stamp)
        })
        .collect()
}

#[cfg(unix)]
fn permissions(m: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    m.permissions().mode()
}

#[cfg(not(unix))]
fn permissions(m: &std::fs::Metadata) -> u32 {
    u32::from(m.permissions().readonly())
}

/// An OpenSSL connector as libpq sets one up for `settings` (`initialize_SSL` in libpq).
pub(super) fn connector(settings: &TlsSettings, mode: SslMode) -> Result<MakeTlsConnector> {
    let bad = |what: String| Error::InvalidArgument(what);
    let ssl = |what: &str, e: openssl::error::ErrorStack| bad(format!("{what}: {e}"));
    let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(|e| ssl("TLS", e))?;
    // libpq's defaults: OpenSSL's cipher list, TLS 1.2 at least, and no root certificate but
    // the ones named (the builder starts with the system's store: replaced by an empty one).
    builder.set_cipher_list("DEFAULT").map_err(|e| ssl("TLS", e))?;
    builder.set_min_proto_version(Some(SslVersion::TLS1_2)).map_err(|e| ssl("TLS", e))?;
    builder.set_cert_store(X509StoreBuilder::new().map_err(|e| ssl("TLS", e))?.build());

    let mut have_roots = false;
    if mode != SslMode::Disable {
        let root_file = settings.root_cert.clone().map(PathBuf::from).or_else(|| default_file("root.crt"));
        match root_file {
            Some(system) if system.as_os_str() == "system" => {
                builder.set_default_verify_paths().map_err(|e| ssl("sslrootcert=system", e))?;
                have_roots = true;
            }
            Some(file) if file.exists() => {
                builder.set_ca_file(&file).map_err(|e| {
                    ssl(&format!("could not read root certificate file \"{}\"", file.display()), e)
                })?;
                have_roots = true;
                // Revoked certificates, when a list is given or the default one exists.
                let crl = settings.crl.clone().or_else(|| {
                    if settings.crl_dir.is_none() {
                        default_file("root.crl").filter(|f| f.exists())
                    } else {
                        None
                    }
                });
                let store = builder.cert_store_mut();
                let mut loaded = false;
                if let Some(crl) = crl.filter(|f| f.exists()) {
                    let lookup = store.add_lookup(X509Lookup::file()).map_err(|e| ssl("sslcrl", e))?;
                    loaded |= lookup.load_crl_file(&crl, SslFiletype::PEM).is_ok();
                }
                if let Some(dir) = settings.crl_dir.as_ref().filter(|d| d.is_dir()) {
                    let dir = dir.to_str().ok_or_else(|| bad("sslcrldir is not UTF-8".into()))?;
                    let lookup = store.add_lookup(X509Lookup::hash_dir()).map_err(|e| ssl("sslcrldir", e))?;
                    loaded |= lookup.add_dir(dir, SslFiletype::PEM).is_ok();
                }
                if loaded {
                    store
                        .set_flags(X509VerifyFlags::CRL_CHECK | X509VerifyFlags::CRL_CHECK_ALL)
                        .map_err(|e| ssl("sslcrl", e))?;
                }
            }
            missing => {
                if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) {
                    return Err(bad(match missing {
                        Some(file) => format!(
                            "root certificate file \"{}\" does not exist: provide the file, use the system's trusted roots with sslrootcert=system, or change sslmode to disable server certificate verification",
                            file.display()
                        ),
                        None => "no home directory to find the root certificate file in: give sslrootcert".into(),
                    }));
                }
            }
        }
        client_certificate(&mut builder, settings)?;
    }
    let connector = builder.build();
    let mut make = MakeTlsConnector::new(connector);
    let no_sni = settings.no_sni;
    make.set_callback(move |config, host| {
        // The name is checked by libpq's rules below, not OpenSSL's.
        config.set_verify_hostname(false);
        config.set_use_server_name_indication(!no_sni);
        if !have_roots {
            // As libpq without a root certificate: encrypted, the certificate not checked.
            config.set_verify(SslVerifyMode::NONE);
            return Ok(());
        }
        let host = host.to_owned();
        let full = mode == SslMode::VerifyFull;
        config.set_verify_callback(SslVerifyMode::PEER, move |chain_ok, ctx| {
            if !chain_ok || !full || ctx.error_depth() != 0 {
                return chain_ok;
            }
            let Some(cert) = ctx.current_cert() else { return false };
            match names_host(cert, &host) {
                Ok(()) => true,
                Err(why) => {
                    tracing::warn!("{why}");
                    ctx.set_error(X509VerifyResult::APPLICATION_VERIFICATION);
                    false
                }
            }
        });
        Ok(())
    });
    Ok(make)
}

/// Loads the client certificate and its key, when given or present at libpq's default paths.
fn client_certificate(builder: &mut openssl::ssl::SslConnectorBuilder, settings: &TlsSettings) -> Result<()> {
    let bad = |what: String| Error::InvalidArgument(what);
    let Some(cert) = settings.cert.clone().or_else(|| default_file("postgresql.crt")) else { return Ok(()) };
    if !cert.exists() {
        // As libpq: no certificate file, no client certificate (the server may not want one).
        return Ok(());
    }
    builder
        .set_certificate_chain_file(&cert)
        .map_err(|e| bad(format!("could not read certificate file \"{}\": {e}", cert.display())))?;
    let key = settings
        .key
        .clone()
        .or_else(|| default_file("postgresql.key"))
        .ok_or_else(|| bad("a client certificate needs its key: give sslkey".into()))?;
    let meta = std::fs::metadata(&key).map_err(|e| {
        bad(if e.kind() == std::io::ErrorKind::NotFound {
            format!("certificate present, but not private key file \"{}\"", key.display())
        } else {
            format!("could not stat private key file \"{}\": {e}", key.display())
        })
    })?;
    if !meta.is_file() {
        return Err(bad(format!("private key file \"{}\" is not a regular file", key.display())));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let too_open = if meta.uid() == 0 { meta.mode() & 0o037 != 0 } else { meta.mode() & 0o077 != 0 };
        if too_open {
            return Err(bad(format!(
                "private key file \"{}\" has group or world access; file must have permissions u=rw (0600) or less if owned by the current user, or permissions u=rw,g=r (0640) or less if owned by root",
                key.display()
            )));
        }
    }
    let bytes = std::fs::read(&key)
        .map_err(|e| bad(format!("could not read private key file \"{}\": {e}", key.display())))?;
    // Never a prompt: an encrypted key without sslpassword fails to decrypt.
    let password = settings.password.as_deref().unwrap_or("").as_bytes();
    let pkey = PKey::private_key_from_pem_passphrase(&bytes, password)
        .or_else(|_| PKey::private_key_from_der(&bytes))
        .map_err(|_| {
            bad(format!(
                "could not load private key file \"{}\" (PEM or DER; encrypted keys need sslpassword)",
                key.display()
            ))
        })?;
    builder
        .set_private_key(&pkey)
        .and_then(|()| builder.check_private_key())
        .map_err(|e| bad(format!("certificate does not match private key file \"{}\": {e}", key.display())))
}

/// Whether the server's certificate names `host`, by libpq's rules: subjectAltName entries of
/// the host's kind (IP address or DNS name) decide when there are any; otherwise the CN.
fn names_host(cert: &X509Ref, host: &str) -> std::result::Result<(), String> {
    if host.is_empty() {
        return Err("host name must be specified for a verified SSL connection".into());
    }
    let host_ip = ip_bytes(host);
    let mut check_cn = true;
    let mut names = Vec::new();
    for name in cert.subject_alt_names().into_iter().flatten() {
        if let Some(dns) = name.dnsname() {
            if host_ip.is_none() {
                check_cn = false;
            }
            if dns.contains('\0') {
                return Err("SSL certificate's name contains embedded null".into());
            }
            names.push(dns.to_owned());
            if name_matches(dns.as_bytes(), host) {
                return Ok(());
            }
        } else if let Some(ip) = name.ipaddress() {
            if host_ip.is_some() {
                check_cn = false;
            }
            let shown = match ip.len() {
                4 => Ipv4Addr::from(<[u8; 4]>::try_from(ip).unwrap()).to_string(),
                16 => Ipv6Addr::from(<[u8; 16]>::try_from(ip).unwrap()).to_string(),
                n => return Err(format!("certificate contains IP address with invalid length {n}")),
            };
            names.push(shown);
            if host_ip.as_deref() == Some(ip) {
                return Ok(());
            }
        }
    }
    if check_cn {
        if let Some(cn) = cert.subject_name().entries_by_nid(Nid::COMMONNAME).next() {
            let cn = cn.data().as_slice();
            if cn.contains(&0) {
                return Err("SSL certificate's name contains embedded null".into());
            }
            names.push(String::from_utf8_lossy(cn).into_owned());
            if name_matches(cn, host) {
                return Ok(());
            }
        }
    }
    Err(match names.as_slice() {
        [] => "could not get server's host name from server certificate".into(),
        [one] => format!("server certificate for \"{one}\" does not match host name \"{host}\""),
        [first, rest @ ..] => format!(
            "server certificate for \"{first}\" (and {} other name{}) does not match host name \"{host}\"",
            rest.len(),
            if rest.len() == 1 { "" } else { "s" }
        ),
    })
}

/// A certificate name against the host: equal ignoring ASCII case, or a leading `*.` that
/// stands for exactly one label.
fn name_matches(name: &[u8], host: &str) -> bool {
    let host = host.as_bytes();
    if name.eq_ignore_ascii_case(host) {
        return true;
    }
    let Some(suffix) = name.strip_prefix(b"*") else { return false };
    if !suffix.starts_with(b".") || suffix.len() < 2 || host.len() < name.len() {
        return false;
    }
    let (label, tail) = host.split_at(host.len() - suffix.len());
    tail.eq_ignore_ascii_case(suffix) && !label.contains(&b'.')
}

/// The host as an IP address's bytes: IPv4 as `inet_aton` reads it (which takes `127.1` and
/// `0x7f.1` too, as libpq does), or IPv6.
fn ip_bytes(host: &str) -> Option<Vec<u8>> {
    if let Ok(v6) = host.parse::<Ipv6Addr>() {
        return Some(v6.octets().to_vec());
    }
    inet_aton(host).map(|v4| v4.octets().to_vec())
}

fn inet_aton(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<u32> = s
        .split('.')
        .map(|p| {
            let (digits, radix) = if let Some(h) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
                (h, 16)
            } else if p.len() > 1 && p.starts_with('0') {
                (&p[1..], 8)
            } else {
                (p, 10)
            };
            if !digits.bytes().all(|b| b.is_ascii_hexdigit()) || (digits.is_empty() && radix != 8) {
                return None;
            }
            if digits.is_empty() {
                return Some(0);
            }
            u32::from_str_radix(digits, radix).ok()
        })
        .collect::<Option<_>>()?;
    let value = match parts.as_slice() {
        [a] => *a,
        [a, b] if *a <= 0xff && *b <= 0xff_ffff => a << 24 | b,
        [a, b, c] if *a <= 0xff && *b <= 0xff && *c <= 0xffff => a << 24 | b << 16 | c,
        [a, b, c, d] if [a, b, c, d].iter().all(|x| **x <= 0xff) => a << 24 | b << 16 | c << 8 | d,
        _ => return None,
    };
    Some(Ipv4Addr::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connections reuse the connector while its files stay as they were; a rotated, new or
    /// removed file makes a new one (as libpq reads the files at each connection).
    #[test]
    fn a_connector_is_made_again_only_when_its_files_change() {
        let dir = std::env::temp_dir().join(format!("rendezvous-tls-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let root = dir.join("root.crt");
        let settings =
            TlsSettings { root_cert: Some(root.to_str().unwrap().into()), ..TlsSettings::default() };
        let cache = ConnectorCache::default();
        let made = || cache.made.load(std::sync::atomic::Ordering::Relaxed);
        // (Without TLS the connector reads no file, so any content does here.)
        cache.get(&settings, SslMode::Disable).unwrap();
        cache.get(&settings, SslMode::Disable).unwrap();
        assert_eq!(made(), 1, "nothing changed: the same connector");
        std::fs::write(&root, "a root certificate").unwrap();
        cache.get(&settings, SslMode::Disable).unwrap();
        assert_eq!(made(), 2, "the file appeared");
        cache.get(&settings, SslMode::Disable).unwrap();
        std::fs::write(&root, "a rotated root certificate").unwrap();
        cache.get(&settings, SslMode::Disable).unwrap();
        assert_eq!(made(), 3, "the file was rotated");
        std::fs::remove_file(&root).unwrap();
        cache.get(&settings, SslMode::Disable).unwrap();
        assert_eq!(made(), 4, "the file went");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_root_file_fails_only_the_verifying_modes() {
        let settings = |mode| TlsSettings {
            mode: Some(mode),
            root_cert: Some("/nonexistent/root.crt".into()),
            ..TlsSettings::default()
        };
        for mode in [SslMode::VerifyCa, SslMode::VerifyFull] {
            let e = connector(&settings(mode), mode).err().unwrap().to_string();
            assert!(e.contains("root certificate file \"/nonexistent/root.crt\" does not exist"), "{e}");
        }
        for mode in [SslMode::Allow, SslMode::Prefer, SslMode::Require] {
            assert!(connector(&settings(mode), mode).is_ok(), "{mode:?}");
        }
    }

    #[test]
    fn host_names_match_as_libpq_matches_them() {
        for (name, host, expected) in [
            ("db.example.com", "db.example.com", true),
            ("DB.Example.COM", "db.example.com", true),
            ("*.example.com", "db.example.com", true),
            ("*.example.com", "a.db.example.com", false),
            ("*.example.com", "example.com", false),
            ("*.example.com", ".example.com", false),
            ("f*.example.com", "foo.example.com", false),
            ("*", "db", false),
            ("db.example.com", "db.example.co", false),
        ] {
            assert_eq!(name_matches(name.as_bytes(), host), expected, "{name} vs {host}");
        }
        for (host, expected) in [
            ("127.0.0.1", Some(vec![127, 0, 0, 1])),
            ("127.1", Some(vec![127, 0, 0, 1])),
            ("0x7f.1", Some(vec![127, 0, 0, 1])),
            ("010.0.0.1", Some(vec![8, 0, 0, 1])),
            ("2130706433", Some(vec![127, 0, 0, 1])),
            ("256.0.0.1", None),
            ("+1.2.3.4", None),
            ("db.example.com", None),
            ("::1", Some(std::net::Ipv6Addr::LOCALHOST.octets().to_vec())),
        ] {
            assert_eq!(ip_bytes(host), expected, "{host}");
        }
    }
}
