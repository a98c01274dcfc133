// pg-boss (the version pinned in package.json) measured as client/benches/runs.rs measures our
// runtime; see common.mjs for the shape, scripts/bench/runs_peers.sh for how it is run.
//
// Its fastest documented configuration, not its defaults (docs/api/workers.md and
// docs/api/constructor.md of the pinned major; the options' doc comments in dist/types.d.ts):
//   useListenNotify: true + the queue's notify: true   a new job wakes idle workers at once
//                            instead of at their next poll (both off by default);
//   work(): batchSize: BATCH_SIZE   each fetch claims up to that many jobs, handed to the handler
//                            as one array and completed in one round trip (default 1);
//           burstWhenBatchFull: true   while fetches come back full, fetch again with no delay
//                            (default off; the other burst trigger, burstWhenReadyExceeds, reads
//                            queue stats refreshed every 60 s, too slow to act within a case);
//           pollingIntervalSeconds: 0.5, notifyPollingIntervalSeconds: 0.5   the documented
//                            minimum of each (defaults 2 and 30);
//           localConcurrency: handlers per host (each a worker fetching on its own);
//   max: max(10, handlers + 2)   pool size, so handlers never wait for a connection (default 10).
// Everything else at its default (queue policy standard, supervise and schedule on).
import { PgBoss } from 'pg-boss';
import { main } from './common.mjs';

const QUEUE = 'bench';
// Jobs per fetch. No value is documented as best; with a trivial handler larger is faster, and
// 100 keeps (like graphile-worker's local queue of 500) a bounded number of jobs locked per host.
const BATCH_SIZE = Number(process.env.PGBOSS_BATCH_SIZE ?? 100);

// Each kind of warning once per process: they say something about the run, not about each job.
const warned = new Set();
function watch(boss) {
  boss.on('error', (e) => console.error('pg-boss error:', e));
  boss.on('warning', (w) => {
    const kind = w?.type ?? w?.message ?? String(w);
    if (!warned.has(kind)) {
      warned.add(kind);
      console.error('pg-boss warning:', w?.message ?? w);
    }
  });
}

const pgboss = {
  name: 'pg-boss',

  async open(url) {
    // A connection for each of the admission bench's 16 callers.
    const boss = new PgBoss({ connectionString: url, max: 20 });
    watch(boss);
    await boss.start();
    await boss.createQueue(QUEUE, { notify: true });
    return boss;
  },

  async reset(boss) {
    // As runs.rs does for ours: an empty job table and a fresh checkpoint before each case.
    await boss.getDb().executeSql('TRUNCATE pgboss.job; CHECKPOINT');
  },

  async fill(boss, n) {
    for (let i = 0; i < n; i += 1000) {
      await boss.insert(QUEUE, Array.from({ length: Math.min(1000, n - i) }, () => ({ data: {} })));
    }
  },

  async add(boss) {
    return boss.send(QUEUE, {});
  },

  // insert (one statement for the batch); its singletonKey deduplicates only under the
  // singleton and stately queue policies, not the standard one measured here: no keys.
  batchKeys: 'insert, no keys',
  async addBatch(boss, keys) {
    await boss.insert(QUEUE, keys.map(() => ({ data: {} })));
  },

  async remaining(boss) {
    const { rows } = await boss
      .getDb()
      .executeSql("SELECT count(*)::int AS n FROM pgboss.job WHERE name = $1 AND state <> 'completed'", [QUEUE]);
    return rows[0].n;
  },

  async close(boss) {
    await boss.stop({ graceful: false });
  },

  async host(url, perHost, started) {
    const boss = new PgBoss({ connectionString: url, useListenNotify: true, max: Math.max(10, perHost + 2) });
    watch(boss);
    await boss.start();
    await boss.work(
      QUEUE,
      {
        localConcurrency: perHost,
        batchSize: BATCH_SIZE,
        burstWhenBatchFull: true,
        pollingIntervalSeconds: 0.5,
        notifyPollingIntervalSeconds: 0.5,
      },
      async (jobs) => {
        for (const job of jobs) started(job.id);
      },
    );
    return () => boss.stop({ graceful: true, timeout: 5000 });
  },
};

await main(pgboss, import.meta.url);
