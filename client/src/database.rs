//! Where the database is and how to reach it: a [`Database`], from a URL with libpq's TLS
//! settings, or from a `tokio_postgres::Config` with [`TlsSettings`] or a TLS connector of
//! your own.
//!
//! Every piece of the client that connects (the stateless calls' [`connect`](crate::connect),
//! [`Membership`](crate::Membership), [`LeaderElector`](crate::LeaderElector),
//! [`Worker`](crate::Worker)) takes anything that converts into a `Database`: a `&str`
//! or `String` URL, or a `Database` built here.
//!
//! TLS is OpenSSL, the library libpq uses, with libpq's rules on top, so a URL connects
//! exactly when `psql` with the same URL would (the suite checks this against `psql` for every
//! mode, root setting and kind of certificate: X.509 v1 certificates and names in the CN
//! only, as PostgreSQL's own certificate recipe makes them, are accepted as libpq accepts
//! them). The settings:
//!
//! | `sslmode` | encrypts | verifies the server's certificate |
//! |---|---|---|
//! | `disable` | no | — |
//! | `allow` | only if the server refuses a plain connection | as `prefer` |
//! | `prefer` (the default) | if the server offers TLS (a failed handshake falls back to plain) | only if a root certificate file exists: its chain |
//! | `require` | yes, or fail | only if a root certificate file exists: its chain |
//! | `verify-ca` | yes, or fail | its chain, against the root certificates (which must exist) |
//! | `verify-full` | yes, or fail | its chain, and that it names the host connected to |
//!
//! - `sslrootcert`: a PEM file of root certificates, or `system` for OpenSSL's default store
//!   (which `SSL_CERT_FILE` and `SSL_CERT_DIR` override). Without it,
//!   `~/.postgresql/root.crt` is used when it exists. `system` requires `verify-full` (and
//!   makes it the default `sslmode`): any publicly trusted certificate would do otherwise.
//! - `sslcert`, `sslkey` (default `~/.postgresql/postgresql.crt` and `.key`, when they exist),
//!   `sslpassword`: a client certificate, its key (PEM or DER, readable by its owner only, or
//!   0640 if owned by root) and the key's passphrase.
//! - `sslcrl`, `sslcrldir` (default `~/.postgresql/root.crl`): revoked certificates.
//! - `sslsni=0` turns off Server Name Indication.
//!
//! The host name check is libpq's: a name in the subjectAltName entries of the host's kind
//! (DNS name or IP address) must match; without such entries, the CN must. A wildcard is a
//! leading `*.` and matches one label. Unlike libpq, environment variables (`PGSSLMODE`, …)
//! are not read.
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use openssl::nid::Nid;
use openssl::pkey::PKey;
use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode, SslVersion};
use openssl::x509::store::{X509Lookup, X509StoreBuilder};
use openssl::x509::verify::X509VerifyFlags;
use openssl::x509::{X509Ref, X509VerifyResult};
use postgres_openssl::MakeTlsConnector;
use tokio_postgres::config::{Host, SslMode as DriverMode};

use crate::{Error, Result};

/// A database to connect to: its connection settings and how to use TLS. Cheap to clone.
///
/// ```no_run
/// use rendezvous_client::database::{Database, SslMode, TlsSettings};
///
/// // A URL, with libpq's TLS settings:
/// let db = Database::from_url("postgres://app@db.internal/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem");
/// // Or settings of your own, with the same TLS settings by name:
/// let mut config = tokio_postgres::Config::new();
/// config.host("db.internal").user("app").dbname("app");
/// let db = Database::with_tls(config, TlsSettings {
///     mode: Some(SslMode::VerifyFull),
///     root_cert: Some("/etc/ssl/db-ca.pem".into()),
///     cert: Some("/etc/app/db-client.crt".into()),
///     key: Some("/etc/app/db-client.key".into()),
///     ..TlsSettings::default()
/// });
/// ```
#[derive(Clone)]
pub struct Database {
    inner: std::result::Result<(tokio_postgres::Config, Tls), String>,
}

/// How a [`Database`] uses TLS.
#[derive(Clone)]
enum Tls {
    /// libpq's settings: the connector is made for each connection, so files are read then
    /// (a rotated root certificate is picked up by the next connection, as with libpq).
    Settings(TlsSettings),
    /// A connector of the caller's own: TLS is required.
    Connector(MakeTlsConnector),
}

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// Plain first; TLS only if the server refuses a plain connection.
    Allow,
    /// TLS if the server offers it, else plain.
    Prefer,
    /// TLS or fail; the certificate is checked only if a root certificate file exists.
    Require,
    /// TLS, and the certificate's chain leads to a root certificate.
    VerifyCa,
    /// As `VerifyCa`, and the certificate names the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> std::result::Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => {
                return Err(
                    "sslmode is not one of disable, allow, prefer, require, verify-ca, verify-full".into()
                )
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// libpq's TLS settings, by their libpq names (see the [module docs](self) for what each
/// means and its default). `TlsSettings::default()` is what a URL without any means.
#[derive(Clone, Default)]
pub struct TlsSettings {
    /// `sslmode`; `None` is `prefer`, or `verify-full` with `sslrootcert=system`.
    pub mode: Option<SslMode>,
    /// `sslrootcert`: a PEM file, or `system`.
    pub root_cert: Option<String>,
    /// `sslcert`: the client certificate (PEM, with its chain).
    pub cert: Option<PathBuf>,
    /// `sslkey`: the client certificate's key.
    pub key: Option<PathBuf>,
    /// `sslpassword`: the key's passphrase.
    pub password: Option<String>,
    /// `sslcrl`: a PEM file of revoked certificates.
    pub crl: Option<PathBuf>,
    /// `sslcrldir`: a directory of them (hashed names, as `openssl rehash` makes).
    pub crl_dir: Option<PathBuf>,
    /// `sslsni=0` turns Server Name Indication off.
    pub no_sni: bool,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("mode", &self.mode)
            .field("root_cert", &self.root_cert)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("crl", &self.crl)
            .field("crl_dir", &self.crl_dir)
            .field("no_sni", &self.no_sni)
            .finish()
    }
}

impl TlsSettings {
    /// The mode in effect, or why the settings are refused before connecting (as libpq
    /// refuses them).
    fn effective_mode(&self) -> std::result::Result<SslMode, String> {
        let system = self.root_cert.as_deref() == Some("system");
        let mode = self.mode.unwrap_or(if system { SslMode::VerifyFull } else { SslMode::Prefer });
        if system && mode != SslMode::VerifyFull {
            return Err(format!(
                "weak sslmode \"{}\" may not be used with sslrootcert=system (use \"verify-full\")",
                mode.name()
            ));
        }
        Ok(mode)
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Ok((config, tls)) => f
                .debug_struct("Database")
                .field("hosts", &config.get_hosts())
                .field("dbname", &config.get_dbname())
                .field("user", &config.get_user())
                .field(
                    "tls",
                    match tls {
                        Tls::Settings(s) => s as &dyn std::fmt::Debug,
                        Tls::Connector(_) => &"a connector of the caller's",
                    },
                )
                .finish_non_exhaustive(),
            Err(e) => f.debug_struct("Database").field("error", e).finish(),
        }
    }
}

impl Database {
    /// From a URL (`postgres://user@host:port/db?...`, several hosts allowed, or libpq's
    /// `key=value` form), with the TLS settings as libpq reads them. A bad URL is reported
    /// when connecting, as [`Error::InvalidArgument`].
    pub fn from_url(url: &str) -> Database {
        Database { inner: parse(url).map(|(config, tls)| (config, Tls::Settings(tls))) }
    }

    /// From settings of your own and libpq's TLS settings (the config's own `ssl_mode` is
    /// not used: `tls.mode` decides).
    pub fn with_tls(config: tokio_postgres::Config, tls: TlsSettings) -> Database {
        Database { inner: tls.effective_mode().map(|_| (config, Tls::Settings(tls))) }
    }

    /// From settings and an OpenSSL connector of your own ([`postgres_openssl`] is
    /// re-exported). TLS is required: a server that declines it is refused (unless the
    /// config says `SslMode::Disable`), and the connector decides what is verified.
    pub fn with_connector(mut config: tokio_postgres::Config, tls: MakeTlsConnector) -> Database {
        if config.get_ssl_mode() == DriverMode::Prefer {
            config.ssl_mode(DriverMode::Require);
        }
        Database { inner: Ok((config, Tls::Connector(tls))) }
    }

    /// The settings, or why the URL was refused.
    fn parts(&self) -> Result<(&tokio_postgres::Config, &Tls)> {
        match &self.inner {
            Ok((config, tls)) => Ok((config, tls)),
            Err(e) => Err(Error::InvalidArgument(format!("database URL: {e}"))),
        }
    }

    /// Opens a connection as libpq would with these settings (`allow` and `prefer` retry
    /// once the other way, TLS is not used over Unix sockets), naming the session
    /// `application_name` unless the settings name it.
    pub(crate) async fn open(&self, application_name: &str) -> Result<(tokio_postgres::Client, Connection)> {
        let (config, tls) = self.parts()?;
        let mut config = config.clone();
        if config.get_application_name().is_none() {
            config.application_name(application_name);
        }
        // libpq ignores sslmode over Unix sockets (the server offers no TLS there), so no
        // certificate file is read for them either.
        let unix_only = config.get_hosts().iter().all(|h| !matches!(h, Host::Tcp(_)));
        let (connector, mode) = match tls {
            Tls::Connector(c) => (c.clone(), unix_only.then_some(SslMode::Disable)),
            Tls::Settings(s) => {
                let mode = if unix_only {
                    SslMode::Disable
                } else {
                    s.effective_mode().map_err(|e| Error::InvalidArgument(format!("database URL: {e}")))?
                };
                (connector(s, mode)?, Some(mode))
            }
        };
        let attempt = |config: &tokio_postgres::Config, ssl: DriverMode| {
            let mut config = config.clone();
            config.ssl_mode(ssl);
            let connector = connector.clone();
            async move { config.connect(connector).await }
        };
        let result = match mode {
            None => config.connect(connector.clone()).await,
            Some(SslMode::Disable) => attempt(&config, DriverMode::Disable).await,
            // Plain first; TLS when the server refuses it (pg_hba.conf accepting TLS only).
            Some(SslMode::Allow) => match attempt(&config, DriverMode::Disable).await {
                Err(e) if e.as_db_error().is_some() => attempt(&config, DriverMode::Require).await,
                other => other,
            },
            // TLS if offered; a failed handshake tries again without, as libpq does.
            Some(SslMode::Prefer) => match attempt(&config, DriverMode::Prefer).await {
                Err(e) if is_tls_failure(&e) => attempt(&config, DriverMode::Disable).await,
                other => other,
            },
            Some(_) => attempt(&config, DriverMode::Require).await,
        };
        result.map_err(Error::Connect)
    }
}

/// A connection as [`Database::open`] makes it, to be driven by its owner.
pub(crate) type Connection =
    tokio_postgres::Connection<tokio_postgres::Socket, postgres_openssl::TlsStream<tokio_postgres::Socket>>;

/// Whether a connection failed in its TLS handshake (not at the server's answer to it).
fn is_tls_failure(e: &tokio_postgres::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<openssl::ssl::Error>() || s.is::<openssl::error::ErrorStack>() {
            return true;
        }
        source = s.source();
    }
    false
}

impl From<&str> for Database {
    fn from(url: &str) -> Database {
        Database::from_url(url)
    }
}

impl From<String> for Database {
    fn from(url: String) -> Database {
        Database::from_url(&url)
    }
}

impl From<&String> for Database {
    fn from(url: &String) -> Database {
        Database::from_url(url)
    }
}

impl From<&Database> for Database {
    fn from(db: &Database) -> Database {
        db.clone()
    }
}

fn parse(url: &str) -> std::result::Result<(tokio_postgres::Config, TlsSettings), String> {
    let (rest, tls) = split_tls_settings(url)?;
    let config: tokio_postgres::Config = rest.parse().map_err(|e: tokio_postgres::Error| e.to_string())?;
    tls.effective_mode()?;
    Ok((config, tls))
}

/// The settings this client reads from a URL itself: tokio-postgres knows none of these but
/// `sslmode`, and that one without `verify-ca` and `verify-full`.
const TLS_KEYS: &[&str] =
    &["sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "sslcrl", "sslcrldir", "sslsni"];

/// Takes libpq's TLS settings out of a URL or a key=value string; returns the rest and the
/// settings.
fn split_tls_settings(url: &str) -> std::result::Result<(String, TlsSettings), String> {
    let mut tls = TlsSettings::default();
    let mut take = |key: &str, value: String| -> std::result::Result<bool, String> {
        match key {
            "sslmode" => tls.mode = Some(SslMode::parse(&value)?),
            "sslrootcert" => tls.root_cert = Some(value).filter(|v| !v.is_empty()),
            "sslcert" => tls.cert = Some(PathBuf::from(value)).filter(|v| !v.as_os_str().is_empty()),
            "sslkey" => tls.key = Some(PathBuf::from(value)).filter(|v| !v.as_os_str().is_empty()),
            "sslpassword" => tls.password = Some(value).filter(|v| !v.is_empty()),
            "sslcrl" => tls.crl = Some(PathBuf::from(value)).filter(|v| !v.as_os_str().is_empty()),
            "sslcrldir" => tls.crl_dir = Some(PathBuf::from(value)).filter(|v| !v.as_os_str().is_empty()),
            "sslsni" => match value.as_str() {
                "0" => tls.no_sni = true,
                "1" => tls.no_sni = false,
                _ => return Err("sslsni is not 0 or 1".into()),
            },
            _ => return Ok(false),
        }
        Ok(true)
    };
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else { return Ok((url.to_owned(), tls)) };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            // Only what this client reads itself is decoded here, and an error names the key,
            // never the value (it could be a password).
            if !TLS_KEYS.contains(&key) {
                kept.push(pair);
                continue;
            }
            take(key, percent_decode(value).map_err(|why| format!("the value of {key} has {why}"))?)?;
        }
        let rest = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
        Ok((rest, tls))
    } else {
        let mut kept = Vec::new();
        for (key, value, raw) in key_values(url)? {
            if !take(&key, value)? {
                kept.push(raw);
            }
        }
        Ok((kept.join(" "), tls))
    }
}

/// libpq's `key=value` pairs, values optionally in single quotes: (key, value, the pair's text).
fn key_values(s: &str) -> std::result::Result<Vec<(String, String, String)>, String> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(format!("missing = after \"{key}\""));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        let mut raw_value = String::new();
        if chars.peek() == Some(&'\'') {
            raw_value.push(chars.next().unwrap());
            loop {
                match chars.next() {
                    None => return Err(format!("unterminated quoted value of \"{key}\"")),
                    Some('\\') => {
                        raw_value.push('\\');
                        if let Some(c) = chars.next() {
                            raw_value.push(c);
                            value.push(c);
                        }
                    }
                    Some('\'') => {
                        raw_value.push('\'');
                        break;
                    }
                    Some(c) => {
                        raw_value.push(c);
                        value.push(c);
                    }
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                value.push(c);
                raw_value.push(c);
                chars.next();
            }
        }
        out.push((key.clone(), value, format!("{key}={raw_value}")));
    }
}

/// Decodes `%XX` escapes; the error says what is wrong, never the text (it could be secret).
fn percent_decode(s: &str) -> std::result::Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or("a bad percent-encoding")?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| "a bad percent-encoding")?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "bytes that are not UTF-8 once decoded".to_owned())
}

/// `~/.postgresql/<name>`, where libpq looks for the files not given.
fn default_file(name: &str) -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| Path::new(&home).join(".postgresql").join(name))
}

/// An OpenSSL connector as libpq sets one up for `settings` (`initialize_SSL` in libpq).
fn connector(settings: &TlsSettings, mode: SslMode) -> Result<MakeTlsConnector> {
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

    fn split(url: &str) -> (String, TlsSettings) {
        split_tls_settings(url).unwrap()
    }

    #[test]
    fn tls_settings_come_out_of_urls_and_the_rest_stays() {
        let (rest, tls) = split("postgres://u@h:5/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&target_session_attrs=read-write");
        assert_eq!(rest, "postgres://u@h:5/db?target_session_attrs=read-write");
        assert_eq!((tls.mode, tls.root_cert.as_deref()), (Some(SslMode::VerifyFull), Some("/etc/ca.pem")));
        let (rest, tls) = split(
            "postgresql://u@h/db?sslmode=require&sslcert=/c.pem&sslkey=/k.pem&sslpassword=p%20w&sslsni=0",
        );
        assert_eq!(rest, "postgresql://u@h/db");
        assert_eq!(tls.mode, Some(SslMode::Require));
        assert_eq!((tls.cert.unwrap(), tls.key.unwrap()), (PathBuf::from("/c.pem"), PathBuf::from("/k.pem")));
        assert_eq!((tls.password.as_deref(), tls.no_sni), (Some("p w"), true));
        let (rest, tls) = split("postgres://u@h/db");
        assert_eq!((rest.as_str(), tls.mode), ("postgres://u@h/db", None));
        let (rest, tls) = split("host=h user=u sslmode=verify-ca sslrootcert='/my certs/ca.pem' dbname=db");
        assert_eq!(rest, "host=h user=u dbname=db");
        assert_eq!((tls.mode, tls.root_cert.as_deref()), (Some(SslMode::VerifyCa), Some("/my certs/ca.pem")));
    }

    #[test]
    fn bad_tls_settings_say_what_is_wrong() {
        let err = |url: &str| parse(url).err().unwrap();
        assert!(err("postgres://u@h/db?sslmode=sometimes").contains("verify-full"));
        assert!(err("host=h sslrootcert='unterminated").contains("unterminated"));
        assert!(err("postgres://u@h/db?sslsni=2").contains("sslsni"));
        // As libpq 16+: the system's store only with verify-full, which it makes the default.
        for mode in ["disable", "allow", "prefer", "require", "verify-ca"] {
            let e = err(&format!("postgres://u@h/db?sslmode={mode}&sslrootcert=system"));
            assert!(e.contains(&format!("weak sslmode \"{mode}\"")), "{e}");
        }
        let (_, tls) = parse("postgres://u@h/db?sslrootcert=system").unwrap();
        assert_eq!(tls.effective_mode(), Ok(SslMode::VerifyFull));
        // A password never appears in an error, however it is malformed (#24).
        for url in [
            "postgres://u@h/db?password=p%ssXYZZY",
            "postgres://u@h/db?password=p%ssXYZZY&sslmode=require",
            "postgres://u:p%zzXYZZY@h/db",
            "postgres://u@h/db?sslrootcert=%zz&password=XYZZY",
            "postgres://u@h/db?sslpassword=%zzXYZZY",
            "host=h password='XYZZY sslmode=require",
        ] {
            if let Some(e) = parse(url).err() {
                for secret in ["XYZZY", "p%ss", "%zz"] {
                    assert!(!e.contains(secret), "{url:?}: the error shows {secret:?}: {e}");
                }
            }
        }
        assert!(err("postgres://u@h/db?sslrootcert=%zz")
            .contains("the value of sslrootcert has a bad percent-encoding"));
        assert!(matches!(
            Database::from_url("postgres://u@h/db?sslmode=x").parts(),
            Err(Error::InvalidArgument(_))
        ));
        assert!(!format!("{:?}", Database::from_url("postgres://u@h/db?sslpassword=XYZZY")).contains("XYZZY"));
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
