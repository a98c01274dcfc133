//! sqlgen: makes pg_rendezvous's scripts from the extension's sources.
//!
//!   sqlgen upgrade CONTROL INSTALL MIGRATION OUTPUT
//!
//! writes to OUTPUT the upgrade script from A to B, where MIGRATION is the hand-written
//! `sql/migrations/A--B.sql` and INSTALL the install script of B that `cargo pgrx package`
//! generated; CONTROL (the control file) names the schema. scripts/install.sh and
//! scripts/package.sh run it; sql/README.md says how releases freeze its output.
mod split;
mod upgrade;

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["upgrade", control, install, migration, output] => {
            generate_upgrade(Path::new(control), Path::new(install), Path::new(migration), Path::new(output))
        }
        _ => Err("usage: sqlgen upgrade CONTROL INSTALL MIGRATION OUTPUT".to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sqlgen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn generate_upgrade(control: &Path, install: &Path, migration: &Path, output: &Path) -> Result<(), String> {
    let extension = control
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".control"))
        .ok_or_else(|| format!("{}: not a .control file", control.display()))?;
    let control_text = read(control)?;
    let schema = control_text
        .lines()
        .find_map(|l| l.trim().strip_prefix("schema").map(|v| v.trim_start()))
        .and_then(|v| v.strip_prefix('=').map(|v| v.trim().trim_matches('\'')))
        .ok_or_else(|| format!("{}: no schema = '…' line", control.display()))?;
    let migration_name = migration.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let (from, to) = migration_name
        .strip_suffix(".sql")
        .and_then(|n| n.split_once("--"))
        .ok_or_else(|| format!("{}: a migration is named FROM--TO.sql", migration.display()))?;
    let install_name = install.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if install_name != format!("{extension}--{to}.sql") {
        return Err(format!(
            "{}: the migration leads to {to}, so the install script must be {extension}--{to}.sql",
            install.display()
        ));
    }
    let migration_label = format!("sql/migrations/{migration_name}");
    let script = upgrade::upgrade_script(
        extension,
        schema,
        from,
        to,
        &migration_label,
        &read(migration)?,
        &read(install)?,
    )?;
    std::fs::write(output, script).map_err(|e| format!("{}: {e}", output.display()))
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}
