//! Which of a multi-host URL's hosts a connection tries first (#43).
//!
//! libpq tries a URL's hosts in order and takes the first that accepts
//! (`target_session_attrs=read-write`: the first that takes writes). After a failover that
//! left the old primary up and writable (no HA engine fenced it), the old primary still
//! accepts, so a host whose URL names it first connects to it again after every call given
//! up there, and never reaches the promoted node. Its commits meanwhile wait for a synchronous
//! standby that is gone.
//!
//! So, with `read-write`, a server on which a commit waited for its synchronous standby longer
//! than a call's bound is suspect, for the whole process (every `Database` naming it, so a
//! host's pieces learn it from whichever met it first): their connections to it are closed,
//! and the next ones try the URL's other hosts first, in URL order, and the suspect ones last.
//! A suspect server is no longer suspect once a connection had to fall back to it (every
//! other host refused or was unreachable): it is then the only server that takes writes, and
//! suspicion there would only cost the others' attempts. A URL naming one host is left alone.
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use tokio_postgres::config::{Host, LoadBalanceHosts, TargetSessionAttrs};
use tokio_postgres::Config;

/// The suspect servers, by [`key`], with since when.
static SUSPECT: Mutex<Option<HashMap<String, Instant>>> = Mutex::new(None);

fn suspect_servers() -> std::sync::MutexGuard<'static, Option<HashMap<String, Instant>>> {
    SUSPECT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Bumped at each new suspicion; a watched connection closes itself when its server became
/// suspect after it was opened.
fn changes() -> &'static tokio::sync::watch::Sender<u64> {
    static CHANGES: OnceLock<tokio::sync::watch::Sender<u64>> = OnceLock::new();
    CHANGES.get_or_init(|| tokio::sync::watch::Sender::new(0))
}

/// Whether suspicion applies to `config`: several hosts, of which one that takes writes is
/// asked for.
pub(crate) fn applies(config: &Config) -> bool {
    count(config) > 1 && config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite
}

/// The server `config`'s host `i` names: its address (or name, or socket directory) and port.
pub(crate) fn key(config: &Config, i: usize) -> String {
    let ports = config.get_ports();
    let port = ports.get(i).or_else(|| ports.first()).copied().unwrap_or(5432);
    let host = match (config.get_hostaddrs().get(i), config.get_hosts().get(i)) {
        (Some(addr), _) => addr.to_string(),
        (None, Some(Host::Tcp(name))) => name.clone(),
        #[cfg(unix)]
        (None, Some(Host::Unix(path))) => path.display().to_string(),
        (None, None) => String::new(),
    };
    format!("{host}:{port}")
}

/// The order to try `config`'s hosts in, each with whether its server was suspect then: the
/// URL's order (or shuffled, with `load_balance_hosts=random`), suspect servers last when
/// suspicion [`applies`].
pub(crate) fn order(config: &Config) -> Vec<(usize, bool)> {
    let mut order: Vec<usize> = (0..count(config)).collect();
    if config.get_load_balance_hosts() == LoadBalanceHosts::Random {
        shuffle(&mut order);
    }
    if !applies(config) {
        return order.into_iter().map(|i| (i, false)).collect();
    }
    let suspect = suspect_servers();
    let mut order: Vec<(usize, bool)> = order
        .into_iter()
        .map(|i| (i, suspect.as_ref().is_some_and(|s| s.contains_key(&key(config, i)))))
        .collect();
    // Stable: each group keeps its order.
    order.sort_by_key(|&(_, suspect)| suspect);
    order
}

/// The server a connection was made to, as suspicion knows it.
#[derive(Clone, Debug)]
pub(crate) struct Server {
    key: String,
    /// Whether suspicion [`applies`] to the settings the connection was made with.
    applies: bool,
}

impl Server {
    /// `config`'s host `i`.
    pub(crate) fn of(config: &Config, i: usize) -> Server {
        Server { key: key(config, i), applies: applies(config) }
    }

    /// A commit on this server waited for its synchronous standby past a call's bound.
    pub(crate) fn suspect(&self) {
        if !self.applies {
            return; // nowhere else to go
        }
        let new = suspect_servers()
            .get_or_insert_with(HashMap::new)
            .insert(self.key.clone(), Instant::now())
            .is_none();
        if new {
            tracing::warn!(
                server = self.key,
                "a commit waited for the server's synchronous standby past the call's bound: \
                 closing the connections to it and connecting to the URL's other hosts first"
            );
        }
        changes().send_modify(|n| *n += 1);
    }

    /// A connection was made to it; `fell_back`: it was suspect when the hosts were ordered, so
    /// every other host failed first, and the suspicion ends (a connection that was on its way
    /// to it when it became suspect ends nothing).
    pub(crate) fn connected(&self, fell_back: bool) {
        if fell_back && self.applies && suspect_servers().as_mut().and_then(|s| s.remove(&self.key)).is_some()
        {
            tracing::info!(
                server = self.key,
                "no other host of the URL takes writes: using the suspect server again"
            );
        }
    }

    /// Whether suspicion applies to the settings the connection was made with.
    pub(crate) fn can_be_suspect(&self) -> bool {
        self.applies
    }

    /// Whether it became suspect after `opened` (never, where suspicion does not apply).
    pub(crate) fn suspect_since(&self, opened: Instant) -> bool {
        self.applies
            && suspect_servers().as_ref().and_then(|s| s.get(&self.key)).is_some_and(|since| *since > opened)
    }
}

/// Wakes at each new suspicion.
pub(crate) fn subscribe() -> tokio::sync::watch::Receiver<u64> {
    changes().subscribe()
}

/// Refuses what the driver refuses of a host list, before it is split into one connection a
/// host: as many addresses as names (when both are given), and one port or one a host.
pub(crate) fn check(config: &Config) -> std::result::Result<(), String> {
    let (names, addrs, ports) =
        (config.get_hosts().len(), config.get_hostaddrs().len(), config.get_ports().len());
    if names > 0 && addrs > 0 && names != addrs {
        return Err(format!("number of hosts ({names}) is different from number of hostaddrs ({addrs})"));
    }
    if ports > 1 && ports != count(config) {
        return Err(format!("invalid number of ports ({ports} for {} hosts)", count(config)));
    }
    Ok(())
}

/// How many hosts `config` names.
pub(crate) fn count(config: &Config) -> usize {
    config.get_hosts().len().max(config.get_hostaddrs().len())
}

/// `config` with only its host `i` (and that host's address and port): everything else is
/// copied as it is.
pub(crate) fn only_host(config: &Config, i: usize) -> Config {
    if count(config) <= 1 {
        return config.clone();
    }
    let mut one = Config::new();
    if let Some(user) = config.get_user() {
        one.user(user);
    }
    if let Some(password) = config.get_password() {
        one.password(password);
    }
    if let Some(dbname) = config.get_dbname() {
        one.dbname(dbname);
    }
    if let Some(options) = config.get_options() {
        one.options(options);
    }
    if let Some(name) = config.get_application_name() {
        one.application_name(name);
    }
    one.ssl_mode(config.get_ssl_mode()).ssl_negotiation(config.get_ssl_negotiation());
    match config.get_hosts().get(i) {
        Some(tokio_postgres::config::Host::Tcp(h)) => {
            one.host(h);
        }
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(path)) => {
            one.host_path(path);
        }
        None => {}
    }
    if let Some(addr) = config.get_hostaddrs().get(i) {
        one.hostaddr(*addr);
    }
    let ports = config.get_ports();
    if let Some(port) = ports.get(i).or_else(|| ports.first()) {
        one.port(*port);
    }
    if let Some(t) = config.get_connect_timeout() {
        one.connect_timeout(*t);
    }
    if let Some(t) = config.get_tcp_user_timeout() {
        one.tcp_user_timeout(*t);
    }
    one.keepalives(config.get_keepalives()).keepalives_idle(config.get_keepalives_idle());
    if let Some(t) = config.get_keepalives_interval() {
        one.keepalives_interval(t);
    }
    if let Some(n) = config.get_keepalives_retries() {
        one.keepalives_retries(n);
    }
    one.target_session_attrs(config.get_target_session_attrs())
        .channel_binding(config.get_channel_binding())
        .load_balance_hosts(config.get_load_balance_hosts());
    one
}

/// A shuffle good enough to spread connections over hosts (no cryptographic use).
fn shuffle(order: &mut [usize]) {
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    for i in (1..order.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        order.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> Config {
        url.parse().unwrap()
    }

    /// Every setting but the host list is carried over, so a connection to one host of a URL
    /// is the connection libpq would make to it.
    #[test]
    fn one_host_keeps_every_other_setting() {
        let url = "postgresql://u:pw@h1:5433,h2:5434/db?options=-c%20x%3D1&application_name=a\
                   &connect_timeout=3&keepalives_idle=7&target_session_attrs=read-write\
                   &channel_binding=disable&sslmode=require&tcp_user_timeout=4";
        let all = config(url);
        let second = only_host(&all, 1);
        assert_eq!(second, config(&url.replace("h1:5433,h2:5434", "h2:5434")));
        assert_eq!(only_host(&all, 0), config(&url.replace("h1:5433,h2:5434", "h1:5433")));
        // One port for every host.
        let shared = config("postgresql://u@h1,h2:6000/db");
        assert_eq!(only_host(&shared, 1).get_ports(), &[6000]);
        // A single host is the settings themselves.
        let single = config("host=/tmp port=5 user=u keepalives=0");
        assert_eq!(only_host(&single, 0), single);
    }

    #[test]
    fn suspect_servers_are_tried_last_only_when_writes_are_asked_for() {
        // Servers of their own (the suspicion is the process's).
        let rw = config("postgresql://u@a.test,b.test:7,c.test/db?target_session_attrs=read-write");
        let indices = |config: &Config| order(config).into_iter().map(|(i, _)| i).collect::<Vec<_>>();
        assert_eq!(indices(&rw), [0, 1, 2]);
        assert_eq!(key(&rw, 1), "b.test:7");
        let opened = Instant::now();
        Server::of(&rw, 0).suspect();
        assert_eq!(order(&rw), [(1, false), (2, false), (0, true)]);
        assert!(Server::of(&rw, 0).suspect_since(opened) && !Server::of(&rw, 1).suspect_since(opened));
        // Another URL naming the same server knows it too.
        let other = config("postgresql://u@c.test,a.test/db?target_session_attrs=read-write");
        assert_eq!(indices(&other), [0, 1]);
        let other = config("postgresql://u@a.test,c.test/db?target_session_attrs=read-write");
        assert_eq!(indices(&other), [1, 0]);
        // Any server will do: the URL's order, as libpq's.
        let any = config("postgresql://u@a.test,b.test:7,c.test/db");
        assert_eq!(order(&any), [(0, false), (1, false), (2, false)]);
        // A connection that was on its way to it when it became suspect ends nothing; falling
        // back to it does.
        Server::of(&rw, 0).connected(false);
        assert_eq!(indices(&rw), [1, 2, 0]);
        Server::of(&rw, 0).connected(true);
        assert_eq!(order(&rw), [(0, false), (1, false), (2, false)]);
        // A URL naming one server never makes it suspect: there is nowhere else.
        let one = config("postgresql://u@d.test/db?target_session_attrs=read-write");
        Server::of(&one, 0).suspect();
        let two = config("postgresql://u@d.test,e.test/db?target_session_attrs=read-write");
        assert!(!Server::of(&two, 0).suspect_since(opened));
    }

    #[test]
    fn host_lists_the_driver_refuses_are_refused() {
        assert!(check(&config("host=a,b,c port=1,2")).unwrap_err().contains("invalid number of ports"));
        assert!(check(&config("host=a,b hostaddr=127.0.0.1")).unwrap_err().contains("hostaddrs"));
        assert!(check(&config("host=a,b,c port=1")).is_ok());
        assert!(check(&config("host=a,b port=1,2")).is_ok());
    }

    #[test]
    fn a_shuffle_keeps_every_host() {
        let mut order: Vec<usize> = (0..7).collect();
        shuffle(&mut order);
        order.sort_unstable();
        assert_eq!(order, (0..7).collect::<Vec<_>>());
    }
}
