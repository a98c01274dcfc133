//! `rendezvous cluster run`: the command gets the cluster's variables and its settings, its exit
//! status comes back, and the cluster (server and directory) is gone however it ended. (Needs
//! pg_rendezvous installed: scripts/test.sh installs it first.)
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn rendezvous() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rendezvous"))
}

/// The server's pid and the cluster's directory, from the `pid dir` line the command printed.
fn cluster_of(out: &Output) -> (u32, String) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("cluster "))
        .unwrap_or_else(|| panic!("no cluster line in:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    let mut words = line.split_whitespace().skip(1);
    (words.next().unwrap().parse().unwrap(), words.next().unwrap().to_owned())
}

/// Prints `cluster <server pid> <dir>`, then runs `then`.
fn script(then: &str) -> String {
    format!(
        r#"echo "cluster $(head -1 "$RENDEZVOUS_CLUSTER_DIR/data/postmaster.pid") $RENDEZVOUS_CLUSTER_DIR"; {then}"#
    )
}

fn assert_gone(pid: u32, dir: &str) {
    assert!(!Path::new(dir).exists(), "{dir} is left over");
    // Gone, or a zombie that init has not reaped yet (the server was detached from us).
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = state.rsplit_once(") ").map(|(_, rest)| rest.chars().next().unwrap_or('?'));
    assert!(matches!(state, None | Some('Z') | Some('X')), "the server (pid {pid}) is still running");
}

#[test]
fn the_command_gets_the_cluster_and_its_exit_status_comes_back() {
    let psql = rendezvous_cli::cluster::bindir().unwrap().join("psql");
    let then = format!(
        r#"test "$DATABASE_URL" = "postgresql://postgres@127.0.0.1:$PGPORT/postgres" && test "$PGHOST" = 127.0.0.1 \
           && test "$PGUSER" = postgres && {} -X -Atc "SHOW work_mem" -c "SELECT extname FROM pg_extension ORDER BY 1"; exit 3"#,
        psql.display()
    );
    let out = rendezvous()
        .args(["cluster", "run", "-c", "work_mem=77MB", "--", "sh", "-c", &script(&then)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("77MB\npg_rendezvous\nplpgsql\n"), "{stdout}");
    let (pid, dir) = cluster_of(&out);
    assert_gone(pid, &dir);

    let out = rendezvous()
        .args([
            "cluster",
            "run",
            "--no-extension",
            "--",
            "sh",
            "-c",
            &script(&format!(
                r#"{} -X -Atc "SELECT count(*) FROM pg_extension WHERE extname = 'pg_rendezvous'""#,
                psql.display()
            )),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("\n0\n"));
    let (pid, dir) = cluster_of(&out);
    assert_gone(pid, &dir);

    let out = rendezvous().args(["cluster", "run", "--", "/nonexistent/command"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
}

#[test]
fn a_signal_ends_the_command_and_the_cluster() {
    let mut child = rendezvous()
        .args(["cluster", "run", "--", "sh", "-c", &script("exec sleep 60")])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the cluster line, then SIGTERM the rendezvous process only.
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = String::new();
    let started = Instant::now();
    while !seen.contains('\n') {
        let mut buf = [0u8; 256];
        let n = std::io::Read::read(&mut stdout, &mut buf).unwrap();
        assert!(n > 0 && started.elapsed() < Duration::from_secs(60), "no cluster line: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 15), "the command's end by SIGTERM comes back as 143");
    let out = Output { status, stdout: seen.into_bytes(), stderr: Vec::new() };
    let (pid, dir) = cluster_of(&out);
    assert_gone(pid, &dir);
}
