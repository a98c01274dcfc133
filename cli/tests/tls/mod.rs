//! TLS as libpq decides it: certificates made by the test (as PostgreSQL's docs make them and
//! as CAs do), a server that serves each in turn, and `psql` as the oracle for every
//! `sslmode` and root setting.
use std::path::{Path, PathBuf};
use std::process::Command;

use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::x509::extension::{BasicConstraints, KeyUsage, SubjectAlternativeName};
use openssl::x509::{X509Builder, X509NameBuilder, X509};
use rendezvous_cli::cluster::Cluster;

/// A key and its certificate.
pub struct Cert {
    pub key: PKey<Private>,
    pub cert: X509,
}

impl Cert {
    pub fn pem(&self) -> String {
        String::from_utf8(self.cert.to_pem().unwrap()).unwrap()
    }

    pub fn key_pem(&self) -> String {
        String::from_utf8(self.key.private_key_to_pem_pkcs8().unwrap()).unwrap()
    }
}

/// What a certificate says, and who signs it (itself when `issuer` is `None`).
pub struct Spec<'a> {
    pub cn: &'a str,
    /// 1 for an X.509 v1 certificate (no extensions at all), else 3.
    pub version: i32,
    pub dns: &'a [&'a str],
    pub ips: &'a [&'a str],
    pub ca: bool,
    /// Valid from `days.0` to `days.1` days from now.
    pub days: (i64, i64),
    pub issuer: Option<&'a Cert>,
}

impl Default for Spec<'_> {
    fn default() -> Self {
        Spec { cn: "localhost", version: 3, dns: &[], ips: &[], ca: false, days: (-1, 30), issuer: None }
    }
}

pub fn make(spec: Spec<'_>) -> Cert {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    let key = PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap();
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_nid(Nid::COMMONNAME, spec.cn).unwrap();
    let name = name.build();
    let mut b = X509Builder::new().unwrap();
    b.set_version(spec.version - 1).unwrap();
    let mut serial = BigNum::new().unwrap();
    serial.rand(63, MsbOption::MAYBE_ZERO, false).unwrap();
    b.set_serial_number(&serial.to_asn1_integer().unwrap()).unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_issuer_name(spec.issuer.map_or(&*name, |i| i.cert.subject_name())).unwrap();
    b.set_pubkey(&key).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    b.set_not_before(&Asn1Time::from_unix(now + spec.days.0 * 86_400).unwrap()).unwrap();
    b.set_not_after(&Asn1Time::from_unix(now + spec.days.1 * 86_400).unwrap()).unwrap();
    if spec.version == 3 {
        if spec.ca {
            b.append_extension(BasicConstraints::new().critical().ca().build().unwrap()).unwrap();
            b.append_extension(KeyUsage::new().critical().key_cert_sign().crl_sign().build().unwrap())
                .unwrap();
        } else {
            b.append_extension(BasicConstraints::new().build().unwrap()).unwrap();
        }
        if !spec.dns.is_empty() || !spec.ips.is_empty() {
            let mut san = SubjectAlternativeName::new();
            for d in spec.dns {
                san.dns(d);
            }
            for ip in spec.ips {
                san.ip(ip);
            }
            let ext = san.build(&b.x509v3_context(spec.issuer.map(|i| &*i.cert), None)).unwrap();
            b.append_extension(ext).unwrap();
        }
    }
    b.sign(spec.issuer.map_or(&key, |i| &i.key), MessageDigest::sha256()).unwrap();
    Cert { key, cert: b.build() }
}

/// A CA for the tests.
pub fn ca(cn: &str) -> Cert {
    make(Spec { cn, ca: true, days: (-1, 365), ..Spec::default() })
}

/// Serves `server` from `cluster` (restarting it), TLS on; `tls_only` leaves no plain line in
/// pg_hba.conf for TCP.
pub fn serve(cluster: &Cluster, server: &Cert, tls_only: bool) {
    let dir = cluster.dir();
    let (cert_file, key_file) = (dir.join("server.crt"), dir.join("server.key"));
    std::fs::write(&cert_file, server.pem()).unwrap();
    std::fs::write(&key_file, server.key_pem()).unwrap();
    for f in [&cert_file, &key_file] {
        cluster.give_to_server(f).unwrap();
    }
    let kind = if tls_only { "hostssl" } else { "host" };
    cluster
        .configure(
            &[
                ("ssl", "on"),
                ("ssl_cert_file", cert_file.to_str().unwrap()),
                ("ssl_key_file", key_file.to_str().unwrap()),
            ],
            // The local socket stays for the server's own tools.
            Some(&format!(
                "local all all trust\n{kind} all all 127.0.0.1/32 trust\n{kind} all all ::1/128 trust\n"
            )),
        )
        .unwrap();
}

/// The newest `psql` on this machine with libpq 16 or later (the version whose rules the
/// client follows: `sslrootcert=system`), with its own libpq.
fn oracle_psql() -> PathBuf {
    let mut candidates: Vec<PathBuf> =
        std::env::var_os("RENDEZVOUS_ORACLE_PSQL").map(PathBuf::from).into_iter().collect();
    for major in [18, 17, 16] {
        candidates.push(PathBuf::from(format!("/opt/pg_rendezvous/postgresql/{major}/bin/psql")));
        candidates.push(PathBuf::from(format!("/usr/lib/postgresql/{major}/bin/psql")));
    }
    candidates.into_iter().find(|p| p.exists()).unwrap_or_else(|| {
        panic!("no psql of PostgreSQL 16 or later to compare with: scripts/setup.sh installs one under /opt/pg_rendezvous (or set RENDEZVOUS_ORACLE_PSQL)")
    })
}

/// Connected, and whether over TLS; `None` when refused.
type Outcome = Option<bool>;

/// Runs `command` with a clean libpq environment: HOME without ~/.postgresql, no PG*
/// variables, and `SSL_CERT_FILE` as given (what `sslrootcert=system` reads).
fn clean(mut command: Command, home: &Path, cert_file: Option<&Path>) -> Command {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("PG") || key == "DATABASE_URL" || key.starts_with("SSL_CERT") {
            command.env_remove(key);
        }
    }
    command.env("HOME", home).env("PGCONNECT_TIMEOUT", "10");
    if let Some(f) = cert_file {
        command.env("SSL_CERT_FILE", f);
    }
    command
}

fn by_psql(psql: &Path, url: &str, home: &Path, cert_file: Option<&Path>) -> (Outcome, String) {
    let mut c = Command::new(psql);
    c.args(["-X", "-A", "-t", "-c", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", url]);
    let out = clean(c, home, cert_file).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let said = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    match out.status.code() {
        Some(0) => (Some(stdout == "t"), said),
        _ => (None, said),
    }
}

fn by_client(url: &str, home: &Path, cert_file: Option<&Path>) -> (Outcome, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rendezvous"));
    c.args(["check", "--database-url", url]);
    let out = clean(c, home, cert_file).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let said = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    match out.status.code() {
        Some(0 | 1) => {
            let tls = stdout.lines().find_map(|l| l.strip_prefix("tls")).unwrap_or("").trim().to_owned();
            (Some(tls != "none"), format!("{said}{stdout}"))
        }
        _ => (None, said),
    }
}

/// For each server certificate, each `sslmode`, each root setting, both host forms and
/// pg_hba.conf with and without plain TCP: `psql` (libpq) and the client both connect, with
/// or without TLS alike, or both refuse.
#[test]
fn tls_accepts_and_refuses_exactly_what_libpq_does() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(Cluster::start()).unwrap();
    let psql = oracle_psql();
    let dir = cluster.dir().to_owned();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();

    let root = ca("rendezvous test CA");
    let root_file = dir.join("root.pem");
    std::fs::write(&root_file, root.pem()).unwrap();
    let servers: Vec<(&str, Cert)> = vec![
        // PostgreSQL's "Creating Certificates" recipe: v1, the name in CN only.
        ("v1 CN only", make(Spec { version: 1, issuer: Some(&root), ..Spec::default() })),
        ("v3 CN only", make(Spec { issuer: Some(&root), ..Spec::default() })),
        (
            "v3 DNS SAN",
            make(Spec { cn: "server", dns: &["localhost"], issuer: Some(&root), ..Spec::default() }),
        ),
        (
            "v3 IP SAN",
            make(Spec { cn: "localhost", ips: &["127.0.0.1"], issuer: Some(&root), ..Spec::default() }),
        ),
        (
            "wildcard SAN",
            make(Spec {
                cn: "x",
                dns: &["*.localhost", "db.example.com"],
                issuer: Some(&root),
                ..Spec::default()
            }),
        ),
        (
            "wrong name",
            make(Spec {
                cn: "db.example.com",
                dns: &["db.example.com"],
                issuer: Some(&root),
                ..Spec::default()
            }),
        ),
        (
            "expired",
            make(Spec { dns: &["localhost"], days: (-30, -1), issuer: Some(&root), ..Spec::default() }),
        ),
        ("self-signed", make(Spec { dns: &["localhost"], ..Spec::default() })),
    ];
    let modes = ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"];
    let missing = dir.join("no-such-root.pem");
    // (label, sslrootcert, SSL_CERT_FILE): `system` once with the machine's store (which does
    // not hold the test CA) and once with the test CA as the store.
    let roots: Vec<(&str, Option<String>, Option<&Path>)> = vec![
        ("file", Some(root_file.display().to_string()), None),
        ("missing file", Some(missing.display().to_string()), None),
        ("none", None, None),
        ("system", Some("system".into()), None),
        ("system = CA", Some("system".into()), Some(root_file.as_path())),
    ];
    let mut cases = Vec::new();
    for host in ["localhost", "127.0.0.1"] {
        for mode in modes {
            for (root_label, root, cert_file) in &roots {
                let mut url =
                    format!("postgresql://postgres@{host}:{}/postgres?sslmode={mode}", cluster.port);
                if let Some(r) = root {
                    url.push_str(&format!("&sslrootcert={r}"));
                }
                cases.push((format!("{host} {mode} {root_label}"), url, *cert_file));
            }
        }
    }

    let mut mismatches = Vec::new();
    let (mut connected, mut refused, mut plain) = (0, 0, 0);
    for tls_only in [false, true] {
        for (server_label, server) in &servers {
            serve(&cluster, server, tls_only);
            let hba = if tls_only { "hostssl only" } else { "host" };
            let next = std::sync::atomic::AtomicUsize::new(0);
            let results = std::sync::Mutex::new(Vec::new());
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((label, url, cert_file)) = cases.get(i) else { break };
                        let (want, why_not) = by_psql(&psql, url, &home, *cert_file);
                        let (got, said) = by_client(url, &home, *cert_file);
                        results.lock().unwrap().push((
                            format!("{server_label}, {hba}, {label}"),
                            want,
                            got,
                            why_not,
                            said,
                        ));
                    });
                }
            });
            for (case, want, got, why_not, said) in results.into_inner().unwrap() {
                match want {
                    Some(true) => connected += 1,
                    Some(false) => plain += 1,
                    None => refused += 1,
                }
                if want != got {
                    mismatches.push(format!("{case}: psql {want:?} ({why_not}), client {got:?} ({said})"));
                }
            }
        }
    }
    // Over the Unix socket libpq ignores sslmode, and reads no certificate file: a missing
    // root file does not fail verify-full there (only sslrootcert=system with a weak mode does,
    // as everywhere).
    for mode in modes {
        for (root_label, root, cert_file) in &roots {
            let mut url = format!(
                "postgresql://postgres@/postgres?host={}&port={}&sslmode={mode}",
                dir.display(),
                cluster.port
            );
            if let Some(r) = root {
                url.push_str(&format!("&sslrootcert={r}"));
            }
            let (want, why_not) = by_psql(&psql, &url, &home, *cert_file);
            let (got, said) = by_client(&url, &home, *cert_file);
            if want != got {
                mismatches.push(format!(
                    "unix socket {mode} {root_label}: psql {want:?} ({why_not}), client {got:?} ({said})"
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} cases differ from libpq:\n{}",
        mismatches.len(),
        connected + refused + plain,
        mismatches.join("\n")
    );
    // The table is not trivial: each outcome happens, and the headline cases hold.
    assert!(
        connected > 100 && refused > 100 && plain > 10,
        "{connected} over TLS, {plain} plain, {refused} refused"
    );
    let headline = format!(
        "postgresql://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        cluster.port,
        root_file.display()
    );
    serve(&cluster, &servers[0].1, true);
    assert_eq!(
        by_client(&headline, &home, None).0,
        Some(true),
        "a v1 certificate with the name in CN, verify-full"
    );
    drop(cluster);
}

/// Client certificates (`sslcert`, `sslkey`, `sslpassword`, and libpq's default files under
/// `~/.postgresql`) against a server that authenticates by certificate: the client connects
/// and refuses as `psql` does.
#[test]
fn client_certificates_work_as_libpq_reads_them() {
    use std::os::unix::fs::PermissionsExt;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(Cluster::start()).unwrap();
    let psql = oracle_psql();
    let dir = cluster.dir().to_owned();
    let root = ca("rendezvous test CA");
    let root_file = dir.join("root.pem");
    std::fs::write(&root_file, root.pem()).unwrap();
    let server = make(Spec { dns: &["localhost"], issuer: Some(&root), ..Spec::default() });
    serve(&cluster, &server, true);
    let server_ca = dir.join("client-ca.pem");
    std::fs::write(&server_ca, root.pem()).unwrap();
    cluster.give_to_server(&server_ca).unwrap();
    cluster
        .configure(
            &[("ssl_ca_file", server_ca.to_str().unwrap())],
            Some("local all all trust\nhostssl all all 127.0.0.1/32 cert\nhostssl all all ::1/128 cert\n"),
        )
        .unwrap();

    // The certificate authenticates as its CN: the role postgres.
    let client = make(Spec { cn: "postgres", issuer: Some(&root), ..Spec::default() });
    let write = |name: &str, text: &[u8], mode: u32| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    };
    let cert = write("client.crt", client.pem().as_bytes(), 0o644);
    let key = write("client.key", client.key_pem().as_bytes(), 0o600);
    let open_key = write("client-open.key", client.key_pem().as_bytes(), 0o644);
    let encrypted = client
        .key
        .private_key_to_pem_pkcs8_passphrase(openssl::symm::Cipher::aes_256_cbc(), b"s3cret")
        .unwrap();
    let encrypted_key = write("client-encrypted.key", &encrypted, 0o600);
    let empty_home = dir.join("home");
    std::fs::create_dir_all(&empty_home).unwrap();
    // libpq's default files, in a home of their own.
    let home_with_files = dir.join("home-with-files");
    std::fs::create_dir_all(home_with_files.join(".postgresql")).unwrap();
    std::fs::copy(&cert, home_with_files.join(".postgresql/postgresql.crt")).unwrap();
    std::fs::copy(&key, home_with_files.join(".postgresql/postgresql.key")).unwrap();
    std::fs::copy(&root_file, home_with_files.join(".postgresql/root.crt")).unwrap();

    let base = format!("postgresql://postgres@localhost:{}/postgres?sslmode=verify-full", cluster.port);
    let with_root = format!("{base}&sslrootcert={}", root_file.display());
    let cases: Vec<(&str, String, &Path, bool)> = vec![
        ("no client certificate", with_root.clone(), &empty_home, false),
        (
            "sslcert and sslkey",
            format!("{with_root}&sslcert={}&sslkey={}", cert.display(), key.display()),
            &empty_home,
            true,
        ),
        (
            "a key others can read",
            format!("{with_root}&sslcert={}&sslkey={}", cert.display(), open_key.display()),
            &empty_home,
            false,
        ),
        (
            "an encrypted key and its sslpassword",
            format!(
                "{with_root}&sslcert={}&sslkey={}&sslpassword=s3cret",
                cert.display(),
                encrypted_key.display()
            ),
            &empty_home,
            true,
        ),
        (
            "an encrypted key and a wrong sslpassword",
            format!(
                "{with_root}&sslcert={}&sslkey={}&sslpassword=wrong",
                cert.display(),
                encrypted_key.display()
            ),
            &empty_home,
            false,
        ),
        (
            "sslcert without its key file",
            format!("{with_root}&sslcert={}&sslkey={}", cert.display(), dir.join("nope.key").display()),
            &empty_home,
            false,
        ),
        ("~/.postgresql's files", base.clone(), &home_with_files, true),
    ];
    for (label, url, home, expected) in cases {
        let (want, why_not) = by_psql(&psql, &url, home, None);
        let (got, said) = by_client(&url, home, None);
        assert_eq!(want.is_some(), expected, "{label}: psql {want:?} ({why_not})");
        assert_eq!(got, want, "{label}: psql {want:?} ({why_not}), client {got:?} ({said})");
    }
    // Without sslpassword an encrypted key is refused, never prompted for (psql would ask on
    // the terminal, so it is not asked here).
    let url = format!("{with_root}&sslcert={}&sslkey={}", cert.display(), encrypted_key.display());
    let (got, said) = by_client(&url, &empty_home, None);
    assert!(got.is_none() && said.contains("sslpassword"), "{said}");
    drop(cluster);
}
