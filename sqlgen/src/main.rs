//! sqlgen: makes pg_rendezvous's scripts from the extension's sources.
//!
//!   sqlgen upgrade CONTROL INSTALL MIGRATION OUTPUT
//!
//! writes to OUTPUT the upgrade script from A to B, where MIGRATION is the hand-written
//! `sql/migrations/A--B.sql` and INSTALL the install script of B that `cargo pgrx package`
//! generated; CONTROL (the control file) names the schema. scripts/install.sh and
//! scripts/package.sh run it; sql/README.md says how releases freeze its output.
//!
//!   sqlgen portable CONTROL INSTALL PORTABLE_DIR OUTPUT_DIR
//!
//! writes the portable edition of INSTALL's version into OUTPUT_DIR:
//! `<extension>-<version>-portable.sql` (for psql) and `<extension>-<version>-pg_tle.sql`,
//! the C functions replaced by PORTABLE_DIR's `*.sql` (portable.rs).
mod portable;
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
        ["portable", control, install, sources, output] => {
            generate_portable(Path::new(control), Path::new(install), Path::new(sources), Path::new(output))
        }
        _ => Err("usage: sqlgen upgrade CONTROL INSTALL MIGRATION OUTPUT\n       \
                  sqlgen portable CONTROL INSTALL PORTABLE_DIR OUTPUT_DIR"
            .to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sqlgen: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The extension a control file is for: its name without `.control`.
fn extension_name(control: &Path) -> Result<&str, String> {
    control
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".control"))
        .ok_or_else(|| format!("{}: not a .control file", control.display()))
}

/// A setting of the control file (`name = 'value'`).
fn control_setting(control: &Path, text: &str, name: &str) -> Result<String, String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(name).map(str::trim_start).and_then(|v| v.strip_prefix('=')))
        .map(|v| v.trim().trim_matches('\'').to_string())
        .ok_or_else(|| format!("{}: no {name} = '…' line", control.display()))
}

fn generate_portable(control: &Path, install: &Path, sources: &Path, output: &Path) -> Result<(), String> {
    let extension = extension_name(control)?;
    let control_text = read(control)?;
    let schema = control_setting(control, &control_text, "schema")?;
    let comment = control_setting(control, &control_text, "comment")?;
    let version = install
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix(&format!("{extension}--")))
        .and_then(|n| n.strip_suffix(".sql"))
        .filter(|v| !v.contains("--"))
        .ok_or_else(|| {
            format!("{}: an install script is named {extension}--VERSION.sql", install.display())
        })?;
    let mut files: Vec<_> = std::fs::read_dir(sources)
        .map_err(|e| format!("{}: {e}", sources.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    let sources = files
        .iter()
        .map(|p| Ok(portable::Source { name: p.display().to_string(), text: read(p)? }))
        .collect::<Result<Vec<_>, String>>()?;
    let scripts =
        portable::portable_scripts(extension, &schema, version, &comment, &read(install)?, &sources)?;
    std::fs::create_dir_all(output).map_err(|e| format!("{}: {e}", output.display()))?;
    for (name, text) in [("portable", &scripts.psql), ("pg_tle", &scripts.pg_tle)] {
        let path = output.join(format!("{extension}-{version}-{name}.sql"));
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn generate_upgrade(control: &Path, install: &Path, migration: &Path, output: &Path) -> Result<(), String> {
    let extension = extension_name(control)?;
    let schema = control_setting(control, &read(control)?, "schema")?;
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
        &schema,
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
