//! Where the database is and how to reach it: a [`Database`], from a URL with libpq's TLS
//! settings, or from a `tokio_postgres::Config` and a TLS connector of your own.
//!
//! Every piece of the client that connects (the stateless calls' [`connect`](crate::connect),
//! [`Membership`](crate::Membership), [`LeaderElector`](crate::LeaderElector),
//! [`Scheduler`](crate::Scheduler)) takes anything that
//! converts into a `Database`: a `&str` or `String` URL, or a `Database` built here.
//!
//! TLS is rustls (with the `ring` provider). In a URL, `sslmode` and `sslrootcert` mean what
//! they mean to libpq:
//!
//! | `sslmode` | encrypts | verifies the server's certificate |
//! |---|---|---|
//! | `disable` | no | — |
//! | `allow`, `prefer` (the default) | if the server offers TLS | no (unless `sslrootcert` is given: as `verify-ca`) |
//! | `require` | yes, or fail | no (unless `sslrootcert` is given: as `verify-ca`) |
//! | `verify-ca` | yes, or fail | its chain, against the root certificates |
//! | `verify-full` | yes, or fail | its chain, and that it names the host connected to |
//!
//! The root certificates are `sslrootcert` (a PEM file), `sslrootcert=system` for the
//! operating system's store, or, for `verify-ca` and `verify-full` without one,
//! `~/.postgresql/root.crt` when it exists, else the system's store. Client certificates
//! (`sslcert`, `sslkey`) are not supported from a URL: build a `rustls::ClientConfig` with
//! one and use [`Database::with_tls`].
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::{Error, Result};

/// A database to connect to: its connection settings and its TLS connector. Cheap to clone.
///
/// ```no_run
/// use rendezvous_client::Database;
///
/// // A URL, with libpq's TLS settings:
/// let db = Database::from_url("postgres://app@db.internal/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem");
/// // Or settings of your own, and rustls configured as you like:
/// let mut config = tokio_postgres::Config::new();
/// config.host("db.internal").user("app").dbname("app");
/// let db = Database::with_tls(config, rendezvous_client::database::rustls_config(true, None)?);
/// # Ok::<(), rendezvous_client::Error>(())
/// ```
#[derive(Clone)]
pub struct Database {
    inner: std::result::Result<(tokio_postgres::Config, MakeRustlsConnect), String>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Ok((config, _)) => f
                .debug_struct("Database")
                .field("hosts", &config.get_hosts())
                .field("dbname", &config.get_dbname())
                .field("user", &config.get_user())
                .field("ssl_mode", &config.get_ssl_mode())
                .finish_non_exhaustive(),
            Err(e) => f.debug_struct("Database").field("error", e).finish(),
        }
    }
}

impl Database {
    /// From a URL (`postgres://user@host:port/db?...`, several hosts allowed, or libpq's
    /// `key=value` form), with `sslmode` and `sslrootcert` as libpq reads them. A bad URL is
    /// reported when connecting, as [`Error::InvalidArgument`].
    pub fn from_url(url: &str) -> Database {
        Database { inner: parse(url) }
    }

    /// From settings and a rustls configuration of your own (see [`rustls_config`]). The
    /// config's `ssl_mode` decides whether TLS is used (`Prefer` by default).
    pub fn with_tls(config: tokio_postgres::Config, tls: ClientConfig) -> Database {
        Database { inner: Ok((config, MakeRustlsConnect::new(tls))) }
    }

    /// From settings and a TLS connector of your own.
    pub fn with_connector(config: tokio_postgres::Config, tls: MakeRustlsConnect) -> Database {
        Database { inner: Ok((config, tls)) }
    }

    /// The settings and the connector, or why the URL was refused.
    pub(crate) fn parts(&self) -> Result<(&tokio_postgres::Config, &MakeRustlsConnect)> {
        match &self.inner {
            Ok((config, tls)) => Ok((config, tls)),
            Err(e) => Err(Error::InvalidArgument(format!("database URL: {e}"))),
        }
    }
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

/// How the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Encrypted, not verified (libpq's `prefer` and `require`).
    Nothing,
    /// The chain against the roots (`verify-ca`).
    Chain,
    /// The chain and the host name (`verify-full`).
    Full,
}

/// libpq's TLS settings pulled out of a URL: tokio-postgres knows neither `verify-ca`,
/// `verify-full` nor `sslrootcert`.
#[derive(Debug, PartialEq)]
struct TlsSettings {
    mode: String,
    root_cert: Option<String>,
}

fn parse(url: &str) -> std::result::Result<(tokio_postgres::Config, MakeRustlsConnect), String> {
    let (rest, tls) = split_tls_settings(url)?;
    let mut config: tokio_postgres::Config =
        rest.parse().map_err(|e: tokio_postgres::Error| e.to_string())?;
    let (tokio_mode, check) = match tls.mode.as_str() {
        "disable" => (tokio_postgres::config::SslMode::Disable, Check::Nothing),
        "allow" | "prefer" => (tokio_postgres::config::SslMode::Prefer, Check::Nothing),
        "require" => (tokio_postgres::config::SslMode::Require, Check::Nothing),
        "verify-ca" => (tokio_postgres::config::SslMode::Require, Check::Chain),
        "verify-full" => (tokio_postgres::config::SslMode::Require, Check::Full),
        other => {
            return Err(format!(
                "sslmode \"{other}\" is not one of disable, allow, prefer, require, verify-ca, verify-full"
            ))
        }
    };
    config.ssl_mode(tokio_mode);
    // As libpq: a root certificate given with prefer or require means verify-ca.
    let check = if check == Check::Nothing && tls.root_cert.is_some() && tls.mode != "disable" {
        Check::Chain
    } else {
        check
    };
    let roots = match check {
        Check::Nothing => None,
        _ => Some(load_roots(tls.root_cert.as_deref()).map_err(|e| e.to_string())?),
    };
    let tls_config = build(check, roots).map_err(|e| e.to_string())?;
    Ok((config, MakeRustlsConnect::new(tls_config)))
}

/// The settings this client reads from a URL itself (the rest is tokio-postgres's).
const TLS_KEYS: &[&str] = &["sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "sslcrl"];

/// Removes `sslmode` and `sslrootcert` from a URL or a key=value string; returns the rest and
/// the settings (`prefer` when not given).
fn split_tls_settings(url: &str) -> std::result::Result<(String, TlsSettings), String> {
    let mut tls = TlsSettings { mode: "prefer".into(), root_cert: None };
    let mut take = |key: &str, value: String| -> std::result::Result<bool, String> {
        match key {
            "sslmode" => tls.mode = value,
            "sslrootcert" => tls.root_cert = Some(value),
            "sslcert" | "sslkey" | "sslpassword" | "sslcrl" => {
                return Err(format!(
                    "{key} is not supported in a URL: build a rustls ClientConfig and use Database::with_tls"
                ))
            }
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

/// The root certificates: a PEM file, `system`, or (none given) `~/.postgresql/root.crt` when
/// it exists, else the system's store.
fn load_roots(root_cert: Option<&str>) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    let file = match root_cert {
        Some("system") => None,
        Some(path) => Some(PathBuf::from(path)),
        None => std::env::var_os("HOME")
            .map(|home| Path::new(&home).join(".postgresql/root.crt"))
            .filter(|p| p.exists()),
    };
    match file {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(&path)
                .map_err(|e| Error::InvalidArgument(format!("sslrootcert {}: {e}", path.display())))?;
            for cert in certs {
                let cert =
                    cert.map_err(|e| Error::InvalidArgument(format!("sslrootcert {}: {e}", path.display())))?;
                roots
                    .add(cert)
                    .map_err(|e| Error::InvalidArgument(format!("sslrootcert {}: {e}", path.display())))?;
            }
            if roots.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "sslrootcert {} holds no certificate",
                    path.display()
                )));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(Error::InvalidArgument(
                    "no root certificates: give sslrootcert=<PEM file> (the system's store is empty)".into(),
                ));
            }
        }
    }
    Ok(roots)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A rustls configuration as the URL settings make it: `verify` checks the server's chain
/// against `roots` (the system's store when `None`) and its host name; without `verify`, the
/// connection is encrypted but the certificate is not checked (libpq's `require`).
pub fn rustls_config(verify: bool, roots: Option<RootCertStore>) -> Result<ClientConfig> {
    if verify {
        let roots = match roots {
            Some(r) => r,
            None => load_roots(Some("system"))?,
        };
        build(Check::Full, Some(roots))
    } else {
        build(Check::Nothing, None)
    }
}

fn build(check: Check, roots: Option<RootCertStore>) -> Result<ClientConfig> {
    let tls_error = |e: rustls::Error| Error::InvalidArgument(format!("TLS configuration: {e}"));
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?;
    let config = match check {
        Check::Full => {
            builder.with_root_certificates(roots.expect("roots for verify-full")).with_no_client_auth()
        }
        Check::Chain => {
            let webpki = WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots.expect("roots for verify-ca")),
                provider(),
            )
            .build()
            .map_err(|e| Error::InvalidArgument(format!("TLS configuration: {e}")))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)))
                .with_no_client_auth()
        }
        Check::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(EncryptOnly(provider())))
            .with_no_client_auth(),
    };
    Ok(config)
}

/// `verify-ca`: the chain must lead to a root; the name in the certificate is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require`: encrypted, with the handshake's signatures checked, but any
/// certificate accepted (as libpq does without a root certificate).
#[derive(Debug)]
struct EncryptOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
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
        assert_eq!(tls, TlsSettings { mode: "verify-full".into(), root_cert: Some("/etc/ca.pem".into()) });
        let (rest, tls) = split("postgresql://u@h/db?sslmode=require");
        assert_eq!(
            (rest.as_str(), tls.mode.as_str(), tls.root_cert),
            ("postgresql://u@h/db", "require", None)
        );
        let (rest, tls) = split("postgres://u@h/db");
        assert_eq!((rest.as_str(), tls.mode.as_str()), ("postgres://u@h/db", "prefer"));
        let (rest, tls) = split("host=h user=u sslmode=verify-ca sslrootcert='/my certs/ca.pem' dbname=db");
        assert_eq!(rest, "host=h user=u dbname=db");
        assert_eq!(tls, TlsSettings { mode: "verify-ca".into(), root_cert: Some("/my certs/ca.pem".into()) });
    }

    #[test]
    fn bad_tls_settings_say_what_is_wrong() {
        let err = |url: &str| parse(url).err().unwrap();
        assert!(err("postgres://u@h/db?sslmode=sometimes").contains("verify-full"));
        assert!(err("postgres://u@h/db?sslcert=/c.pem").contains("Database::with_tls"));
        assert!(err("postgres://u@h/db?sslmode=verify-ca&sslrootcert=/nonexistent.pem")
            .contains("/nonexistent.pem"));
        assert!(err("host=h sslrootcert='unterminated").contains("unterminated"));
        // A password never appears in an error, however it is malformed (#24).
        for url in [
            "postgres://u@h/db?password=p%ssXYZZY",
            "postgres://u@h/db?password=p%ssXYZZY&sslmode=require",
            "postgres://u:p%zzXYZZY@h/db",
            "postgres://u@h/db?sslrootcert=%zz&password=XYZZY",
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
    }

    #[test]
    fn modes_map_to_what_tokio_postgres_negotiates() {
        use tokio_postgres::config::SslMode;
        for (mode, expected) in [
            ("disable", SslMode::Disable),
            ("allow", SslMode::Prefer),
            ("prefer", SslMode::Prefer),
            ("require", SslMode::Require),
        ] {
            let db = Database::from_url(&format!("postgres://u@h/db?sslmode={mode}"));
            assert_eq!(db.parts().unwrap().0.get_ssl_mode(), expected, "{mode}");
        }
        assert_eq!(
            Database::from_url("postgres://u@h/db").parts().unwrap().0.get_ssl_mode(),
            SslMode::Prefer
        );
    }
}
