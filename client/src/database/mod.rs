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
mod budget;
mod hosts;
mod tls;
mod url;

use std::path::PathBuf;
use std::sync::Arc;

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
    /// The cap on sessions, shared by the clones ([`with_max_connections`](Self::with_max_connections)).
    budget: Option<Arc<budget::Budget>>,
}

pub(crate) use budget::Permit;
pub(crate) use hosts::{subscribe as suspicions, Server};

/// How a [`Database`] uses TLS.
#[derive(Clone)]
enum Tls {
    /// libpq's settings: the process's connector for them is made again whenever a file it
    /// reads changed, so a rotated root certificate is picked up by the next connection, as
    /// with libpq.
    Settings(TlsSettings),
    /// A connector of the caller's own: TLS is required.
    Connector(MakeTlsConnector),
}

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
#[derive(Clone, Default, PartialEq, Eq, Hash)]
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
                .field("max_connections", &self.max_connections())
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
        Database::new(url::parse(url).map(|(config, tls)| (config, Tls::Settings(tls))))
    }

    /// From settings of your own and libpq's TLS settings (the config's own `ssl_mode` is
    /// not used: `tls.mode` decides).
    pub fn with_tls(config: tokio_postgres::Config, tls: TlsSettings) -> Database {
        Database::new(tls.effective_mode().map(|_| (config, Tls::Settings(tls))))
    }

    /// From settings and an OpenSSL connector of your own ([`postgres_openssl`] is
    /// re-exported). TLS is required: a server that declines it is refused (unless the
    /// config says `SslMode::Disable`), and the connector decides what is verified.
    pub fn with_connector(mut config: tokio_postgres::Config, tls: MakeTlsConnector) -> Database {
        if config.get_ssl_mode() == DriverMode::Prefer {
            config.ssl_mode(DriverMode::Require);
        }
        Database::new(Ok((config, Tls::Connector(tls))))
    }

    /// Settings without a cap.
    fn new(inner: std::result::Result<(tokio_postgres::Config, Tls), String>) -> Database {
        Database { inner, budget: None }
    }

    /// Caps the server sessions opened through this `Database` and its clones at `max`, so a
    /// host that builds every piece from clones of it (its [`Worker`](crate::Worker),
    /// [`LeaderElector`](crate::LeaderElector)s, [`Membership`](crate::Membership),
    /// [`Pool`](crate::Pool)s, [`connect`](crate::connect)) never holds more, reconnecting after
    /// a restart or a failover included: a connection counts from before it is opened until
    /// its socket is closed (a session the client gave up on a dead network path lives on at
    /// the server until keepalives end it). A connection past the cap waits until one ends,
    /// within its piece's connect timeout; pools close their idle connections for it first,
    /// and close the ones handed back while it waits. A [`Worker`](crate::Worker) lowers its
    /// `max_concurrent` to what the cap leaves beside its own 3 sessions; give the cap room for
    /// the other pieces too. docs/operations.md ("Connection budget") says how many each piece
    /// takes. `max` 0 is refused when connecting ([`Error::InvalidArgument`]).
    ///
    /// ```
    /// use rendezvous_client::database::Database;
    ///
    /// // A Worker with 4 handlers (3 sessions and one per running handler), a leader group (1).
    /// let db = Database::from_url("postgres://app@db.internal/app").with_max_connections(8);
    /// assert_eq!(db.max_connections(), Some(8));
    /// assert_eq!(db.clone().max_connections(), Some(8)); // the clones share the one cap
    /// ```
    #[must_use]
    pub fn with_max_connections(mut self, max: usize) -> Database {
        if max == 0 {
            self.inner = Err("max_connections must be at least 1".into());
        }
        self.budget = Some(Arc::new(budget::Budget::new(max)));
        self
    }

    /// The cap [`with_max_connections`](Self::with_max_connections) set, if any.
    pub fn max_connections(&self) -> Option<usize> {
        self.budget.as_ref().map(|b| b.limit())
    }

    /// The cap's shared state, if capped.
    pub(crate) fn budget(&self) -> Option<&Arc<budget::Budget>> {
        self.budget.as_ref()
    }

    /// The settings, or why the URL was refused.
    fn parts(&self) -> Result<(&tokio_postgres::Config, &Tls)> {
        match &self.inner {
            Ok((config, tls)) => Ok((config, tls)),
            Err(e) => Err(Error::InvalidArgument(format!("database URL: {e}"))),
        }
    }

    /// Opens a connection as libpq would with these settings (`allow` and `prefer` retry
    /// once the other way, TLS is not used over a Unix socket), naming the session
    /// `application_name` unless the settings name it. With a cap, waits for a place in it
    /// first: the permit returned is the connection's, to be dropped after it has ended. The
    /// hosts of a multi-host URL are tried one by one, suspect servers last (see [`hosts`]);
    /// the server connected to is returned.
    pub(crate) async fn open(
        &self,
        application_name: &str,
    ) -> Result<(tokio_postgres::Client, Connection, Option<Permit>, Server)> {
        let (config, tls) = self.parts()?;
        let permit = match &self.budget {
            Some(budget) => Some(budget.take().await),
            None => None,
        };
        let mut config = config.clone();
        if config.get_application_name().is_none() {
            config.application_name(application_name);
        }
        hosts::check(&config).map_err(|e| Error::InvalidArgument(format!("database URL: {e}")))?;
        let mut order = hosts::order(&config);
        if order.is_empty() {
            order.push((0, false)); // no host at all: the driver says so
        }
        let mut failed = None;
        for (host, was_suspect) in order {
            let one = hosts::only_host(&config, host);
            match connect_one(&one, tls).await {
                Ok((client, connection)) => {
                    let server = Server::of(&config, host);
                    server.connected(was_suspect);
                    return Ok((client, connection, permit, server));
                }
                Err(e) => {
                    if hosts::count(&config) > 1 {
                        tracing::info!(server = hosts::key(&config, host), error = %e, "could not connect to one of the URL's hosts");
                    }
                    failed = Some(e);
                }
            }
        }
        Err(failed.expect("at least one host tried"))
    }

    /// Asks the server to cancel what a connection these settings opened is running (a
    /// cancel request on a short connection of its own, as libpq's `PQcancel`).
    pub(crate) async fn cancel(&self, token: &tokio_postgres::CancelToken) -> Result<()> {
        let (config, tls) = self.parts()?;
        let (connector, _) = connector_for(config, tls)?;
        token.cancel_query(connector).await.map_err(Error::Db)
    }
}

/// Connects to the one host `config` names as libpq would (`allow` and `prefer` retry once
/// the other way, TLS is not used over a Unix socket).
async fn connect_one(
    config: &tokio_postgres::Config,
    tls: &Tls,
) -> Result<(tokio_postgres::Client, Connection)> {
    let (connector, mode) = connector_for(config, tls)?;
    let attempt = |ssl: DriverMode| {
        let mut config = config.clone();
        config.ssl_mode(ssl);
        let connector = connector.clone();
        async move { config.connect(connector).await }
    };
    let result = match mode {
        None => config.connect(connector.clone()).await,
        Some(SslMode::Disable) => attempt(DriverMode::Disable).await,
        // Plain first; TLS when the server refuses it (pg_hba.conf accepting TLS only).
        Some(SslMode::Allow) => match attempt(DriverMode::Disable).await {
            Err(e) if e.as_db_error().is_some() => attempt(DriverMode::Require).await,
            other => other,
        },
        // TLS if offered; a failed handshake tries again without, as libpq does.
        Some(SslMode::Prefer) => match attempt(DriverMode::Prefer).await {
            Err(e) if is_tls_failure(&e) => attempt(DriverMode::Disable).await,
            other => other,
        },
        Some(_) => attempt(DriverMode::Require).await,
    };
    result.map_err(Error::Connect)
}

/// The TLS connector for these settings, and the sslmode libpq would use (`None`: the
/// caller's own connector decides). libpq ignores sslmode over Unix sockets (the server offers
/// no TLS there), so no certificate file is read for them either.
fn connector_for(config: &tokio_postgres::Config, tls: &Tls) -> Result<(MakeTlsConnector, Option<SslMode>)> {
    let unix_only = config.get_hosts().iter().all(|h| !matches!(h, Host::Tcp(_)));
    Ok(match tls {
        Tls::Connector(c) => (c.clone(), unix_only.then_some(SslMode::Disable)),
        Tls::Settings(s) => {
            let mode = if unix_only {
                SslMode::Disable
            } else {
                s.effective_mode().map_err(|e| Error::InvalidArgument(format!("database URL: {e}")))?
            };
            (tls::ConnectorCache::shared().get(s, mode)?, Some(mode))
        }
    })
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
