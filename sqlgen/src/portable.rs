//! The portable edition: the install script with every C-language function (pgrx's Rust
//! functions and the hand-written C hot paths) replaced by its SQL or PL/pgSQL definition
//! from `extension/portable/*.sql`, so it installs where no library can be loaded.
//!
//! Everything else is the native install script itself: one source for tables, views and
//! the SQL functions. A portable file holds replacements (a definition with the signature of a
//! function of the install script: every C function must have one; a SQL function may, where
//! the editions differ, as `edition()` does), each put in its original's place; helpers (the
//! other functions, and types), all put before the file's first replacement; and other statements
//! (REVOKEs of the helpers that write, comments), put after the whole install script. Function
//! bodies are checked when called, not when made (`check_function_bodies` off, as pg_dump does),
//! so definitions may refer to each other in any order. `@EXTVERSION@` in a portable file is
//! the version. A C function with no replacement, or a file that replaces nothing, is an error.
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::split::{excerpt, statements, Statement};

/// The two forms of the portable edition of one version.
#[derive(Debug)]
pub struct Portable {
    /// For `psql -f` by the database owner: one transaction that makes the schema.
    pub psql: String,
    /// The same content for pg_tle (`pgtle.install_extension`), so `CREATE EXTENSION` works
    /// where pg_tle is offered.
    pub pg_tle: String,
}

/// A portable source: its name (for messages) and text.
pub struct Source {
    pub name: String,
    pub text: String,
}

/// The portable scripts of `extension` `version` in `schema` (`comment` from the control
/// file) from the native `install` script and the portable `sources`.
pub fn portable_scripts(
    extension: &str,
    schema: &str,
    version: &str,
    comment: &str,
    install: &str,
    sources: &[Source],
) -> Result<Portable, String> {
    let install = statements(install).map_err(|e| format!("the install script: {e}"))?;
    // Every function of the install script (what a portable definition may replace), and the
    // C ones (what one must replace).
    let mut functions: HashSet<String> = HashSet::new();
    let mut c_functions: HashSet<String> = HashSet::new();
    for s in &install {
        let sig = function_signature(s);
        if is_c_function(&s.words()) {
            let sig = sig.clone().ok_or_else(|| {
                format!("a C function whose signature sqlgen cannot read: {}", excerpt(&s.text))
            })?;
            c_functions.insert(sig);
        }
        functions.extend(sig);
    }
    // Every portable function, and where each replacement is; the other functions are helpers.
    let mut files: Vec<Vec<Statement>> = Vec::new();
    let mut replacement: HashMap<String, (usize, usize)> = HashMap::new();
    let mut after = String::new();
    for (f, source) in sources.iter().enumerate() {
        let text = source.text.replace("@EXTVERSION@", version);
        let (list, others): (Vec<Statement>, Vec<Statement>) = statements(&text)
            .map_err(|e| format!("{}: {e}", source.name))?
            .into_iter()
            .partition(|s| function_signature(s).is_some() || s.words().starts_with("CREATE TYPE "));
        for s in others {
            after.push_str(&s.leading);
            after.push_str(&s.text);
            after.push('\n');
        }
        for (i, s) in list.iter().enumerate() {
            if let Some(sig) = function_signature(s).filter(|sig| functions.contains(sig)) {
                if replacement.insert(sig.clone(), (f, i)).is_some() {
                    return Err(format!("{}: {sig} is defined twice in the portable sources", source.name));
                }
            }
        }
        if !replacement.values().any(|(file, _)| *file == f) {
            return Err(format!("{}: replaces no function of the install script", source.name));
        }
        files.push(list);
    }
    let replaces = |s: &Statement| function_signature(s).is_some_and(|sig| functions.contains(&sig));
    // Whether each file's helpers are out yet.
    let mut helpers_out: Vec<bool> = vec![false; files.len()];
    let mut body = String::new();
    let mut config_dumps = String::new();
    let mut missing = Vec::new();
    for statement in install {
        if statement.text.starts_with('\\') {
            continue;
        }
        if statement.words().starts_with("SELECT PG_CATALOG.PG_EXTENSION_CONFIG_DUMP(") {
            // Only an extension script may mark its tables' contents for pg_dump; without
            // the extension they are plain tables, dumped with their contents anyway.
            config_dumps.push_str(&statement.text);
            config_dumps.push('\n');
            body.push_str(&format!("{}@CONFIG_DUMP {}@\n", statement.leading, config_dumps.len()));
            continue;
        }
        let sig = function_signature(&statement);
        let Some(&(f, at)) = sig.as_ref().and_then(|sig| replacement.get(sig)) else {
            match sig.filter(|sig| c_functions.contains(sig)) {
                Some(sig) => missing.push(sig),
                None => {
                    body.push_str(&statement.leading);
                    body.push_str(&statement.text);
                    body.push('\n');
                }
            }
            continue;
        };
        let helpers = files[f].iter().filter(|s| !helpers_out[f] && !replaces(s));
        for s in helpers.chain(std::iter::once(&files[f][at])) {
            body.push_str(&s.leading);
            body.push_str(&s.text);
            body.push('\n');
        }
        helpers_out[f] = true;
    }
    if !missing.is_empty() {
        return Err(format!(
            "{} C function(s) of the install script have no portable definition in extension/portable/: {}",
            missing.len(),
            missing.join(", ")
        ));
    }
    body.push_str(&after);
    let replaced = c_functions.len();
    let psql_body = strip_config_dumps(&body, None);
    let tle_body = strip_config_dumps(&body, Some(&config_dumps));
    let psql = format!(
        "-- {extension} {version}, portable edition: the same schema and API as the native extension, in\n\
         -- SQL and PL/pgSQL only ({replaced} functions that are C in the native edition are written\n\
         -- in SQL here). Generated by sqlgen (sqlgen/src/portable.rs) from the native install\n\
         -- script and extension/portable/*.sql: do not edit. Install as the database owner:\n\
         --   psql -v ON_ERROR_STOP=1 -f {extension}-{version}-portable.sql\n\
         -- docs/operations.md says what differs from the native edition.\n\
         BEGIN;\n\
         SET LOCAL check_function_bodies = off;\n\
         CREATE SCHEMA {schema};\n\
         {psql_body}\nCOMMIT;\n"
    );
    let tag = "$_pg_rendezvous_portable_$";
    if body.contains(tag) || comment.contains('$') {
        return Err(format!("the script or the comment contains {tag} or a $: cannot wrap it for pg_tle"));
    }
    let pg_tle = format!(
        "-- {extension} {version}, portable edition for pg_tle: the content of\n\
         -- {extension}-{version}-portable.sql as a pg_tle extension, so that CREATE EXTENSION works where\n\
         -- pg_tle is offered. Generated by sqlgen (sqlgen/src/portable.rs): do not edit. Run as a member\n\
         -- of pgtle_admin, then CREATE EXTENSION {extension}; in each database.\n\
         SELECT pgtle.install_extension('{extension}', '{version}', '{comment}', {tag}\n\
         SET LOCAL check_function_bodies = off;\n\
         CREATE SCHEMA {schema};\n\
         {tle_body}\n{tag});\n",
        comment = comment.replace('\'', "''")
    );
    Ok(Portable { psql, pg_tle })
}

/// The body with each config-dump placeholder dropped, or put back from `dumps`.
fn strip_config_dumps(body: &str, dumps: Option<&str>) -> String {
    let mut out = String::new();
    let mut starts: BTreeMap<usize, usize> = BTreeMap::new();
    if let Some(dumps) = dumps {
        let mut at = 0;
        for line in dumps.split_inclusive('\n') {
            starts.insert(at + line.len(), at);
            at += line.len();
        }
    }
    for line in body.split_inclusive('\n') {
        match line.trim_end().strip_prefix("@CONFIG_DUMP ").and_then(|r| r.strip_suffix('@')) {
            Some(end) => {
                if let (Some(dumps), Ok(end)) = (dumps, end.parse::<usize>()) {
                    let start = starts.get(&end).copied().unwrap_or(0);
                    out.push_str(&dumps[start..end]);
                }
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Whether a statement (as `Statement::words`) makes a C-language function.
fn is_c_function(words: &str) -> bool {
    (words.starts_with("CREATE FUNCTION ") || words.starts_with("CREATE OR REPLACE FUNCTION "))
        && (words.contains(" LANGUAGE C ")
            || words.contains(" LANGUAGE 'C' ")
            || words.ends_with(" LANGUAGE C;"))
}

/// `NAME(TYPE,…)` of a CREATE FUNCTION statement: the unqualified name and the input
/// argument types, normalised (`INT` is `INTEGER`, …); None for another statement.
pub fn function_signature(statement: &Statement) -> Option<String> {
    let words = statement.words();
    let rest = words
        .strip_prefix("CREATE OR REPLACE FUNCTION ")
        .or_else(|| words.strip_prefix("CREATE FUNCTION "))?;
    let open = rest.find('(')?;
    let name = rest[..open].trim().replace('"', "");
    let name = name.rsplit('.').next().unwrap_or(&name).to_string();
    let mut depth = 0;
    let mut args = Vec::new();
    let mut current = String::new();
    for c in rest[open + 1..].chars() {
        match c {
            '(' => {
                depth += 1;
                current.push(c);
            }
            ')' if depth == 0 => {
                args.push(std::mem::take(&mut current));
                break;
            }
            ')' => {
                depth -= 1;
                current.push(c);
            }
            ',' if depth == 0 => args.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    let mut types = Vec::new();
    for arg in args {
        let arg = arg.replace('"', "");
        let arg =
            arg.split(" DEFAULT ").next().unwrap_or("").split(" = ").next().unwrap_or("").trim().to_string();
        if arg.is_empty() {
            continue;
        }
        let mut tokens: Vec<&str> = arg.split_whitespace().collect();
        match tokens.first() {
            Some(&"OUT") => continue,
            Some(&"IN") | Some(&"INOUT") | Some(&"VARIADIC") => {
                tokens.remove(0);
            }
            _ => {}
        }
        // The name, then the type (every argument here is named).
        if tokens.len() < 2 {
            return None;
        }
        types.push(normal_type(&tokens[1..].join(" ")));
    }
    Some(format!("{name}({})", types.join(",")))
}

/// A type name in one spelling.
fn normal_type(t: &str) -> String {
    let t = t.replace(" [", "[");
    let (base, array) = match t.find('[') {
        Some(i) => (&t[..i], &t[i..]),
        None => (t.as_str(), ""),
    };
    let base = match base.trim() {
        "INT" | "INT4" => "INTEGER",
        "INT8" => "BIGINT",
        "INT2" => "SMALLINT",
        "BOOL" => "BOOLEAN",
        "FLOAT8" => "DOUBLE PRECISION",
        "FLOAT4" => "REAL",
        "TIMESTAMPTZ" => "TIMESTAMP WITH TIME ZONE",
        "VARCHAR" => "CHARACTER VARYING",
        other => other,
    };
    format!("{base}{}", array.replace(' ', ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(text: &str) -> Option<String> {
        function_signature(&statements(text).unwrap().remove(0))
    }

    #[test]
    fn signatures_are_read_in_either_spelling() {
        assert_eq!(
            sig("CREATE  FUNCTION \"ranked\"(\n\t\"key\" TEXT, /* Option < & str > */\n\t\"k\" INT DEFAULT NULL /* x */\n) RETURNS TEXT[] LANGUAGE c AS 'MODULE_PATHNAME', 'x';"),
            Some("RANKED(TEXT,INTEGER)".into())
        );
        assert_eq!(
            sig("CREATE FUNCTION rendezvous.ranked(key text, k integer DEFAULT NULL) RETURNS text[] LANGUAGE sql AS $$ SELECT '{}'::text[] $$;"),
            Some("RANKED(TEXT,INTEGER)".into())
        );
        assert_eq!(
            sig("CREATE FUNCTION rendezvous.w(key text, weights double precision [], at timestamptz, OUT a int) LANGUAGE sql AS $$ SELECT 1 $$;"),
            Some("W(TEXT,DOUBLE PRECISION[],TIMESTAMP WITH TIME ZONE)".into())
        );
        assert_eq!(sig("CREATE TABLE rendezvous.t (a int);"), None);
    }

    #[test]
    fn c_functions_are_replaced_in_place_with_their_helpers_and_config_dumps_kept_for_pg_tle() {
        let install = "\\echo Use CREATE EXTENSION \\quit\n\
            CREATE TABLE rendezvous.t (a int);\n\
            SELECT pg_catalog.pg_extension_config_dump('rendezvous.t', '');\n\
            CREATE  FUNCTION \"f\"(\"a\" INT) RETURNS INT LANGUAGE c AS 'MODULE_PATHNAME', 'f_wrapper';\n\
            CREATE FUNCTION rendezvous.edition() RETURNS text LANGUAGE sql AS $$ SELECT 'native' $$;\n\
            CREATE FUNCTION rendezvous.g() RETURNS int LANGUAGE sql AS $$ SELECT rendezvous.f(1) $$;\n";
        let sources = [Source {
            name: "f.sql".into(),
            text: "CREATE FUNCTION rendezvous._helper(a integer) RETURNS integer LANGUAGE sql AS $$ SELECT a $$;\n\
                   CREATE FUNCTION rendezvous.f(a integer) RETURNS integer LANGUAGE sql AS $$ SELECT rendezvous._helper(a) $$;\n\
                   REVOKE EXECUTE ON FUNCTION rendezvous._helper(integer) FROM PUBLIC;\n\
                   CREATE FUNCTION rendezvous.edition() RETURNS text LANGUAGE sql AS $$ SELECT 'portable @EXTVERSION@' $$;\n"
                .into(),
        }];
        let p = portable_scripts("ext", "rendezvous", "1.0", "c", install, &sources).unwrap();
        let order = [
            "CREATE TABLE",
            "_helper(a integer)",
            "rendezvous.f(a integer)",
            "'portable 1.0'",
            "rendezvous.g()",
            "REVOKE",
        ];
        let at: Vec<usize> = order.iter().map(|s| p.psql.find(s).unwrap()).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{}", p.psql);
        assert!(
            !p.psql.contains("MODULE_PATHNAME")
                && !p.psql.contains("config_dump")
                && !p.psql.contains("\\echo")
        );
        assert!(!p.psql.contains("'native'"));
        assert!(p.pg_tle.contains("pg_extension_config_dump('rendezvous.t'"));
        assert!(!p.pg_tle.contains("MODULE_PATHNAME"));

        let none = portable_scripts("ext", "rendezvous", "1.0", "c", install, &[]).unwrap_err();
        assert!(none.contains("F(INTEGER)"), "{none}");
        let extra = [
            Source { name: "f.sql".into(), text: sources[0].text.clone() },
            Source {
                name: "x.sql".into(),
                text: "CREATE FUNCTION rendezvous.nothing() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;\n"
                    .into(),
            },
        ];
        let err = portable_scripts("ext", "rendezvous", "1.0", "c", install, &extra).unwrap_err();
        assert!(err.contains("x.sql: replaces no function"), "{err}");
    }
}
