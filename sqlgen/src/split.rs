//! Splits a SQL script into its statements, the way the server's lexer sees them: a `;` ends
//! a statement only outside quotes ('…', "…", $tag$…$tag$) and comments (`--`, nested `/* */`).
use crate::error::Result;

/// One statement of a script: the comments and blank lines before it, and its own text up to
/// and including the `;` that ends it.
#[derive(Debug, PartialEq, Eq)]
pub struct Statement {
    pub leading: String,
    pub text: String,
}

impl Statement {
    /// The statement's words with comments dropped and white space folded to single spaces,
    /// upper-cased: what a classifier reads (`CREATE OR REPLACE FUNCTION RENDEZVOUS.X(…`).
    pub fn words(&self) -> String {
        let mut out = String::new();
        let mut rest = self.text.as_str();
        while let Some(c) = rest.chars().next() {
            if rest.starts_with("--") {
                rest = rest.find('\n').map_or("", |i| &rest[i..]);
            } else if rest.starts_with("/*") {
                rest = &rest[block_comment_len(rest)..];
            } else if c.is_whitespace() {
                if !out.is_empty() && !out.ends_with(' ') {
                    out.push(' ');
                }
                rest = &rest[c.len_utf8()..];
            } else {
                out.extend(c.to_uppercase());
                rest = &rest[c.len_utf8()..];
            }
        }
        out.trim_end().to_string()
    }
}

/// The script's statements in order. A psql meta-command line (`\echo …`) is a statement of
/// its own. Text after the last `;` that is not only comments and white space is an error.
pub fn statements(script: &str) -> Result<Vec<Statement>> {
    let mut out = Vec::new();
    let mut leading = String::new();
    let mut rest = script;
    loop {
        // Comments and white space before the statement.
        let start = skip_trivia(rest);
        leading.push_str(&rest[..start]);
        rest = &rest[start..];
        if rest.is_empty() {
            return Ok(out);
        }
        let len = if rest.starts_with('\\') {
            rest.find('\n').map_or(rest.len(), |i| i + 1)
        } else {
            statement_len(rest)?
        };
        out.push(Statement { leading: std::mem::take(&mut leading), text: rest[..len].to_string() });
        rest = &rest[len..];
    }
}

/// Bytes of comments and white space at the start of `s`.
fn skip_trivia(s: &str) -> usize {
    let mut i = 0;
    loop {
        let rest = &s[i..];
        if rest.starts_with("--") {
            i += rest.find('\n').map_or(rest.len(), |j| j + 1);
        } else if rest.starts_with("/*") {
            i += block_comment_len(rest);
        } else if let Some(c) = rest.chars().next().filter(|c| c.is_whitespace()) {
            i += c.len_utf8();
        } else {
            return i;
        }
    }
}

/// Length of the (possibly nested, possibly unterminated) block comment at the start of `s`.
fn block_comment_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    while i < bytes.len() {
        if bytes[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if bytes[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    bytes.len()
}

/// Length of the statement at the start of `s`, through its terminating `;`.
fn statement_len(s: &str) -> Result<usize> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &s[i..];
        match bytes[i] {
            b';' => return Ok(i + 1),
            b'-' if rest.starts_with("--") => i += rest.find('\n').map_or(rest.len(), |j| j + 1),
            b'/' if rest.starts_with("/*") => i += block_comment_len(rest),
            b'\'' => {
                // E'…' strings take backslash escapes; standard strings only ''.
                let escapes = i > 0 && matches!(bytes[i - 1], b'E' | b'e') && !is_ident_byte(bytes, i - 1);
                i += quoted_len(rest, b'\'', escapes).ok_or_else(|| unterminated("string", rest))?;
            }
            b'"' => i += quoted_len(rest, b'"', false).ok_or_else(|| unterminated("identifier", rest))?,
            b'$' if !(i > 0 && is_ident_byte(bytes, i)) => match dollar_tag(rest) {
                Some(tag) => {
                    let body = &rest[tag.len()..];
                    let end = body.find(tag).ok_or_else(|| unterminated("dollar-quoted string", rest))?;
                    i += tag.len() + end + tag.len();
                }
                None => i += 1,
            },
            _ => i += 1,
        }
    }
    Err(format!("the script ends inside a statement not ended by ';': {}", excerpt(s)).into())
}

/// Whether the byte before `i` continues an identifier (so `$` or `'` at `i` is not a quote).
fn is_ident_byte(bytes: &[u8], i: usize) -> bool {
    i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] >= 0x80)
}

/// `$tag$` (or `$$`) at the start of `s`, if it opens a dollar quote.
fn dollar_tag(s: &str) -> Option<&str> {
    let end = s[1..].find('$')? + 2;
    let tag = &s[..end];
    let inner = &tag[1..tag.len() - 1];
    let valid = inner
        .chars()
        .enumerate()
        .all(|(n, c)| c == '_' || c.is_alphabetic() || (n > 0 && c.is_ascii_digit()));
    valid.then_some(tag)
}

/// Length of the quoted text at the start of `s` (doubled quotes inside; with `escapes`,
/// backslash escapes too), or None when it is not closed.
fn quoted_len(s: &str, quote: u8, escapes: bool) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut i = 1;
    while i < bytes.len() {
        if escapes && bytes[i] == b'\\' {
            i += 2;
        } else if bytes[i] == quote {
            if bytes.get(i + 1) == Some(&quote) {
                i += 2;
            } else {
                return Some(i + 1);
            }
        } else {
            i += 1;
        }
    }
    None
}

fn unterminated(what: &str, at: &str) -> String {
    format!("unterminated {what} at: {}", excerpt(at))
}

/// The first line of `s`, shortened: enough to find a statement in its file.
pub fn excerpt(s: &str) -> String {
    let line = s.lines().next().unwrap_or("").trim();
    if line.chars().count() > 80 {
        format!("{}…", line.chars().take(80).collect::<String>())
    } else {
        line.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(script: &str) -> Vec<String> {
        statements(script).unwrap().into_iter().map(|s| s.text).collect()
    }

    #[test]
    fn semicolons_inside_quotes_and_comments_do_not_split() {
        let script = "SELECT 'a;b', \"c;d\";\n-- x; y\nCREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;\n/* a /* nested; */ ; */ SELECT E'\\';';";
        assert_eq!(
            texts(script),
            [
                "SELECT 'a;b', \"c;d\";",
                "CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;",
                "SELECT E'\\';';",
            ]
        );
    }

    #[test]
    fn leading_comments_stay_with_their_statement() {
        let got = statements("-- one\nSELECT 1;\n\n-- two\n/* more */\nSELECT 2;\n-- trailing\n").unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].leading, "\n\n-- two\n/* more */\n");
        assert_eq!(got[1].text, "SELECT 2;");
    }

    #[test]
    fn doubled_quotes_and_dollar_quotes_in_bodies() {
        let script = "COMMENT ON FUNCTION f() IS 'it''s; fine';\nDO $$ BEGIN RAISE NOTICE 'x;'; END $$;\nSELECT $a$ $$; $a$;";
        assert_eq!(texts(script).len(), 3);
    }

    #[test]
    fn a_dollar_inside_an_identifier_is_not_a_quote() {
        assert_eq!(texts("SELECT a$b; SELECT 1;"), ["SELECT a$b;", "SELECT 1;"]);
    }

    #[test]
    fn meta_commands_are_statements_of_their_own() {
        let got = texts("\\echo Use ALTER EXTENSION. \\quit\nSELECT 1;");
        assert_eq!(got, ["\\echo Use ALTER EXTENSION. \\quit\n", "SELECT 1;"]);
    }

    #[test]
    fn an_unterminated_statement_is_an_error() {
        assert!(statements("SELECT 1").unwrap_err().to_string().contains("not ended by ';'"));
        assert!(statements("SELECT $$ x;").unwrap_err().to_string().contains("unterminated dollar-quoted"));
    }

    #[test]
    fn words_fold_space_and_drop_comments() {
        let s = &statements("CREATE  /* c */ or replace\n\tFUNCTION -- x\n f();").unwrap()[0];
        assert_eq!(s.words(), "CREATE OR REPLACE FUNCTION F();");
    }
}
