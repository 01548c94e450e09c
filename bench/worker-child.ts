/**
 * A worker process of the bench's worker scenario (`runs.ts`, `workerScenario`). Prints `ready` once
 * it takes jobs, then `done <runId> <ms>` (the machine's clock, sub-millisecond) as each run ends.
 *
 * - `BENCH_MODE=durable`: a `DurableWorker` (the public API) executing workflow `bench-steps`:
 *   `BENCH_STEPS` sequential steps, each returning a small record, on the journal of `BENCH_KIND`
 *   (`redis`: a `RedisJournal` under `BENCH_JOURNAL_PREFIX`; `postgres`: a `PostgresJournal` in
 *   schema `BENCH_PG_SCHEMA`);
 * - `BENCH_MODE=raw`: a plain BullMQ `Worker` whose job writes `BENCH_STEPS` step records to the same
 *   kind of store (Redis HSET; PostgreSQL INSERT into `bench_raw`), one after another.
 *
 * Env also: `REDIS_URL`, `DATABASE_URL`, `BENCH_QUEUE`, `BENCH_BULL_PREFIX`, `BENCH_OWNER`.
 *
 * @module
 */
import { performance } from "node:perf_hooks";
import { Worker } from "bullmq";
import { Redis } from "ioredis";
import { DurableWorker, type Journal, PostgresJournal, RedisJournal, step } from "../src/durable/index.js";
import { stepRecord } from "./scenarios.js";

const env = (name: string) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`bench worker: ${name} is not set`);
  return v;
};
const mode = env("BENCH_MODE");
const kind = env("BENCH_KIND");
const steps = Number(env("BENCH_STEPS"));
const queueName = env("BENCH_QUEUE");
const bullPrefix = env("BENCH_BULL_PREFIX");
const redisUrl = env("REDIS_URL");
const databaseUrl = env("DATABASE_URL");
const now = () => (performance.timeOrigin + performance.now()).toFixed(3);
const done = (runId: string) => process.stdout.write(`done ${runId} ${now()}\n`);
/** What each step returns and each raw write stores: a small record, the same on both sides. */
const output = { role: "assistant", content: "The order ships tomorrow; its number is 4417." };

let close: () => Promise<void>;
if (mode === "durable") {
  const journal: Journal =
    kind === "postgres"
      ? new PostgresJournal({ url: databaseUrl, schema: env("BENCH_PG_SCHEMA") })
      : new RedisJournal({ url: redisUrl, keyPrefix: env("BENCH_JOURNAL_PREFIX") });
  const worker = new DurableWorker({
    journal,
    url: redisUrl,
    queueName,
    keyPrefix: bullPrefix,
    owner: env("BENCH_OWNER"),
    workflows: {
      "bench-steps": async () => {
        for (let i = 0; i < steps; i++) await step(`step-${i}`, () => output);
        return steps;
      },
    },
    onResult: (r) => {
      if (r.status === "completed") done(r.runId);
    },
  });
  await worker.start();
  close = async () => {
    await worker.close();
    await journal.close();
  };
} else {
  const connection = new Redis(redisUrl, { maxRetriesPerRequest: null });
  let write: (runId: string, seq: number, body: string) => Promise<unknown>;
  let closeStore: () => Promise<unknown>;
  if (kind === "postgres") {
    const pg = await import("pg");
    const client = new pg.default.Client({ connectionString: databaseUrl });
    await client.connect();
    const table = `"${env("BENCH_PG_SCHEMA")}".bench_raw`;
    write = (runId, seq, body) =>
      client.query(`INSERT INTO ${table} (run_id, seq, body) VALUES ($1, $2, $3)`, [runId, seq, body]);
    closeStore = () => client.end();
  } else {
    const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
    const prefix = env("BENCH_JOURNAL_PREFIX");
    write = (runId, seq, body) => redis.hset(`${prefix}raw:{${runId}}`, String(seq), body);
    closeStore = () => redis.quit();
  }
  const worker = new Worker(
    queueName,
    async (job) => {
      const { runId } = job.data as { runId: string };
      for (let i = 0; i < steps; i++) await write(runId, i, stepRecord(runId, output));
      done(runId);
    },
    { connection, prefix: bullPrefix, concurrency: 1 },
  );
  await worker.waitUntilReady();
  close = async () => {
    await worker.close();
    await closeStore();
    connection.disconnect();
  };
}
process.stdout.write("ready\n");
process.on("SIGTERM", () => {
  void close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
});
