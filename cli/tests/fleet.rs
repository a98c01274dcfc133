//! The main job under CI: a short `rendezvous fleet --chaos` on its embedded throwaway cluster
//! must end with PASS, zero executed twice and zero lost. (Needs pg_rendezvous installed:
//! scripts/test.sh installs it first.)
use std::process::Command;

fn figure(report: &str, label: &str) -> i64 {
    let line =
        report.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label:?} in:\n{report}"));
    line[label.len()..].split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn a_short_fleet_under_chaos_passes() {
    let out = Command::new(env!("CARGO_BIN_EXE_rendezvous"))
        .args(["fleet", "--hosts", "4", "--duration", "15", "--tasks", "8", "--chaos", "--seed", "3"])
        .output()
        .expect("run rendezvous fleet");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "fleet failed:\n{report}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(report.contains("verdict                  PASS"), "{report}");
    let due = figure(&report, "firings due");
    assert!(due >= 100, "{report}");
    assert_eq!(figure(&report, "firings completed"), due);
    assert_eq!(figure(&report, "executed twice"), 0);
    assert_eq!(figure(&report, "lost"), 0);
    assert_eq!(figure(&report, "started before due"), 0, "a firing started before it was due: {report}");
    assert_eq!(figure(&report, "failed for good"), 0, "{report}");
    assert!(
        figure(&report, "retried after a failure") > 0,
        "planned first-attempt failures were retried: {report}"
    );
    assert_eq!(figure(&report, "runs admitted"), due);
    assert!(report.contains("chaos "), "chaos ran: {report}");
}

#[test]
fn status_of_an_unreachable_database_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_rendezvous"))
        .args(["status", "--database-url", "postgresql://nobody@127.0.0.1:1/none"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "an unreachable database is a clear error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"));
}

#[test]
fn status_reports_as_json_for_an_observer_role() {
    let psql = rendezvous_cli::cluster::bindir().unwrap().join("psql");
    let psql = psql.display();
    let role = format!("rz_status_{}", std::process::id());
    // Some of everything, made as the superuser; then `status --json` as a role that is only a
    // member of rendezvous_observer.
    let script = format!(
        r#"set -e
{psql} -X -q -v ON_ERROR_STOP=1 \
  -c "CREATE ROLE {role} LOGIN; GRANT rendezvous_observer TO {role};" \
  -c "SELECT rendezvous.heartbeat('h1')" \
  -c "SELECT * FROM rendezvous.try_lead('g', 'h1')" \
  -c "SELECT * FROM rendezvous.spawn_run('acme', 'wf', '{{}}', 'k1')" \
  -c "SELECT * FROM rendezvous.claim_firing('t', '2026-01-01 00:00+00', 'h1')" \
  -c "SELECT rendezvous.schedule_task('nightly', '@daily', 'Europe/Berlin')" >/dev/null
"{rendezvous}" status --json --database-url "postgresql://{role}@127.0.0.1:$PGPORT/postgres"
echo '--- prometheus'
"{rendezvous}" status --prometheus --database-url "postgresql://{role}@127.0.0.1:$PGPORT/postgres"
echo '--- watch'
timeout 2.5 "{rendezvous}" status --watch 1 --database-url "postgresql://{role}@127.0.0.1:$PGPORT/postgres" || true
{psql} -X -q -c "DROP ROLE {role}" >/dev/null"#,
        rendezvous = env!("CARGO_BIN_EXE_rendezvous"),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_rendezvous"))
        .args(["cluster", "run", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let (json, rest) = stdout.split_once("--- prometheus\n").unwrap();
    let (prometheus, watch) = rest.split_once("--- watch\n").unwrap();
    let status: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(status["hosts"][0]["host_id"], "h1");
    assert_eq!(status["hosts"][0]["live"], true);
    assert_eq!(status["leaders"][0]["group"], "g");
    assert_eq!(status["leaders"][0]["epoch"], 1);
    assert_eq!(status["recent_runs"][0]["dispatch_key"], "k1");
    assert_eq!(status["firings"]["in_flight"], 1);
    assert_eq!(status["firings"]["in_flight_sample"][0]["holder"], "h1");
    assert_eq!(status["tasks"][0]["task_id"], "nightly");
    assert_eq!(status["tasks"][0]["schedule"], "@daily");
    assert!(status["tasks"][0]["next_fire_in_seconds"].as_f64().unwrap() > 0.0);
    for line in [
        "rendezvous_host_live{host_id=\"h1\"} 1",
        "rendezvous_leader_epoch{group=\"g\"} 1",
        "rendezvous_firings_in_flight 1",
        "rendezvous_task_failed_firings{task_id=\"nightly\"} 0",
    ] {
        assert!(prometheus.lines().any(|l| l == line), "no {line:?} in:\n{prometheus}");
    }
    // --watch redraws in place: at least two frames in 2.5 s at one a second.
    assert!(watch.matches("\x1b[H\x1b[2J").count() >= 2, "{watch:?}");
    assert!(watch.matches("hosts\n").count() >= 2, "{watch:?}");
}
