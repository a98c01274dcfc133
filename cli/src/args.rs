//! A small `--flag value` parser (the command has few flags; no parser crate to build).
use std::collections::HashMap;

/// Parsed `--name value` pairs and bare `--switch`es.
pub struct Args {
    values: HashMap<String, String>,
    switches: Vec<String>,
}

impl Args {
    /// Parses `args`; `switches` names the flags that take no value.
    pub fn parse(args: &[String], switches: &[&str]) -> Result<Args, String> {
        let mut values = HashMap::new();
        let mut on = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let Some(name) = a.strip_prefix("--") else {
                return Err(format!("unexpected argument {a:?}"));
            };
            let (name, inline) = match name.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (name, None),
            };
            if switches.contains(&name) {
                on.push(name.to_owned());
            } else {
                let v = match inline {
                    Some(v) => v,
                    None => it.next().ok_or_else(|| format!("--{name} needs a value"))?.clone(),
                };
                values.insert(name.to_owned(), v);
            }
        }
        Ok(Args { values, switches: on })
    }

    /// A string flag.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// A parsed flag, or `default`.
    pub fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("--{name}: cannot parse {v:?}")),
        }
    }

    /// Whether a switch was given.
    pub fn on(&self, name: &str) -> bool {
        self.switches.iter().any(|s| s == name)
    }
}
