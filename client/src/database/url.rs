//! A URL's settings: libpq's TLS keys taken out of it (into [`TlsSettings`]), the rest parsed by
//! tokio-postgres.
use std::path::PathBuf;

use super::{SslMode, TlsSettings};

pub(super) fn parse(url: &str) -> std::result::Result<(tokio_postgres::Config, TlsSettings), String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Database, Error};

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
}
