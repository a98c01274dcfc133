//! Takeover, measured (not a test): the time from a fault of the host holding some work to
//! another host holding it, for a leader's group, a firing and a run, per fault:
//! - SIGKILL of the holder's process, and `pg_terminate_backend` of its session: the claim ends
//!   with the session, so the next host takes over at once;
//! - SIGSTOP of the holder (a hung host), and a silent partition (its TCP path to the server
//!   process's packets dropped without a reset, by `iptables` rules; needs root): the
//!   session lives on, so the work is held until the lease runs out (a leader's term: until the
//!   next candidate ends the silent holder's session, lease + 1 s).
//!
//! - a primary cut off from its synchronous standby and left running (`rendezvous fleet --ha
//!   promote-partitioned`'s pair: every commit on it waits; after 5 s the failover tool fences
//!   it and promotes the standby): until the next host holds the work on the promoted server.
//!
//! The holder is a real process (`tests/src/bin/elector.rs`, `claimer.rs`) renewing as the
//! runtime does; the next host is in this process, already connected and polling (leader: a
//! `LeaderElector`; firing, run: a claim every 5 ms).
//! Run: `scripts/bench.sh takeover`, or `RENDEZVOUS_DATABASE_URL=… cargo bench -p rendezvous-tests --bench takeover`.
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rendezvous_client::runs::{claim_runs, ClaimRuns};
use rendezvous_client::{firing, Firing, LeaderElector, LeaderOptions};
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};

const ROUNDS: usize = 5;
/// The leader's refresh (its lease is 2 × refresh) and the claims' lease (renewed every third).
const REFRESH: Duration = Duration::from_millis(500);
const LEASE: Duration = Duration::from_millis(2000);
/// How often the next host tries to claim a firing or a run.
const POLL: Duration = Duration::from_millis(5);
/// Past this, a round gives up (and says so).
const GIVE_UP: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    Kill,
    Terminate,
    Stop,
    Partition,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Kill => "SIGKILL",
            Fault::Terminate => "pg_terminate_backend",
            Fault::Stop => "SIGSTOP",
            Fault::Partition => "silent partition",
        }
    }
}

#[derive(Clone, Copy)]
enum Work {
    Leader,
    Firing,
    Run,
}

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::Leader => "leader",
            Work::Firing => "firing",
            Work::Run => "run",
        }
    }
}

/// The holder: its process and its backend.
struct Holder {
    child: Child,
    backend: i32,
}

async fn first_line(child: &mut Child, starts: &str) -> String {
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("the holder ended early");
            if line.starts_with(starts) {
                return line;
            }
        }
    })
    .await
    .expect("the holder never held its work");
    // Keep reading, so the holder never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    line
}

async fn start_holder(
    url: &str,
    admin: &tokio_postgres::Client,
    work: Work,
    name: &str,
    fire_secs: u64,
) -> Holder {
    let bin = |b: &str| {
        let mut c = Command::new(b);
        c.arg(url).stdout(Stdio::piped()).stdin(Stdio::piped()).kill_on_drop(true);
        c
    };
    let (child, backend) = match work {
        Work::Leader => {
            let mut child = bin(env!("CARGO_BIN_EXE_elector"))
                .args([name, "holder", &REFRESH.as_millis().to_string()])
                .spawn()
                .unwrap();
            first_line(&mut child, "leader").await;
            let pid: i32 = admin
                .query_one(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'client backend'",
                    &[&format!("rendezvous leader {name} holder")],
                )
                .await
                .unwrap_or_else(|e| panic!("no session of the leader {name}: {e}"))
                .get(0);
            (child, pid)
        }
        Work::Firing | Work::Run => {
            let mut cmd = bin(env!("CARGO_BIN_EXE_claimer"));
            cmd.env("CLAIMER_LEASE_MS", LEASE.as_millis().to_string());
            match work {
                Work::Firing => cmd.args(["firing", name, &fire_secs.to_string(), "holder"]),
                _ => cmd.args(["run", name, "holder"]),
            };
            let mut child = cmd.spawn().unwrap();
            let line = first_line(&mut child, "claimed").await;
            (child, line.split(' ').nth(3).unwrap().parse().unwrap())
        }
    };
    Holder { child, backend }
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) of our own child, not yet reaped.
    unsafe { libc::kill(child.id().unwrap() as libc::pid_t, sig) };
}

fn can_partition() -> bool {
    rendezvous_cli::partition::available()
}

/// One round: a holder, the next host waiting, the fault, and the time until the next host holds.
async fn round(
    url: &str,
    admin: &tokio_postgres::Client,
    work: Work,
    fault: Fault,
    name: &str,
) -> Option<Duration> {
    if let Work::Run = work {
        rendezvous_client::spawn_run(admin, "takeover", name, &serde_json::json!({}), None).await.unwrap();
    }
    // A firing due a second ago, claimed by the holder first.
    let fire_secs = now_secs() - 1;
    let firing = Firing::new(name, UNIX_EPOCH + Duration::from_secs(fire_secs));
    let mut holder = start_holder(url, admin, work, name, fire_secs).await;
    // The next host, connected and waiting before the fault.
    let taker = rendezvous_client::connect(url).await.unwrap();
    let elector = match work {
        Work::Leader => Some(
            LeaderElector::start(
                url,
                name,
                "next",
                LeaderOptions::default().with_refresh(Duration::from_millis(200)),
            )
            .await
            .unwrap(),
        ),
        _ => None,
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let faulted = Instant::now();
    let mut cut = None;
    match fault {
        Fault::Kill => holder.child.start_kill().unwrap(),
        Fault::Terminate => {
            admin.execute("SELECT pg_terminate_backend($1)", &[&holder.backend]).await.unwrap();
        }
        Fault::Stop => signal(&holder.child, libc::SIGSTOP),
        Fault::Partition => {
            // The holder's process, its open connection and any new one (it cannot reconnect).
            let pid = holder.child.id().unwrap();
            cut = Some(
                rendezvous_cli::partition::Partition::cut(pid, &format!("rendezvous-takeover-{pid}"))
                    .unwrap(),
            );
        }
    }
    let held = async {
        loop {
            let now_held = match work {
                Work::Leader => elector.as_ref().unwrap().is_leader(),
                Work::Firing => firing::claim_firing(&taker, &firing, "next", LEASE).await.unwrap().claimed,
                Work::Run => {
                    let refs = [name];
                    let options = ClaimRuns {
                        lease: LEASE,
                        workflow_refs: Some(&refs),
                        grace: Duration::ZERO,
                        ..Default::default()
                    };
                    !claim_runs(&taker, "next", &options).await.unwrap().is_empty()
                }
            };
            if now_held {
                return faulted.elapsed();
            }
            tokio::time::sleep(if let Work::Leader = work { Duration::from_millis(1) } else { POLL }).await;
        }
    };
    let took = tokio::time::timeout(GIVE_UP, held).await.ok();
    match fault {
        Fault::Stop => signal(&holder.child, libc::SIGCONT),
        Fault::Partition => drop(cut),
        _ => {}
    }
    let _ = holder.child.start_kill();
    let _ = holder.child.wait().await;
    if let Some(e) = elector {
        e.shutdown(std::time::Duration::from_secs(10)).await.ok();
    }
    took
}

fn cell(times: &[Option<Duration>]) -> String {
    let mut ok: Vec<Duration> = times.iter().flatten().copied().collect();
    if ok.is_empty() {
        return "never (30 s)".into();
    }
    ok.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let missed = times.len() - ok.len();
    format!(
        "{:.0} / {:.0} ms{}",
        ms(ok[ok.len() / 2]),
        ms(*ok.last().unwrap()),
        if missed > 0 { format!(" ({missed} never)") } else { String::new() }
    )
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let Ok(url) = std::env::var("RENDEZVOUS_DATABASE_URL") else {
        println!("set RENDEZVOUS_DATABASE_URL, or run scripts/bench.sh takeover");
        return;
    };
    let admin = rendezvous_client::connect(url.as_str()).await.unwrap();
    let mut faults = vec![Fault::Kill, Fault::Terminate, Fault::Stop];
    if can_partition() {
        faults.push(Fault::Partition);
    }
    println!(
        "Takeover: fault of the holder → another host holds the work, p50 / max of {ROUNDS} rounds. Claims: lease \
         {LEASE:?}, renewed every third; leader: refresh {REFRESH:?}, lease 2 × refresh; the next host polls every {POLL:?} \
         (leader: its elector, refresh 200 ms)\n"
    );
    let header: Vec<&str> = faults.iter().map(|f| f.name()).collect();
    println!("| work | {} |", header.join(" | "));
    println!("|---|{}", "---:|".repeat(faults.len()));
    for work in [Work::Leader, Work::Firing, Work::Run] {
        let mut cells = Vec::new();
        for &fault in &faults {
            let mut times = Vec::new();
            for r in 0..ROUNDS {
                // Short: a session's name (which carries it) is cut at 63 bytes.
                let name = format!("tk-{}-{}-{r}-{}", work.name(), fault as u8, now_secs() % 100_000);
                times.push(round(&url, &admin, work, fault, &name).await);
            }
            cells.push(cell(&times));
        }
        println!("| {} | {} |", work.name(), cells.join(" | "));
    }
    if !faults.contains(&Fault::Partition) {
        println!("\n(silent partition and a cut-off primary: not measured, they need root and iptables)");
        return;
    }
    // A primary cut off from its synchronous standby, left running.
    let mut rounds = Vec::new();
    for r in 0..CUT_OFF_ROUNDS {
        rounds.push(cut_off_round(r).await);
    }
    let cells: Vec<String> = (0..3).map(|w| cell(&rounds.iter().map(|t| t[w]).collect::<Vec<_>>())).collect();
    println!(
        "\nA primary cut off from its synchronous standby and left running; the failover tool fences it \
         and promotes the standby after {:?} (fault → the next host holds the work on the promoted server, \
         p50 / max of {CUT_OFF_ROUNDS} rounds)\n",
        Duration::from_secs(5)
    );
    println!("| leader | firing | run |\n|---:|---:|---:|\n| {} |", cells.join(" | "));
}

const CUT_OFF_ROUNDS: usize = 3;

/// One round on a fresh synchronous pair: a leader, a firing and a run held by processes on
/// the primary; the primary cut off; each next host tries as the runtime does (each try
/// bounded, the connection made again through the multi-host URL after a failure).
async fn cut_off_round(r: usize) -> [Option<Duration>; 3] {
    use rendezvous_cli::ha::{Engine, Ha};
    let mut ha = Ha::start(Engine::PromotePartitioned).await.expect("a synchronous pair");
    let url = ha.url();
    let admin = rendezvous_client::connect(url.as_str()).await.unwrap();
    let name = format!("tk-cut-{r}-{}", now_secs() % 100_000);
    rendezvous_client::spawn_run(&admin, "takeover", &name, &serde_json::json!({}), None).await.unwrap();
    let fire_secs = now_secs() - 1;
    let firing = Firing::new(name.as_str(), UNIX_EPOCH + Duration::from_secs(fire_secs));
    let mut holders = Vec::new();
    for work in [Work::Leader, Work::Firing, Work::Run] {
        holders.push(start_holder(&url, &admin, work, &name, fire_secs).await);
    }
    let elector = LeaderElector::start(
        url.as_str(),
        &name,
        "next",
        LeaderOptions::default().with_refresh(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let faulted = Instant::now();
    // The next hosts' tries for the firing and the run, each bounded; a failed or unanswered
    // try gives its connection up.
    let taker = |work: Work| {
        let (url, name, firing) = (url.clone(), name.clone(), firing.clone());
        tokio::spawn(async move {
            let mut client: Option<tokio_postgres::Client> = None;
            while faulted.elapsed() < Duration::from_secs(60) {
                if client.as_ref().is_none_or(|c| c.is_closed()) {
                    client = tokio::time::timeout(
                        Duration::from_secs(1),
                        rendezvous_client::connect(url.as_str()),
                    )
                    .await
                    .ok()
                    .and_then(|c| c.ok());
                }
                if let Some(c) = &client {
                    let tried = tokio::time::timeout(Duration::from_secs(1), async {
                        match work {
                            Work::Firing => {
                                firing::claim_firing(c, &firing, "next", LEASE).await.map(|c| c.claimed)
                            }
                            _ => {
                                let refs = [name.as_str()];
                                let options = ClaimRuns {
                                    lease: LEASE,
                                    workflow_refs: Some(&refs),
                                    grace: Duration::ZERO,
                                    ..Default::default()
                                };
                                claim_runs(c, "next", &options).await.map(|c| !c.is_empty())
                            }
                        }
                    })
                    .await;
                    match tried {
                        Ok(Ok(true)) => return Some(faulted.elapsed()),
                        Ok(Ok(false)) => {}
                        _ => client = None,
                    }
                }
                tokio::time::sleep(POLL).await;
            }
            None
        })
    };
    let (firing_taker, run_taker) = (taker(Work::Firing), taker(Work::Run));
    ha.kill_primary().await.expect("cut the primary off");
    ha.take_over().expect("promote the standby");
    let mut leader = None;
    while faulted.elapsed() < Duration::from_secs(60) {
        if elector.is_leader() {
            leader = Some(faulted.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (f, r) = (firing_taker.await.unwrap(), run_taker.await.unwrap());
    elector.shutdown(std::time::Duration::from_secs(10)).await.ok();
    for mut h in holders {
        let _ = h.child.start_kill();
        let _ = h.child.wait().await;
    }
    [leader, f, r]
}
