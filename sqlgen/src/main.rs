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
mod error;
mod portable;
mod split;
mod upgrade;

use std::path::Path;
use std::process::ExitCode;

use error::{Error, Result};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["upgrade", control, install, migration, output] => {
            generate_upgrade(Path::new(control), Path::new(install), Path::new(migration), Path::new(output))
        }
        ["portable", control, install, migrations, sources, output] => generate_portable(
            Path::new(control),
            Path::new(install),
            Path::new(migrations),
            Path::new(sources),
            Path::new(output),
        ),
        _ => Err("usage: sqlgen upgrade CONTROL INSTALL MIGRATION OUTPUT\n       \
                  sqlgen portable CONTROL INSTALL MIGRATIONS_DIR PORTABLE_DIR OUTPUT_DIR"
            .into()),
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
fn extension_name(control: &Path) -> Result<&str> {
    control
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".control"))
        .ok_or_else(|| Error::from(format!("{}: not a .control file", control.display())))
}

/// A setting of the control file (`name = 'value'`).
fn control_setting(control: &Path, text: &str, name: &str) -> Result<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(name).map(str::trim_start).and_then(|v| v.strip_prefix('=')))
        .map(|v| v.trim().trim_matches('\'').to_string())
        .ok_or_else(|| Error::from(format!("{}: no {name} = '…' line", control.display())))
}

/// The portable edition of the version `install` makes, from the portable sources: its
/// install script in both forms, and an upgrade in both forms for each portable migration
/// `PORTABLE_DIR/migrations/FROM--VERSION.sql` (with the native `MIGRATIONS_DIR/FROM--VERSION.sql`).
fn generate_portable(
    control: &Path,
    install: &Path,
    migrations: &Path,
    sources: &Path,
    output: &Path,
) -> Result<()> {
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
    let sources_read = sql_files(sources)?
        .iter()
        .map(|p| Ok(portable::Source { name: p.display().to_string(), text: read(p)? }))
        .collect::<Result<Vec<_>>>()?;
    let scripts =
        portable::portable_scripts(extension, &schema, version, &comment, &read(install)?, &sources_read)?;
    std::fs::create_dir_all(output).map_err(|e| Error::io(output, e))?;
    write_forms(output, &format!("{extension}-{version}"), &scripts)?;
    for portable_migration in sql_files(&sources.join("migrations"))? {
        let name = portable_migration.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let from = name.strip_suffix(&format!("--{version}.sql")).ok_or_else(|| {
            format!("{}: a portable migration is named FROM--{version}.sql", portable_migration.display())
        })?;
        let migration = migrations.join(&name);
        let step = portable::Step {
            from: from.to_string(),
            to: version.to_string(),
            migration: portable::Source {
                name: format!("sql/migrations/{name}"),
                text: read(&migration).map_err(|e| format!("{e} (the native migration of {name})"))?,
            },
            portable_migration: portable::Source {
                name: format!("portable/migrations/{name}"),
                text: read(&portable_migration)?,
            },
        };
        let upgrade =
            portable::portable_upgrade_scripts(extension, &schema, &step, &read(install)?, &sources_read)?;
        write_forms(output, &format!("{extension}-{from}--{version}"), &upgrade)?;
    }
    Ok(())
}

/// Writes `PREFIX-portable.sql` and `PREFIX-pg_tle.sql`.
fn write_forms(output: &Path, prefix: &str, scripts: &portable::Portable) -> Result<()> {
    for (name, text) in [("portable", &scripts.psql), ("pg_tle", &scripts.pg_tle)] {
        let path = output.join(format!("{prefix}-{name}.sql"));
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}

/// The `.sql` files of a directory, sorted (none if it does not exist).
fn sql_files(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    Ok(files)
}

fn generate_upgrade(control: &Path, install: &Path, migration: &Path, output: &Path) -> Result<()> {
    let extension = extension_name(control)?;
    let schema = control_setting(control, &read(control)?, "schema")?;
    let migration_name = migration.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let (from, to) = migration_name
        .strip_suffix(".sql")
        .and_then(|n| n.split_once("--"))
        .ok_or_else(|| Error::from(format!("{}: a migration is named FROM--TO.sql", migration.display())))?;
    let install_name = install.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if install_name != format!("{extension}--{to}.sql") {
        return Err(format!(
            "{}: the migration leads to {to}, so the install script must be {extension}--{to}.sql",
            install.display()
        )
        .into());
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
    std::fs::write(output, script).map_err(|e| Error::io(output, e))
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io(path, e))
}
