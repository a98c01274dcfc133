//! `rendezvous check`: does this URL work for a rendezvous host? Connects as the client does
//! and says what it found.
use crate::sql;
use rendezvous_client::Error;

/// Connects to `url`, prints the server, the TLS in use and the extension; the exit status
/// is 0 when the installed pg_rendezvous is the one this command speaks, 1 when it is missing
/// or another version. A connection that fails is an error (exit status 2).
pub async fn run(url: &str) -> Result<i32, String> {
    let client = rendezvous_client::connect_as(url, "rendezvous check").await.map_err(|e| e.to_string())?;
    let row = client.query_one(sql::CHECK_SESSION, &[]).await.map_err(|e| Error::from(e).to_string())?;
    let (user, db, version, server): (String, String, String, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let tls = if row.get::<_, bool>(4) {
        format!(
            "{} {}",
            row.get::<_, Option<String>>(5).unwrap_or_default(),
            row.get::<_, Option<String>>(6).unwrap_or_default()
        )
    } else {
        "none".to_owned()
    };
    let report = format!(
        "connected  {server}, database {db} as {user}\nserver     PostgreSQL {version}\ntls        {tls}\n"
    );
    // Names come from the server: printed escaped, as every text output is.
    print!("{}", crate::status::escape_controls(&report));
    match rendezvous_client::check_extension(&client).await {
        Ok(v) => {
            println!("extension  pg_rendezvous {v}");
            Ok(0)
        }
        Err(
            e @ (Error::ExtensionMissing | Error::VersionMismatch { .. } | Error::AlgorithmMismatch { .. }),
        ) => {
            println!("extension  {}", crate::status::escape_controls(&e.to_string()));
            Ok(1)
        }
        Err(e) => Err(e.to_string()),
    }
}
