//! The reference docs cannot drift from the catalog: every function of the extension is in
//! docs/sql.md with its exact signature (argument names and types, which have defaults and
//! their values, the result), every view and table with its columns in order, every role by
//! name; and nothing else is documented as if it existed.
use std::collections::BTreeMap;

use rendezvous_tests::TestDb;
use tokio_postgres::Client;

fn sql_md() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/sql.md");
    std::fs::read_to_string(path).expect("docs/sql.md")
}

/// One argument: its name, type and default expression (as written).
#[derive(Debug)]
struct Arg {
    name: String,
    ty: String,
    default: Option<String>,
}

/// A function signature as written: `name(args) → result`.
#[derive(Debug)]
struct Signature {
    name: String,
    args: Vec<Arg>,
    result: String,
}

/// Splits at commas outside quotes and parentheses.
fn split_top_level(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quote) = (Vec::new(), String::new(), 0i32, None::<char>);
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => depth -= 1,
            (None, ',') if depth == 0 => {
                out.push(std::mem::take(&mut cur).trim().to_string());
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// `name(args) → result` (no schema): the signature, or why it does not read as one.
fn parse_signature(s: &str) -> Result<Signature, String> {
    let open = s.find('(').ok_or("no (")?;
    let mut depth = 0;
    let close = s[open..]
        .char_indices()
        .find_map(|(i, c)| {
            depth += match c {
                '(' => 1,
                ')' => -1,
                _ => 0,
            };
            (depth == 0).then_some(open + i)
        })
        .ok_or("unbalanced parentheses")?;
    let result =
        s[close + 1..].trim().strip_prefix('→').ok_or("no → after the arguments")?.trim().to_string();
    let args = split_top_level(&s[open + 1..close])
        .into_iter()
        .map(|a| {
            let (decl, default) = match a.find(" DEFAULT ") {
                Some(i) => (&a[..i], Some(a[i + " DEFAULT ".len()..].trim().to_string())),
                None => (a.as_str(), None),
            };
            let (name, ty) = decl.trim().split_once(' ').ok_or(format!("argument {decl:?} has no type"))?;
            Ok(Arg { name: name.trim_matches('"').to_string(), ty: ty.trim().to_string(), default })
        })
        .collect::<Result<_, String>>()?;
    Ok(Signature { name: s[..open].trim().to_string(), args, result })
}

/// Every signature docs/sql.md documents: in `###` headings (several may share one, separated
/// by `, rendezvous.`) and in bullets that open with one in backticks (the internal helpers).
fn documented_functions(md: &str) -> Vec<Result<Signature, String>> {
    let mut out = Vec::new();
    for line in md.lines() {
        let text = if let Some(h) = line.strip_prefix("### rendezvous.") {
            h.to_string()
        } else if let Some(b) = line.strip_prefix("- `rendezvous.") {
            b.split('`').next().unwrap_or_default().to_string()
        } else {
            continue;
        };
        for part in text.split(", rendezvous.") {
            out.push(parse_signature(part).map_err(|e| format!("{line:?}: {e}")));
        }
    }
    out
}

/// Names in backticks in the first two cells of the table rows under `heading`:
/// (object, its columns in order).
fn documented_table(md: &str, heading: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let section = md.split(heading).nth(1).expect("the section is in docs/sql.md");
    let section = section.split("\n## ").next().unwrap_or_default();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`').to_string();
        // `a, b` in one pair of backticks, or `a` (primary key), `b`, … one pair each.
        let columns = cells[2]
            .split('`')
            .skip(1)
            .step_by(2)
            .flat_map(|c| c.split(", ").map(str::to_string).collect::<Vec<_>>())
            .collect();
        out.insert(name, columns);
    }
    out
}

/// The type's name as the catalog spells it (`timestamptz` → `timestamp with time zone`).
async fn canonical_type(db: &Client, ty: &str) -> Result<String, String> {
    let ty = ty.trim();
    if let Some(inner) = ty.strip_prefix("SETOF ") {
        return Ok(format!("SETOF {}", Box::pin(canonical_type(db, inner)).await?));
    }
    if let Some(cols) = ty.strip_prefix("TABLE(").and_then(|c| c.strip_suffix(')')) {
        let mut out = Vec::new();
        for col in split_top_level(cols) {
            let (name, t) = col.split_once(' ').ok_or(format!("column {col:?} has no type"))?;
            out.push(format!("{name} {}", Box::pin(canonical_type(db, t)).await?));
        }
        return Ok(format!("TABLE({})", out.join(", ")));
    }
    let row = db
        .query_one("SELECT $1::text::regtype::text", &[&ty])
        .await
        .map_err(|e| format!("type {ty:?}: {e}"))?;
    Ok(row.get(0))
}

async fn catalog_functions(db: &Client) -> Vec<Signature> {
    let rows = db
        .query(
            "SELECT p.proname || '(' || pg_get_function_arguments(p.oid) || ') → ' || pg_get_function_result(p.oid)
               FROM pg_proc p
               JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
               JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_rendezvous'
              ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| parse_signature(r.get::<_, &str>(0)).expect("the catalog's own signature")).collect()
}

/// What differs between a documented signature and the catalog's (empty: nothing).
async fn differences(db: &Client, doc: &Signature, cat: &Signature) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let (doc_result, cat_result) = (canonical_type(db, &doc.result).await?, cat.result.clone());
    if doc_result != cat_result {
        out.push(format!("returns {cat_result}, documented {doc_result}"));
    }
    for (d, c) in doc.args.iter().zip(&cat.args) {
        if d.name != c.name {
            out.push(format!("argument {} is named {} in the docs", c.name, d.name));
        }
        match (&d.default, &c.default) {
            (None, None) => {}
            (Some(dd), Some(cd)) => {
                let same: bool = db
                    .query_one(&format!("SELECT ({dd})::{} IS NOT DISTINCT FROM ({cd})", c.ty), &[])
                    .await
                    .map_err(|e| format!("default {dd:?} of {}: {e}", c.name))?
                    .get(0);
                if !same {
                    out.push(format!("argument {}: DEFAULT {cd}, documented {dd}", c.name));
                }
            }
            (dd, cd) => out.push(format!("argument {}: default {cd:?}, documented {dd:?}", c.name)),
        }
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread")]
async fn sql_md_documents_every_function_with_its_exact_signature_and_nothing_else() {
    rendezvous_tests::native_only!("docs/sql.md documents the extension's members; the portable edition adds helpers of its own, listed in operations.md, and its headers are diffed by scripts/test_portable.sh");
    let db = TestDb::new("docs_functions").await;
    let client = db.connect().await;
    let md = sql_md();
    let mut problems = Vec::new();

    // Keyed by name and argument types, as PostgreSQL identifies a function.
    let mut catalog = BTreeMap::new();
    for sig in catalog_functions(&client).await {
        let key = format!(
            "{}({})",
            sig.name,
            sig.args.iter().map(|a| a.ty.as_str()).collect::<Vec<_>>().join(", ")
        );
        catalog.insert(key, sig);
    }
    let mut documented = BTreeMap::new();
    for sig in documented_functions(&md) {
        let sig = match sig {
            Ok(sig) => sig,
            Err(e) => {
                problems.push(format!("docs/sql.md: a heading that is not a signature: {e}"));
                continue;
            }
        };
        let mut types = Vec::new();
        for a in &sig.args {
            match canonical_type(&client, &a.ty).await {
                Ok(t) => types.push(t),
                Err(e) => problems.push(format!("rendezvous.{}: {e}", sig.name)),
            }
        }
        let key = format!("{}({})", sig.name, types.join(", "));
        if documented.insert(key.clone(), sig).is_some() {
            problems.push(format!("rendezvous.{key} is documented twice"));
        }
    }
    for (key, doc) in &documented {
        match catalog.get(key) {
            None => problems
                .push(format!("docs/sql.md documents rendezvous.{key}, which the extension does not have")),
            Some(cat) => match differences(&client, doc, cat).await {
                Ok(diffs) => problems.extend(diffs.into_iter().map(|d| format!("rendezvous.{key}: {d}"))),
                Err(e) => problems.push(format!("rendezvous.{key}: {e}")),
            },
        }
    }
    for key in catalog.keys().filter(|k| !documented.contains_key(*k)) {
        problems.push(format!("rendezvous.{key} is not in docs/sql.md"));
    }
    assert!(problems.is_empty(), "docs/sql.md and the catalog differ:\n{}", problems.join("\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn sql_md_documents_every_view_table_and_role() {
    rendezvous_tests::native_only!(
        "the portable edition adds a table of its own (_host_hashes), listed in operations.md"
    );
    let db = TestDb::new("docs_relations").await;
    let client = db.connect().await;
    let md = sql_md();
    let mut problems = Vec::new();
    // Tables, partitioned ones too; their partitions are documented with them.
    for (heading, kinds) in [("## Views", "'v'"), ("## Tables", "'r', 'p'")] {
        let rows = client
            .query(
                &format!(
                    "SELECT c.oid::regclass::text, array_agg(a.attname::text ORDER BY a.attnum)
                       FROM pg_class c
                       JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                      WHERE c.relnamespace = 'rendezvous'::regnamespace AND c.relkind IN ({kinds})
                        AND NOT c.relispartition
                      GROUP BY 1"
                ),
                &[],
            )
            .await
            .unwrap();
        let catalog: BTreeMap<String, Vec<String>> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let documented = documented_table(&md, heading);
        for (name, columns) in &catalog {
            match documented.get(name) {
                None => problems.push(format!("{name} is not under {heading}")),
                Some(doc) if doc != columns => {
                    problems.push(format!("{name}: columns {columns:?}, documented {doc:?}"))
                }
                Some(_) => {}
            }
        }
        for name in documented.keys().filter(|n| !catalog.contains_key(*n)) {
            problems.push(format!("{heading} documents {name}, which the extension does not have"));
        }
    }
    // The roles: every role the extension's objects grant anything to, and no other.
    let rows = client
        .query(
            "SELECT DISTINCT g.grantee::regrole::text
               FROM (SELECT p.proacl AS acl FROM pg_proc p WHERE p.pronamespace = 'rendezvous'::regnamespace
                     UNION ALL SELECT c.relacl FROM pg_class c WHERE c.relnamespace = 'rendezvous'::regnamespace
                     UNION ALL SELECT n.nspacl FROM pg_namespace n WHERE n.nspname = 'rendezvous') o,
                    aclexplode(o.acl) g
              WHERE g.grantee <> 0 AND g.grantee <> g.grantor
              ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let catalog: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let documented: Vec<String> = documented_table(&md, "## Roles and privileges").into_keys().collect();
    if catalog != documented {
        problems.push(format!("the extension grants to roles {catalog:?}, documented {documented:?}"));
    }
    assert!(problems.is_empty(), "docs/sql.md and the catalog differ:\n{}", problems.join("\n"));
}

#[test]
fn signatures_parse_as_the_catalog_writes_them() {
    let s = parse_signature(
        "f(a text, \"window\" interval DEFAULT '01:00:00'::interval, k integer DEFAULT NULL::integer) → TABLE(x text, y bigint)",
    )
    .unwrap();
    assert_eq!(s.name, "f");
    assert_eq!(s.args.len(), 3);
    assert_eq!(s.args[1].name, "window");
    assert_eq!(s.args[1].default.as_deref(), Some("'01:00:00'::interval"));
    assert_eq!(s.result, "TABLE(x text, y bigint)");
    assert!(parse_signature("f(a text)").is_err());
}

fn guarantees_md() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/guarantees.md");
    std::fs::read_to_string(path).expect("docs/guarantees.md")
}

/// The SQL blocks of a doc that start with `-- checked`: each statement (ending with `;` at
/// the end of a line) with the lines after it that start with `--> `: its rows (columns
/// joined by ` | `, NULL as `NULL`), or `ERROR <sqlstate>`.
fn checked_blocks(md: &str) -> Vec<Vec<(String, Vec<String>)>> {
    let mut blocks = Vec::new();
    let mut lines = md.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "```sql" {
            continue;
        }
        let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        if body.first().map(|l| l.trim()) != Some("-- checked") {
            continue;
        }
        let mut block: Vec<(String, Vec<String>)> = Vec::new();
        let mut statement = String::new();
        for l in &body[1..] {
            if let Some(expected) = l.strip_prefix("--> ") {
                block
                    .last_mut()
                    .expect("an expectation follows a statement")
                    .1
                    .push(expected.trim_end().to_owned());
            } else if !l.trim_start().starts_with("--") && !l.trim().is_empty() {
                statement.push_str(l);
                statement.push('\n');
                if l.trim_end().ends_with(';') {
                    block.push((std::mem::take(&mut statement), Vec::new()));
                }
            }
        }
        assert!(statement.trim().is_empty(), "a checked block ends inside a statement: {statement}");
        blocks.push(block);
    }
    blocks
}

/// What a statement answered, in the blocks' notation.
async fn answered(client: &Client, statement: &str) -> Vec<String> {
    match client.simple_query(statement).await {
        Ok(messages) => messages
            .iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).unwrap_or("NULL").to_owned())
                        .collect::<Vec<_>>()
                        .join(" | "),
                ),
                _ => None,
            })
            .collect(),
        Err(e) => vec![format!("ERROR {}", e.code().map_or("?", |c| c.code()))],
    }
}

/// docs/guarantees.md's checked examples do what the text says (#39 item 10: its text once
/// said a losing claim is told the holder's token, long after that stopped being true). Each
/// block runs in a database of its own, as a superuser who may `SET SESSION AUTHORIZATION`;
/// roles it creates are dropped before and after.
#[tokio::test(flavor = "multi_thread")]
async fn guarantees_md_examples_do_what_they_say() {
    let md = guarantees_md();
    let blocks = checked_blocks(&md);
    assert!(blocks.len() >= 5, "docs/guarantees.md has {} checked examples", blocks.len());
    let admin = rendezvous_tests::connect(&rendezvous_tests::cluster_url()).await;
    let mut problems = Vec::new();
    for (n, block) in blocks.iter().enumerate() {
        let roles: Vec<String> = block
            .iter()
            .filter_map(|(s, _)| s.trim().strip_prefix("CREATE ROLE "))
            .map(|rest| rest.split_whitespace().next().unwrap_or_default().trim_end_matches(';').to_owned())
            .collect();
        for role in &roles {
            admin.batch_execute(&format!("DROP ROLE IF EXISTS {role}")).await.unwrap();
        }
        let db = TestDb::new(&format!("guarantee{n}")).await;
        let client = db.connect().await;
        for (statement, expected) in block {
            let got = answered(&client, statement).await;
            let errored = got.first().is_some_and(|g| g.starts_with("ERROR "));
            if (expected.is_empty() && errored) || (!expected.is_empty() && &got != expected) {
                problems.push(format!("{statement}  expected {expected:?}\n  got      {got:?}"));
            }
        }
        drop(client);
        admin.batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", db.name)).await.unwrap();
        for role in &roles {
            admin.batch_execute(&format!("DROP ROLE IF EXISTS {role}")).await.unwrap();
        }
    }
    assert!(
        problems.is_empty(),
        "docs/guarantees.md says otherwise than the database does:\n{}",
        problems.join("\n")
    );
}

/// Every test docs/guarantees.md cites (`path` then `test_name`s, in backticks) exists: a
/// guarantee is shown by tests that are there.
#[test]
fn guarantees_md_cites_tests_that_exist() {
    let md = guarantees_md();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut problems = Vec::new();
    let mut cited = 0;
    let mut file: Option<(String, String)> = None;
    // Backticked spans, in order: a path names the file the names after it are in.
    for (_, span) in md.split('`').enumerate().filter(|(i, _)| i % 2 == 1) {
        let is_path = span.contains('/')
            && [".rs", ".sql", ".spec", ".sh"].iter().any(|ext| span.ends_with(ext))
            && !span.contains([' ', '*', '<']);
        if is_path {
            match std::fs::read_to_string(format!("{root}/{span}")) {
                Ok(text) => file = Some((span.to_owned(), text)),
                Err(_) => {
                    problems.push(format!("{span} does not exist"));
                    file = None;
                }
            }
        } else if let Some((path, text)) = &file {
            let is_test_name = path.ends_with(".rs")
                && span.len() > 20
                && span.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if is_test_name {
                cited += 1;
                if !text.contains(&format!("fn {span}(")) {
                    problems.push(format!("{path} has no test {span}"));
                }
            }
        }
    }
    assert!(cited >= 20, "only {cited} tests cited");
    assert!(problems.is_empty(), "docs/guarantees.md cites what is not there:\n{}", problems.join("\n"));
}
