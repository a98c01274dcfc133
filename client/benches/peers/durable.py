"""Durable runs beside DBOS Transact, on one cluster (scripts/bench/durable.sh runs it; not a test).

The work: a workflow of three trivial durable steps. Ours is the `bench3` workflow of
tests/src/bin/durable_host.rs (a `Worker` with `Job::step`); DBOS's is a `@DBOS.workflow()` of three
`@DBOS.step()`s, in the `dbos` package pinned in requirements-dbos.txt, self-hosted (its system
database on the same cluster, no Conductor).

1. Throughput: 4 host processes with 1, 4 and 16 workflows at once each drain a backlog of
   workflows; workflows/s while the backlog drains from 10 % to 90 % done (database counts; the
   hosts' start-up and the last stragglers left out). Ours: runs admitted with spawn_run, hosts with `max_concurrent` = the concurrency.
   DBOS: enqueued on a `Queue` with `worker_concurrency` = the concurrency and its polling interval
   at 10 ms (its default is 1 s, which would cap it at concurrency × 4 per second), and, as its
   fastest path, the same number of workflows called in-process by that many threads per host
   (no queue: each process runs the workflows it starts). Step checkpoint latency: each executed
   step's call, trivial work included, p50 and p99 over all hosts.
2. Recovery: 4 hosts each running 4 workflows of three 1-second steps; SIGKILL one host in the
   middle of its workflows' second step. Ours: the other hosts take them over by themselves; time
   from the kill to each one held by a live host, and steps re-executed (a step run again after it
   was recorded). DBOS self-hosted: a crashed executor's workflows are recovered when a process
   with the same executor id launches (or by an admin API call naming it); we wait 5 s to see
   whether anything resumes them, then start the host again with its executor id.

Usage: python durable.py URL OURS_HOST_BIN   (the database must have pg_rendezvous)
       python durable.py --dbos-host URL EXECUTOR MODE SLOTS STEP_MS COUNT   (a DBOS host)
"""
import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time

import psycopg

HOSTS = 4
BACKLOG = int(os.environ.get("DURABLE_BACKLOG", "2000"))
CONCURRENCY = (1, 4, 16)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(int(len(xs) * p), len(xs) - 1)] if xs else 0


# ---------------------------------------------------------------------------------------------
# A DBOS host: MODE is `queue` (dequeues the bench queue), `direct` (SLOTS threads call the
# workflow COUNT times in all, after a line on stdin), `enqueue` (enqueues COUNT workflows and
# exits) or `recover` (starts SLOTS workflows in threads at once, as a crashed host's would be).
# On SIGTERM it prints its step latencies as JSON and exits.
def dbos_host(url, executor, mode, slots, step_ms, count):
    from dbos import DBOS

    DBOS(config={"name": "durable-bench", "system_database_url": url, "executor_id": executor,
                 "application_version": "bench", "log_level": "WARNING"})
    latencies, lock, local = [], threading.Lock(), threading.local()
    calls = psycopg.connect(url, autocommit=True) if step_ms > 0 else None
    if mode == "enqueue":
        DBOS.listen_queues([])  # it must not dequeue what it enqueues: it exits at once

    @DBOS.step()
    def step(name):
        local.ran = True
        if calls is not None:
            with lock:
                calls.execute("INSERT INTO bench_calls (system, workflow, step, host, at) VALUES ('dbos', %s, %s, %s, clock_timestamp())",
                              (DBOS.workflow_id, name, executor))
            time.sleep(step_ms / 1000)
        return len(name)

    @DBOS.workflow()
    def bench3():
        for name in ("one", "two", "three"):
            local.ran = False
            started = time.perf_counter()
            step(name)
            if local.ran:
                with lock:
                    latencies.append(int((time.perf_counter() - started) * 1e6))

    def report(*_):
        print(json.dumps({"latency_us": latencies}), flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, report)
    DBOS.launch()
    queue = DBOS.register_queue("bench3", worker_concurrency=slots, polling_interval_sec=0.01, on_conflict="always_update")
    if mode == "enqueue":
        for _ in range(count):
            queue.enqueue(bench3)
        os._exit(0)
    print("started", flush=True)
    if mode == "direct":
        sys.stdin.readline()
        per_thread = [count // slots + (1 if i < count % slots else 0) for i in range(slots)]
        threads = [threading.Thread(target=lambda n=n: [bench3() for _ in range(n)]) for n in per_thread]
        for t in threads:
            t.start()
    if mode == "recover":
        sys.stdin.readline()
        for i in range(slots):
            threading.Thread(target=bench3).start()
    while True:
        time.sleep(3600)


# ---------------------------------------------------------------------------------------------
STARTED = []


@atexit.register
def kill_started():
    """Hosts this driver started are ended with it, failure included (by their Popen, so ours only)."""
    for p in STARTED:
        if p.poll() is None:
            p.kill()


def start(cmd):
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    STARTED.append(p)
    line = p.stdout.readline()
    assert line.startswith("started"), f"{cmd[0]} said {line!r}"
    return p


def go(hosts):
    """Tells DBOS hosts waiting on stdin (modes direct and recover) to start their workflows."""
    for p in hosts:
        p.stdin.write("go\n")
        p.stdin.flush()


def stop(hosts):
    samples = []
    for p in hosts:
        p.send_signal(signal.SIGTERM)
    for p in hosts:
        out = p.communicate(timeout=30)[0]
        for line in out.splitlines():
            if line.startswith("{"):
                samples += json.loads(line)["latency_us"]
    return samples


def drain_rate(db, sql, n, timeout=180):
    """Workflows/s while the backlog drains, between 10 % and 90 % of it done: hosts' start-up
    and the last stragglers are left out, alike for every system."""
    lo, hi = n // 10, n - n // 10
    t_lo = wait_count(db, sql, lo, timeout)
    t_hi = wait_count(db, sql, hi, timeout)
    wait_count(db, sql, n, timeout)
    return (hi - lo) / (t_hi - t_lo)


def wait_count(db, sql, n, timeout=180):
    deadline = time.time() + timeout
    while True:
        got = db.execute(sql).fetchone()[0]
        if got >= n:
            return time.monotonic()
        assert time.time() < deadline, f"{sql}: {got} of {n}"
        time.sleep(0.01)


def reset(db):
    db.execute("TRUNCATE dbos.workflow_status, dbos.operation_outputs CASCADE")
    db.execute("TRUNCATE rendezvous.runs, rendezvous.steps, rendezvous.signals, rendezvous.hosts")
    db.execute("DROP TABLE IF EXISTS bench_calls")
    db.execute("CREATE TABLE bench_calls (system text, workflow text, step text, host text, at timestamptz)")


def dbos_cmd(url, executor, mode, slots, step_ms, count):
    return [sys.executable, __file__, "--dbos-host", url, executor, mode, str(slots), str(step_ms), str(count)]


DBOS_DONE = "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS' AND name LIKE '%bench3'"
OURS_DONE = "SELECT count(*) FROM rendezvous.runs WHERE state = 'succeeded'"


def throughput_ours(db, url, bin_, c):
    reset(db)
    db.execute("SELECT rendezvous.spawn_run('bench', 'bench3') FROM generate_series(1, %s)", (BACKLOG,))
    hosts = [start([bin_, url, f"host-{h}", str(c), "0"]) for h in range(HOSTS)]
    return drain_rate(db, OURS_DONE, BACKLOG), stop(hosts)


def throughput_dbos(db, url, c, mode):
    reset(db)
    if mode == "queue":
        subprocess.run(dbos_cmd(url, "enqueuer", "enqueue", c, 0, BACKLOG), check=True, stdout=subprocess.DEVNULL)
    share = [BACKLOG // HOSTS + (1 if i < BACKLOG % HOSTS else 0) for i in range(HOSTS)]
    hosts = [start(dbos_cmd(url, f"p{h}", mode, c, 0, share[h])) for h in range(HOSTS)]
    if mode == "direct":
        go(hosts)
    return drain_rate(db, DBOS_DONE, BACKLOG), stop(hosts)


def dbos_schema(url):
    """DBOS makes its system schema at launch; once, before hosts launch side by side."""
    subprocess.run(dbos_cmd(url, "migrator", "enqueue", 1, 0, 0), check=True, stdout=subprocess.DEVNULL)


def throughput(url, bin_):
    db = psycopg.connect(url, autocommit=True)
    rows = []
    for c in CONCURRENCY:
        for name, run in (("pg_rendezvous (`Job::step`)", lambda: throughput_ours(db, url, bin_, c)),
                          ("DBOS, queue (10 ms polling)", lambda: throughput_dbos(db, url, c, "queue")),
                          ("DBOS, in-process (no queue)", lambda: throughput_dbos(db, url, c, "direct"))):
            rate, lat = run()
            rows.append((c, name, rate, pct(lat, 0.5) / 1000, pct(lat, 0.99) / 1000))
            print(f"  {c:>2} at once: {name}: {rate:,.0f} workflows/s", file=sys.stderr, flush=True)
    print(f"| workflows at once per host (4 hosts) | system | workflows/s | step checkpoint p50 | p99 |")
    print("|---|---|---|---|---|")
    for c, name, rate, p50, p99 in rows:
        print(f"| {c} | {name} | {rate:,.0f} | {p50:.2f} ms | {p99:.2f} ms |")


def held_by(db, system, victim):
    if system == "ours":
        return [r[0] for r in db.execute("SELECT run_id::text FROM rendezvous.runs WHERE state = 'running' AND holder = %s", (victim,))]
    return [r[0] for r in db.execute("SELECT workflow_uuid FROM dbos.workflow_status WHERE status = 'PENDING' AND executor_id = %s", (victim,))]


def resumed_after(db, system, ids, since):
    """Per workflow: the first step call by anyone after `since` (epoch seconds), or None."""
    rows = db.execute("SELECT workflow, extract(epoch FROM min(at)) FROM bench_calls WHERE system = %s AND workflow = ANY(%s) "
                      "AND at > to_timestamp(%s) GROUP BY 1", (system, ids, since)).fetchall()
    got = {w: float(t) for w, t in rows}
    return [got.get(i) for i in ids]


def reexecuted(db, system):
    if system == "ours":
        sql = ("SELECT count(*) FROM bench_calls c CROSS JOIN LATERAL rendezvous.run_steps(c.workflow::bigint) s "
               "WHERE c.system = 'ours' AND s.step = c.step AND s.recorded_at < c.at")
    else:
        sql = ("SELECT count(*) FROM bench_calls c JOIN dbos.operation_outputs o ON o.workflow_uuid = c.workflow "
               "AND o.function_name LIKE '%%step' AND o.function_id = CASE c.step WHEN 'one' THEN 1 WHEN 'two' THEN 2 ELSE 3 END "
               "WHERE c.system = 'dbos' AND o.completed_at_epoch_ms < extract(epoch FROM c.at) * 1000")
    repeated = db.execute(f"SELECT count(*) FROM (SELECT 1 FROM bench_calls WHERE system = %s GROUP BY workflow, step HAVING count(*) > 1) x", (system,)).fetchone()[0]
    return db.execute(sql).fetchone()[0], repeated


def recovery(url, bin_):
    db = psycopg.connect(url, autocommit=True)
    out = []
    # Ours: 16 runs of three 1 s steps admitted once 4 hosts (8 slots each) are up; kill the one
    # holding the most in the middle of their second step.
    reset(db)
    hosts = {f"host-{h}": start([bin_, url, f"host-{h}", "8", "1000"]) for h in range(HOSTS)}
    db.execute("SELECT rendezvous.spawn_run('bench', 'bench3') FROM generate_series(1, 16)")
    time.sleep(1.5)
    victim = max(hosts, key=lambda h: len(held_by(db, "ours", h)))
    ids = held_by(db, "ours", victim)
    hosts[victim].kill()
    killed = time.time()
    wait_count(db, OURS_DONE, 16, timeout=60)
    resumed = [t - killed for t in resumed_after(db, "ours", ids, killed) if t is not None]
    stop([p for h, p in hosts.items() if h != victim])
    out.append(("pg_rendezvous", len(ids), resumed, "by the live hosts, by themselves (the killed host's claims end with its sessions)", reexecuted(db, "ours")))
    # DBOS: 4 hosts start 4 workflows each at once; kill p0 in the middle of their second step;
    # wait 5 s; start p0 again with its executor id.
    reset(db)
    hosts = {f"p{h}": start(dbos_cmd(url, f"p{h}", "recover", 4, 1000, 0)) for h in range(HOSTS)}
    go(hosts.values())
    time.sleep(1.5)
    ids = held_by(db, "dbos", "p0")
    hosts["p0"].kill()
    killed = time.time()
    time.sleep(5)
    alone = [t for t in resumed_after(db, "dbos", ids, killed) if t is not None]
    restarted = time.time()
    hosts["p0"] = start(dbos_cmd(url, "p0", "queue", 4, 1000, 0))
    wait_count(db, DBOS_DONE, 16, timeout=60)
    resumed = [t - killed for t in resumed_after(db, "dbos", ids, killed) if t is not None]
    stop(list(hosts.values()))
    how = (f"not by the live hosts ({len(alone)} resumed in 5 s); by a restart with the same executor id, "
           f"{pct([t - (restarted - killed) for t in resumed], 0.5):.2f} s after it")
    out.append(("DBOS (self-hosted, no Conductor)", len(ids), resumed, how, reexecuted(db, "dbos")))
    print("| system | workflows on the killed host | resumed after SIGKILL, p50 / max | how | recorded steps re-executed | in-flight steps repeated |")
    print("|---|---|---|---|---|---|")
    for name, n, resumed, how, (again, repeated) in out:
        times = f"{pct(resumed, 0.5):.2f} s / {max(resumed):.2f} s" if resumed else "never"
        print(f"| {name} | {n} | {times} | {how} | {again} | {repeated} |")


if __name__ == "__main__":
    if sys.argv[1] == "--dbos-host":
        u, ex, mode, slots, step_ms, count = sys.argv[2:8]
        dbos_host(u, ex, mode, int(slots), int(step_ms), int(count))
    else:
        url, ours = sys.argv[1], sys.argv[2]
        what = sys.argv[3] if len(sys.argv) > 3 else "all"
        dbos_schema(url)
        if what in ("all", "throughput"):
            throughput(url, ours)
            print()
        if what in ("all", "recovery"):
            recovery(url, ours)
