//! The client's metrics (`rendezvous_client::signals`) reach whatever recorder the application
//! installs: admissions by result, terms won and lost with their reason, the leadership gauge,
//! firings claimed and completed with their start lateness, and the live host count.
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use rendezvous_client::{
    hrw, membership, signals, spawn_run, Job, LeaderElector, LeaderOptions, TaskSpec, Worker, WorkerOptions,
};
use rendezvous_tests::TestDb;

/// One recorder for the whole test binary (a process has one).
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("no other metrics recorder in the test binary");
        snapshotter
    })
}

/// A metric's name and labels.
type Id = (String, Vec<(String, String)>);

/// What was recorded up to a checkpoint. A snapshot drains the recorder (gauges included), so
/// counts and histogram samples are added up across checkpoints, while gauges hold what was set
/// since the previous checkpoint.
#[derive(Default, Clone)]
struct Seen {
    counters: HashMap<Id, u64>,
    samples: HashMap<Id, usize>,
    gauges: HashMap<Id, f64>,
}

impl Seen {
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.counters.iter().filter(|(id, _)| matches(id, name, labels)).map(|(_, n)| n).sum()
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.gauges.iter().find(|(id, _)| matches(id, name, labels)).map(|(_, g)| *g)
    }

    fn samples(&self, name: &str) -> usize {
        self.samples.iter().filter(|(id, _)| matches(id, name, &[])).map(|(_, n)| n).sum()
    }
}

fn checkpoint() -> Seen {
    static TOTALS: OnceLock<Mutex<Seen>> = OnceLock::new();
    let mut totals = TOTALS.get_or_init(Mutex::default).lock().unwrap();
    totals.gauges.clear();
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let key = key.key();
        let id = (
            key.name().to_owned(),
            key.labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect(),
        );
        match value {
            DebugValue::Counter(n) => *totals.counters.entry(id).or_default() += n,
            DebugValue::Histogram(h) => *totals.samples.entry(id).or_default() += h.len(),
            DebugValue::Gauge(g) => {
                totals.gauges.insert(id, g.0);
            }
        }
    }
    totals.clone()
}

fn matches((name, labels): &Id, want: &str, with: &[(&str, &str)]) -> bool {
    name == want && with.iter().all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_client_reports_admissions_terms_firings_and_live_hosts() {
    let before = checkpoint();
    let db = TestDb::new("signals").await;
    let client = db.connect().await;

    let input = serde_json::json!({});
    spawn_run(&client, "acme", "wf", &input, Some("signals-key")).await.unwrap();
    spawn_run(&client, "acme", "wf", &input, Some("signals-key")).await.unwrap();
    let now = checkpoint();
    for result in ["created", "deduplicated"] {
        let labels = [("result", result)];
        assert!(now.counter(signals::ADMISSIONS, &labels) > before.counter(signals::ADMISSIONS, &labels));
    }
    assert!(now.samples(signals::ADMISSION_DURATION) >= before.samples(signals::ADMISSION_DURATION) + 2);

    let group = format!("signals-{}", std::process::id());
    let options = LeaderOptions::default().with_refresh(Duration::from_millis(200));
    let elector = LeaderElector::start(&db.url, &group, "a", options).await.unwrap();
    let start = std::time::Instant::now();
    while !elector.is_leader() {
        assert!(start.elapsed() < Duration::from_secs(10), "never led");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let leading = checkpoint();
    assert_eq!(leading.counter(signals::TERMS_WON, &[("group", &group)]), 1);
    assert_eq!(leading.gauge(signals::LEADER, &[("group", &group)]), Some(1.0));
    assert_eq!(leading.gauge(signals::LEADER_EPOCH, &[("group", &group)]), Some(1.0));
    elector.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
    let after = checkpoint();
    assert_eq!(after.counter(signals::TERMS_LOST, &[("group", &group), ("reason", "shutdown")]), 1);
    assert_eq!(after.gauge(signals::LEADER, &[("group", &group)]), Some(0.0));

    // Firings of a scheduled task, run by the work runtime.
    let scheduler = Worker::builder(&db.url, "h1")
        .options(WorkerOptions::default().with_poll(Duration::from_millis(100)))
        .task(TaskSpec::every("sig", Duration::from_secs(1)), |_job: Job| async {
            Ok::<(), std::io::Error>(())
        })
        .start()
        .await
        .unwrap();
    let start = std::time::Instant::now();
    while scheduler.stats().completed < 3 {
        assert!(start.elapsed() < Duration::from_secs(20), "three firings were not completed in 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    scheduler.shutdown(Duration::from_secs(5)).await.unwrap();
    membership::heartbeat(&client, "h1", 1.0).await.unwrap();
    membership::heartbeat(&client, "h2", 1.0).await.unwrap();
    let live = hrw::live_host_set(&client, membership::DEFAULT_STALENESS).await.unwrap();
    assert!(live.len() >= 2);
    let end = checkpoint();
    assert!(end.counter(signals::FIRINGS_CLAIMED, &[]) >= after.counter(signals::FIRINGS_CLAIMED, &[]) + 3);
    assert!(
        end.counter(signals::FIRINGS_COMPLETED, &[]) >= after.counter(signals::FIRINGS_COMPLETED, &[]) + 3
    );
    assert!(end.samples(signals::FIRING_START_LATENESS) >= after.samples(signals::FIRING_START_LATENESS) + 3);
    // Set; its value is the last caller's (other tests' schedulers share this process's gauge).
    assert!(end.gauge(signals::HOSTS_LIVE, &[]).is_some());
}
