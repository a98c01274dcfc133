//! `rendezvous check`: does this URL work for a rendezvous host? Connects as the client does
//! and says what it found.
use crate::sql;
use rendezvous_client::Error;

/// Connects to `url`, prints the server, the TLS in use, the extension and what the role may
/// do; the exit status is 0 when the installed pg_rendezvous is the one this command speaks
/// and the role can run a host, 1 when the extension is missing or another version or the
/// role cannot run a host (an observer's, say). A connection that fails is an error (exit
/// status 2).
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
            role(&client, &user).await
        }
        Err(
            e @ (Error::ExtensionMissing | Error::VersionMismatch { .. } | Error::AlgorithmMismatch { .. }),
        ) => {
            println!("extension  {}", crate::status::escape_controls(&e.to_string()));
            Ok(1)
        }
        // No USAGE on the schema: a role with none of the extension's roles.
        Err(e) if e.sqlstate() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
            let user = crate::status::escape_controls(&user);
            println!("extension  installed, not readable by {user}");
            println!("role       {user} may not use pg_rendezvous: GRANT rendezvous_host TO {user} (docs/operations.md, Roles and grants)");
            Ok(1)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Prints what the session's role may do, and whether a dead holder's work moves at once;
/// 0 when it can run a host, 1 otherwise.
async fn role(client: &tokio_postgres::Client, user: &str) -> Result<i32, String> {
    let row = client.query_one(sql::CHECK_ROLE, &[]).await.map_err(|e| Error::from(e).to_string())?;
    let (host, observer, admin, sees_sessions): (bool, bool, bool, Option<bool>) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let user = crate::status::escape_controls(user);
    let ready = match (host, observer, admin) {
        (true, _, true) => {
            println!("role       {user} may run a host, read the status views and act as an admin (rendezvous_admin)");
            true
        }
        (true, true, false) => {
            println!("role       {user} may run a host and read the status views");
            true
        }
        (true, false, false) => {
            println!("role       {user} may run a host (rendezvous_host)");
            true
        }
        (false, true, _) => {
            println!(
                "role       {user} may read the status views only (rendezvous_observer): it cannot run a host; GRANT rendezvous_host TO {user}"
            );
            false
        }
        (false, false, _) => {
            println!("role       {user} may not use pg_rendezvous: GRANT rendezvous_host TO {user} (docs/operations.md, Roles and grants)");
            false
        }
    };
    if sees_sessions == Some(false) {
        println!(
            "takeover   the extension's owner cannot read other roles' sessions: a dead holder's work waits for its lease instead of moving at once; GRANT pg_read_all_stats TO the owner (docs/operations.md, The portable edition)"
        );
    } else {
        println!("takeover   a dead holder's work moves at once (its session is seen gone)");
    }
    Ok(if ready { 0 } else { 1 })
}
