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
    assert_eq!(figure(&report, "runs admitted"), due);
    assert!(report.contains("chaos "), "chaos ran: {report}");
}

#[test]
fn status_reports_as_json() {
    let out = Command::new(env!("CARGO_BIN_EXE_rendezvous"))
        .args(["status", "--database-url", "postgresql://nobody@127.0.0.1:1/none"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "an unreachable database is a clear error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"));
}
