//! `rendezvous install --portable`: installs the portable edition (SQL and PL/pgSQL only, for a
//! server that loads no library, such as a managed PostgreSQL) into one database, or upgrades
//! it to this command's version, as the connected role (the database's owner), from the
//! scripts that come with the command: no Rust toolchain and no psql on the machine.
use std::path::{Path, PathBuf};

use rendezvous_client::{Error, EXTENSION_VERSION};
use tokio_postgres::error::SqlState;

use crate::sql;

/// Where the portable scripts are: `given` (`--scripts`), else `$RENDEZVOUS_PORTABLE_DIR`,
/// else `share/rendezvous/portable` beside the command's `bin/` (`/usr/share/rendezvous/portable`
/// for the Debian package's `/usr/bin/rendezvous`; the same in the binary tarball).
pub fn scripts_dir(given: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(dir) = given.or_else(|| std::env::var_os("RENDEZVOUS_PORTABLE_DIR").map(PathBuf::from)) {
        return Ok(dir);
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this command's path: {e}"))?;
    let beside = exe.parent().and_then(Path::parent).map(|prefix| prefix.join("share/rendezvous/portable"));
    beside.filter(|d| d.is_dir()).ok_or_else(|| {
        format!(
            "no portable scripts beside {} (share/rendezvous/portable): give --scripts DIR, the directory with \
             pg_rendezvous-{EXTENSION_VERSION}-portable.sql (scripts/package.sh makes it)",
            exe.display()
        )
    })
}

/// The script that installs this version, or the ones that upgrade `from` to it (each
/// `pg_rendezvous-<a>--<b>-portable.sql`, followed from `from`, taking at each version the step
/// that goes furthest without passing this one), in the order to run them.
pub fn scripts_to_run(dir: &Path, from: Option<&str>) -> Result<Vec<PathBuf>, String> {
    let Some(mut at) = from.map(str::to_owned) else {
        let install = dir.join(format!("pg_rendezvous-{EXTENSION_VERSION}-portable.sql"));
        return if install.is_file() {
            Ok(vec![install])
        } else {
            Err(format!("{} is not there", install.display()))
        };
    };
    let names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let mut path = Vec::new();
    while at != EXTENSION_VERSION {
        let prefix = format!("pg_rendezvous-{at}--");
        let next = names
            .iter()
            .filter_map(|n| n.strip_prefix(&prefix)?.strip_suffix("-portable.sql"))
            .filter(|to| !newer(to, EXTENSION_VERSION))
            .max_by(|a, b| parts(a).cmp(&parts(b)))
            .ok_or_else(|| {
                format!(
                    "no upgrade from {at} in {} (pg_rendezvous-{at}--<version>-portable.sql): this command \
                     upgrades to {EXTENSION_VERSION}",
                    dir.display()
                )
            })?;
        path.push(dir.join(format!("{prefix}{next}-portable.sql")));
        if path.len() > names.len() {
            return Err(format!("the upgrade scripts in {} go round in a circle", dir.display()));
        }
        at = next.to_owned();
    }
    Ok(path)
}

/// Installs or upgrades the portable edition in the database `url` names, as its role; prints
/// what it did. 0: installed, upgraded or already this version; an error (exit status 2) when
/// the native extension is there (it upgrades with `ALTER EXTENSION`), the installed version is
/// newer than this command, a script is missing or the role may not create it.
pub async fn run(url: &str, dir: &Path) -> Result<i32, String> {
    let client = rendezvous_client::connect_as(url, "rendezvous install").await.map_err(|e| e.to_string())?;
    let row = client.query_one(sql::CHECK_SESSION, &[]).await.map_err(|e| Error::from(e).to_string())?;
    let (user, db): (String, String) = (row.get(0), row.get(1));
    let from = match rendezvous_client::check_extension(&client).await {
        Err(Error::ExtensionMissing) => None,
        Ok(installed) if installed.edition == "portable" => {
            println!("pg_rendezvous {installed} is installed in database {db}: nothing to do");
            return Ok(0);
        }
        Ok(installed) => return Err(native_installed(&installed.to_string())),
        Err(Error::VersionMismatch { installed, .. }) => {
            // An extension row is the native edition (0.1.0 and 0.2.0 have no edition()).
            let row = client
                .query_one(rendezvous_client::sql::EXTENSION_INSTALLED, &[])
                .await
                .map_err(|e| Error::from(e).to_string())?;
            if row.get::<_, Option<String>>(0).is_some() {
                return Err(native_installed(&format!("{installed} (native edition)")));
            }
            if newer(&installed, EXTENSION_VERSION) {
                return Err(format!(
                    "pg_rendezvous {installed} is installed, newer than this command ({EXTENSION_VERSION}): use the \
                     rendezvous command of that version"
                ));
            }
            Some(installed)
        }
        Err(e) => return Err(e.to_string()),
    };
    for script in scripts_to_run(dir, from.as_deref())? {
        let text = std::fs::read_to_string(&script).map_err(|e| format!("{}: {e}", script.display()))?;
        // Each script is one transaction (BEGIN … COMMIT): a failed one leaves nothing behind.
        if let Err(e) = client.batch_execute(&text).await {
            let _ = client.batch_execute("ROLLBACK").await;
            let hint = if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
                format!(
                    "; run it as the owner of database {db} (CREATEROLE too, unless the roles rendezvous_host, \
                     rendezvous_observer and rendezvous_admin exist): docs/operations.md, The portable edition"
                )
            } else {
                String::new()
            };
            return Err(format!("{}: {}{hint}", script.display(), Error::from(e)));
        }
    }
    let installed = rendezvous_client::check_extension(&client).await.map_err(|e| e.to_string())?;
    match from {
        None => println!("installed pg_rendezvous {installed} in database {db} as {user}"),
        Some(from) => {
            println!("upgraded pg_rendezvous from {from} to {installed} in database {db} as {user}")
        }
    }
    println!("next: GRANT rendezvous_host TO <the hosts' role>; then `rendezvous check --database-url …` as that role");
    Ok(0)
}

fn native_installed(what: &str) -> String {
    format!(
        "the native extension pg_rendezvous {what} is installed here: it is upgraded by installing this version's \
         package and running ALTER EXTENSION pg_rendezvous UPDATE, not by the portable scripts"
    )
}

/// Whether version `a` is above `b` (dotted numbers).
fn newer(a: &str, b: &str) -> bool {
    parts(a) > parts(b)
}

fn parts(version: &str) -> Vec<u64> {
    version.split('.').map(|p| p.parse::<u64>().unwrap_or(0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The install script for a fresh database, the chain of upgrade scripts from an older
    /// version, and clear errors for what is missing.
    #[test]
    fn the_scripts_to_run_follow_the_upgrade_path() {
        let dir = std::env::temp_dir().join(format!("rendezvous-install-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let v = EXTENSION_VERSION;
        for name in [
            format!("pg_rendezvous-{v}-portable.sql"),
            "pg_rendezvous-0.3.0--0.3.1-portable.sql".to_owned(),
            "pg_rendezvous-0.3.0--9.0.0-portable.sql".to_owned(),
            "pg_rendezvous-0.2.9--0.3.0-portable.sql".to_owned(),
            format!("pg_rendezvous-0.3.0--{v}-portable.sql"),
        ] {
            std::fs::write(dir.join(name), "").unwrap();
        }
        let names = |p: Vec<PathBuf>| {
            p.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect::<Vec<_>>()
        };
        assert_eq!(names(scripts_to_run(&dir, None).unwrap()), [format!("pg_rendezvous-{v}-portable.sql")]);
        assert_eq!(
            names(scripts_to_run(&dir, Some("0.2.9")).unwrap()),
            [
                "pg_rendezvous-0.2.9--0.3.0-portable.sql".to_owned(),
                format!("pg_rendezvous-0.3.0--{v}-portable.sql")
            ]
        );
        assert!(scripts_to_run(&dir, Some("0.1.0")).unwrap_err().contains("no upgrade from 0.1.0"));
        std::fs::remove_file(dir.join(format!("pg_rendezvous-{v}-portable.sql"))).unwrap();
        assert!(scripts_to_run(&dir, None).unwrap_err().contains("is not there"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(newer("0.10.0", "0.4.0") && !newer("0.3.0", "0.4.0") && !newer(v, v));
    }
}
