// What the peers' drivers (graphile.mjs, pgboss.mjs) share: the same shape of measurement as
// client/benches/runs.rs, so the numbers stand beside ours.
//
// A driver is run four ways:
//   node PEER.mjs throughput       markdown rows: 4 hosts × 1, 4 and 16 handlers drain a backlog
//   node PEER.mjs pickup           one line: p50/p99 from add acknowledged to handler started
//   node PEER.mjs admit            markdown rows: 1, 4 and 16 callers add batches of 500 jobs
//                                  (the peer's batch call) for 4 s each, jobs added per second
//   node PEER.mjs host N [record]  (internal) one host with N handlers, forked by the driver
// The database is the one in PEER_DATABASE_URL.
//
// Each host is a separate node process, like our 4 Scheduler hosts. A host loads its modules and
// says `ready` before the clock starts; on `go` it connects and starts working, inside the timed
// window, as a Scheduler's start is in ours. So node's own start-up is left out, the peer's is not.
import { fork } from 'node:child_process';
import { appendFileSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const HOSTS = 4;
export const BACKLOG = 10_000;
// RUNS_BENCH_HANDLERS="1 4" measures only those cases, as it does for runs.rs.
export const PER_HOST_CASES = (process.env.RUNS_BENCH_HANDLERS ?? '1 4 16').trim().split(/\s+/).map(Number);
export const PICKUP_PER_HOST = 4;
export const ARRIVALS_PER_SECOND = 200;
export const ARRIVAL_SECONDS = 10;
// Batch admission, as client/benches/admission.rs measures spawn_runs.
export const ADMIT_BATCH = 500;
export const ADMIT_SECONDS = 4;
export const ADMIT_CALLERS = [1, 4, 16];
// A case that cannot drain the backlog in this long is reported as such rather than waited for.
const CASE_LIMIT_MS = Number(process.env.PEERS_CASE_LIMIT_SECONDS ?? 300) * 1000;

// Wall-clock milliseconds with sub-millisecond precision, comparable between processes on this
// machine (Date.now() has whole milliseconds only).
export const now = () => performance.timeOrigin + performance.now();
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// CPU time in /proc's clock ticks (100 a second), as client/benches/runs.rs reads it: a process's
// utime + stime, with `reaped` also its waited-for children's; and its parent's pid.
function ticks(pid, reaped) {
  let stat;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ').map(Number);
  return { ppid: f[1], ticks: f[11] + f[12] + (reaped ? f[13] + f[14] : 0) };
}

// The server's CPU so far: its postmaster (PEER_POSTMASTER_PID) with the backends it has reaped,
// and its live backends.
function serverTicks() {
  const pm = Number(process.env.PEER_POSTMASTER_PID);
  if (!pm) throw new Error('set PEER_POSTMASTER_PID (scripts/bench/runs_peers.sh does)');
  let total = ticks(pm, true)?.ticks ?? 0;
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const t = ticks(name, false);
    if (t && t.ppid === pm) total += t.ticks;
  }
  return total;
}

// The clients' CPU so far: this driver's and its hosts'.
function clientTicks(pids) {
  return [process.pid, ...pids].reduce((sum, pid) => sum + (ticks(pid, false)?.ticks ?? 0), 0);
}

export function databaseUrl() {
  const url = process.env.PEER_DATABASE_URL;
  if (!url) throw new Error('set PEER_DATABASE_URL (scripts/bench/runs_peers.sh does)');
  return url;
}

// `peer` is { name, open(url), reset(admin), fill(admin, n), add(admin), addBatch(admin, keys),
// remaining(admin), close(admin), host(url, perHost, started) }; `started(id)` is called as each
// handler starts, and host() resolves to an async stop(). `addBatch` adds one job per key in one
// call, keyed as the peer allows (`batchKeys` says how).
export async function main(peer, moduleUrl) {
  const [mode, ...args] = process.argv.slice(2);
  if (mode === 'host') return hostMain(peer, Number(args[0]), args[1] === 'record');
  const driver = new Driver(fileURLToPath(moduleUrl));
  const admin = await peer.open(databaseUrl());
  try {
    if (mode === 'throughput') await throughput(peer, admin, driver);
    else if (mode === 'pickup') await pickup(peer, admin, driver);
    else if (mode === 'admit') await admit(peer, admin);
    else throw new Error(`unknown mode ${mode}: throughput, pickup, admit or host`);
  } finally {
    await driver.killAll();
    await peer.close(admin);
  }
}

// Callers (concurrent calls on the peer's pool, which has a connection for each) add batches of
// ADMIT_BATCH new jobs for ADMIT_SECONDS: jobs added per second, one row per number of callers.
async function admit(peer, admin) {
  for (const callers of ADMIT_CALLERS) {
    await peer.reset(admin);
    const started = performance.now();
    let added = 0;
    await Promise.all(
      Array.from({ length: callers }, async (_, c) => {
        for (let b = 0; performance.now() - started < ADMIT_SECONDS * 1000; b++) {
          const keys = Array.from({ length: ADMIT_BATCH }, (_, i) => `k/${callers}/${c}/${b}/${i}`);
          await peer.addBatch(admin, keys);
          added += ADMIT_BATCH;
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    console.log(`| ${peer.name}: ${peer.batchKeys} | ${callers} | ${(added / seconds).toFixed(0)} |`);
  }
}

async function throughput(peer, admin, driver) {
  for (const perHost of PER_HOST_CASES) {
    await peer.reset(admin);
    await peer.fill(admin, BACKLOG);
    const fleet = await driver.fleet(perHost, false);
    const [serverBefore, clientBefore] = [serverTicks(), clientTicks(fleet.pids)];
    const started = performance.now();
    await fleet.go();
    let left = await peer.remaining(admin);
    while (left > 0 && performance.now() - started < CASE_LIMIT_MS) {
      await sleep(20);
      left = await peer.remaining(admin);
    }
    const seconds = (performance.now() - started) / 1000;
    // Microseconds of CPU per job (ticks of 10 ms).
    const perJob = (t) => ((t * 10_000) / BACKLOG).toFixed(1);
    const cpu = `${perJob(serverTicks() - serverBefore)} | ${perJob(clientTicks(fleet.pids) - clientBefore)}`;
    await fleet.stop();
    const all = perHost * HOSTS;
    if (left === 0) {
      console.log(`| ${peer.name} | ${all} (${perHost}) | ${(BACKLOG / seconds).toFixed(0)} | ${cpu} |`);
    } else {
      const done = BACKLOG - left;
      console.log(
        `| ${peer.name} | ${all} (${perHost}) | ${(done / seconds).toFixed(0)}: unfinished, ` +
          `${done} of ${BACKLOG} in ${seconds.toFixed(0)} s | | |`,
      );
    }
  }
}

async function pickup(peer, admin, driver) {
  await peer.reset(admin);
  const fleet = await driver.fleet(PICKUP_PER_HOST, true);
  await fleet.go();
  await sleep(2000); // all connected and idle
  const added = new Map();
  const every = 1000 / ARRIVALS_PER_SECOND;
  let next = performance.now();
  for (let i = 0; i < ARRIVALS_PER_SECOND * ARRIVAL_SECONDS; i++) {
    const wait = next - performance.now();
    if (wait > 0) await sleep(wait);
    const id = await peer.add(admin);
    added.set(String(id), now());
    next += every;
  }
  const deadline = performance.now() + 60_000;
  while ((await peer.remaining(admin)) > 0 && performance.now() < deadline) await sleep(20);
  const starts = new Map(await fleet.stop());
  const latencies = [];
  // A handler can start before the add's acknowledgement reaches the producer (the NOTIFY goes out
  // at commit): that counts as 0, as runs.rs's saturating difference does.
  for (const [id, at] of added) if (starts.has(id)) latencies.push(Math.max(0, starts.get(id) - at));
  latencies.sort((a, b) => a - b);
  // The same percentile as runs.rs: the element at floor(n·p).
  const pct = (p) => latencies[Math.min(Math.floor(latencies.length * p), latencies.length - 1)];
  const missing = added.size - latencies.length;
  if (latencies.length === 0) throw new Error(`${peer.name} pickup: no added job was seen to start`);
  console.log(
    `${peer.name} pickup: p50 ${pct(0.5).toFixed(1)} ms, p99 ${pct(0.99).toFixed(1)} ms (${latencies.length} jobs` +
      (missing ? `; ${missing} added jobs never started` : '') +
      ')',
  );
}

// The forked hosts of one driver. Every child's pid also goes to PEERS_PID_FILE, so the shell
// script can end them by pid if this driver itself dies.
class Driver {
  constructor(script) {
    this.script = script;
    this.live = new Set();
    // A driver that exits for any reason takes its hosts with it (they also exit on their own
    // when the IPC channel closes).
    process.on('exit', () => {
      for (const child of this.live) child.kill('SIGKILL');
    });
    for (const [signal, number] of [['SIGINT', 2], ['SIGTERM', 15], ['SIGHUP', 1]]) {
      process.on(signal, () => process.exit(128 + number));
    }
  }

  spawn(perHost, record) {
    const child = fork(this.script, ['host', String(perHost), record ? 'record' : ''], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    if (process.env.PEERS_PID_FILE) appendFileSync(process.env.PEERS_PID_FILE, `${child.pid}\n`);
    this.live.add(child);
    const inbox = [];
    const waiters = [];
    child.on('message', (m) => (waiters.length ? waiters.shift().resolve(m) : inbox.push(m)));
    child.on('exit', (code, signal) => {
      this.live.delete(child);
      child.exited = true;
      for (const w of waiters.splice(0)) w.reject(new Error(`host ${child.pid} exited (${code ?? signal})`));
    });
    // The host's next message, in order; rejects if it exits first or takes longer than `ms`.
    child.next = (ms = 30_000) =>
      inbox.length
        ? Promise.resolve(inbox.shift())
        : new Promise((resolve, reject) => {
            if (child.exited) return reject(new Error(`host ${child.pid} exited`));
            const timer = setTimeout(() => reject(new Error(`host ${child.pid}: no answer in ${ms} ms`)), ms);
            waiters.push({
              resolve: (m) => (clearTimeout(timer), resolve(m)),
              reject: (e) => (clearTimeout(timer), reject(e)),
            });
          });
    return child;
  }

  async fleet(perHost, record) {
    const hosts = Array.from({ length: HOSTS }, () => this.spawn(perHost, record));
    await Promise.all(hosts.map((h) => expect(h, 'ready')));
    return {
      pids: hosts.map((h) => h.pid),
      // Resolves when every host has started working (it was told `go` just before).
      go: async () => {
        for (const h of hosts) h.send('go');
        await Promise.all(hosts.map((h) => expect(h, 'started')));
      },
      // Stops the hosts gracefully; resolves to the [job id, handler start] pairs they recorded.
      stop: async () => {
        for (const h of hosts) h.send('stop');
        const reports = await Promise.all(hosts.map((h) => h.next(20_000).catch(() => ({ starts: [] }))));
        await Promise.all(hosts.map((h) => exited(h, 5_000)));
        return reports.flatMap((r) => r.starts ?? []);
      },
    };
  }

  async killAll() {
    for (const child of this.live) child.kill('SIGKILL');
    await Promise.all([...this.live].map((h) => exited(h, 5_000)));
  }
}

async function expect(host, message) {
  const m = await host.next();
  if (m !== message) throw new Error(`host ${host.pid}: expected ${message}, got ${JSON.stringify(m)}`);
}

async function exited(host, ms) {
  if (host.exited) return;
  const gone = new Promise((resolve) => host.once('exit', resolve));
  if ((await Promise.race([gone, sleep(ms).then(() => 'late')])) === 'late') {
    host.kill('SIGKILL');
    await gone;
  }
}

async function hostMain(peer, perHost, record) {
  // Never outlive the driver: its IPC channel closing means it is gone.
  process.on('disconnect', () => process.exit(1));
  const url = databaseUrl();
  const starts = [];
  const started = record ? (id) => starts.push([String(id), now()]) : () => {};
  let stop = null;
  // Messages are handled one after another: a `stop` that comes while `go` is starting waits.
  let chain = Promise.resolve();
  process.on('message', (m) => {
    chain = chain.then(async () => {
      if (m === 'go') {
        stop = await peer.host(url, perHost, started);
        process.send('started');
      } else if (m === 'stop') {
        if (stop) await stop();
        process.send({ starts }, () => process.exit(0));
      }
    }).catch((e) => {
      console.error(`${peer.name} host ${process.pid}:`, e);
      process.exit(1);
    });
  });
  process.send('ready');
}
