// graphile-worker (the version pinned in package.json) measured as client/benches/runs.rs measures
// our runtime; see common.mjs for the shape, scripts/bench/runs_peers.sh for how it is run.
//
// Its fastest documented configuration, not its defaults: the one its own docs report their top
// numbers with (website docs, "Performance": the quick-stats and "With batching" perfTest preset),
//   localQueue: { size: 500 }   each host locks and pulls down up to 500 jobs per fetch and hands
//                               them to its handlers without a round trip per job (off by default);
//   completeJobBatchDelay: 0,   completions (and failures) are released in batches, one round
//   failJobBatchDelay: 0        trip for all that finished in the same tick (off by default; 0 is
//                               the perfTest value, lower latency than the suggested 250 ms);
//   maxPoolSize: max(10, concurrentJobs + 2), as the option's own doc advises;
// LISTEN/NOTIFY on (always, in graphile-worker: new jobs wake idle hosts), pollInterval at its
// default (with LISTEN it is only a backstop for future-dated jobs). The logger keeps warnings and
// errors only: by default it prints a line per job, which would be measured too.
import { Logger, makeWorkerUtils, run } from 'graphile-worker';
import { main } from './common.mjs';

const TASK = 'noop';

const logger = new Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') console.error(`graphile-worker ${level}: ${message}`);
});

const graphile = {
  name: 'graphile-worker',

  async open(url) {
    // A connection for each of the admission bench's 16 callers.
    const utils = await makeWorkerUtils({ connectionString: url, logger, maxPoolSize: 20 });
    await utils.migrate();
    return utils;
  },

  async reset(utils) {
    // As runs.rs does for ours: an empty job table and a fresh checkpoint before each case.
    await utils.withPgClient((c) => c.query('TRUNCATE graphile_worker._private_jobs; CHECKPOINT'));
  },

  async fill(utils, n) {
    await utils.addJobs(Array.from({ length: n }, () => ({ identifier: TASK, payload: {} })));
  },

  async add(utils) {
    return (await utils.addJob(TASK, {})).id;
  },

  // addJobs (one add_jobs call) with a job key each: its idempotency key, as a dispatch key is
  // ours (a repeated key replaces the waiting job, where ours returns the first run).
  batchKeys: 'addJobs, a jobKey each',
  async addBatch(utils, keys) {
    await utils.addJobs(keys.map((jobKey) => ({ identifier: TASK, payload: {}, jobKey })));
  },

  // A completed job is deleted, so what is left in the table is what has not completed.
  async remaining(utils) {
    const { rows } = await utils.withPgClient((c) => c.query('SELECT count(*)::int AS n FROM graphile_worker.jobs'));
    return rows[0].n;
  },

  async close(utils) {
    await utils.release();
  },

  async host(url, perHost, started) {
    const runner = await run({
      taskList: {
        [TASK]: async (_payload, helpers) => {
          started(helpers.job.id);
        },
      },
      crontab: '',
      noHandleSignals: true,
      logger,
      preset: {
        worker: {
          connectionString: url,
          concurrentJobs: perHost,
          maxPoolSize: Math.max(10, perHost + 2),
          localQueue: { size: 500 },
          completeJobBatchDelay: 0,
          failJobBatchDelay: 0,
        },
      },
    });
    return async () => {
      await runner.stop();
      await runner.promise;
    };
  },
};

await main(graphile, import.meta.url);
