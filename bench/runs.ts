/**
 * Durable runs in the shapes peers publish, and queued runs on workers
 * (issue 27, items 2 and 3):
 *
 * - {@link runShapesScenario}: whole runs through `runDurable` + `step` on
 *   one journal, start to result, in the shapes of Vercel Workflow's
 *   published benchmark (an empty run, 10 sequential steps, `Promise.all` of
 *   10 and of 25 steps), each run beside, in lockstep, the raw floor of the
 *   same number of record writes to the same store;
 * - {@link workerScenario}: queued runs of 3 steps through `DurableQueue`,
 *   executed by 1 and by 2 `DurableWorker` child processes, beside raw BullMQ
 *   jobs doing the same three record writes in the same kind of process.
 *
 * @module
 */
import { type ChildProcess, spawn } from "node:child_process";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import type { Message } from "../src/core/messages.js";
import { type BenchContext, deleteRedisPrefix, pgSchema, redisPrefix } from "./registry.js";
import { type DurableResult, floorTable, median, openJournal, quantile, stepRecord } from "./scenarios.js";

/**
 * Vercel Workflow's published figures for its local world (cited, not
 * re-measured here), as that page showed them when read in December 2026:
 * the page shows the latest of its CI runs, so today's figures may differ.
 */
export const VERCEL_WORKFLOW_LOCAL = {
  source: "https://useworkflow.dev/worlds/local",
  ms: { empty: 42, "sequential-10": 10_820, "parallel-10": 1_390, "parallel-25": 2_500 } as Record<string, number>,
};

/** A run shape: how many steps and whether they run one after another or in one `Promise.all`. */
export interface RunShape {
  id: "empty" | "sequential-10" | "parallel-10" | "parallel-25";
  label: string;
  steps: number;
  parallel: boolean;
}

/** The shapes of Vercel Workflow's published benchmark. */
export const RUN_SHAPES: RunShape[] = [
  { id: "empty", label: "empty run", steps: 0, parallel: false },
  { id: "sequential-10", label: "10 sequential steps", steps: 10, parallel: false },
  { id: "parallel-10", label: "Promise.all of 10 steps", steps: 10, parallel: true },
  { id: "parallel-25", label: "Promise.all of 25 steps", steps: 25, parallel: true },
];

/**
 * Raw record writes of the floor of a run of `shape`: one per step (its completed record) and one for
 * the run (its result).
 */
export const floorWrites = (shape: Pick<RunShape, "steps">): number => shape.steps + 1;

/** One journal's runs of one shape against the floor. */
export interface RunShapeResult {
  journal: DurableResult["journal"];
  shape: RunShape["id"];
  label: string;
  steps: number;
  /** Measured runs (after a few unmeasured warm-up runs). */
  runs: number;
  /** ms from calling `runDurable` on a new run id to its completed result. */
  p50Ms: number;
  p99Ms: number;
  /** ms of the floor: {@link floorWrites} raw writes of a step record, sequential or in one `Promise.all` as the shape. */
  floorP50Ms: number;
  floorP99Ms: number;
  /** What a floor write is. */
  floorWrite: string;
}

/** Raw writes of a record to a journal's store, each under a new key. */
interface RecordWriter {
  write: string;
  put(): Promise<void> | void;
  close(): Promise<void> | void;
}

/** Opens raw record writes to the journal's store (its own connection; the journal has created its tables). */
async function recordWriter(kind: DurableResult["journal"], ctx: BenchContext, record: string): Promise<RecordWriter> {
  let n = 0;
  if (kind === "sqlite") {
    const { db, insert } = floorTable(ctx, "bench_run_floor");
    return {
      write: "SQLite INSERT, WAL, synchronous=FULL (as the journal)",
      put: () => void insert.run(n++, record),
      close: () => void db.close(),
    };
  }
  if (kind === "postgres") {
    const pg = await import("pg");
    // A pool of the journal's default size, so the parallel shapes' writes run concurrently.
    const pool = new pg.default.Pool({ connectionString: ctx.databaseUrl, max: 10 });
    const schema = pgSchema(ctx);
    await pool.query(`CREATE TABLE "${schema}".bench_run_floor (seq integer PRIMARY KEY, body text NOT NULL)`);
    return {
      write: "PostgreSQL INSERT (autocommit; a pool of 10 connections)",
      async put() {
        await pool.query(`INSERT INTO "${schema}".bench_run_floor (seq, body) VALUES ($1, $2)`, [n++, record]);
      },
      close: () => pool.end(),
    };
  }
  const { Redis } = await import("ioredis");
  const redis = new Redis(ctx.redisUrl, { maxRetriesPerRequest: 1 });
  const key = `${redisPrefix(ctx)}run-floor`;
  return {
    write: "Redis HSET",
    async put() {
      await redis.hset(key, String(n++), record);
    },
    close: async () => void (await redis.quit()),
  };
}

/**
 * Runs every shape `runs` times (after `warmup` unmeasured runs) on a journal of `kind`, each run on a
 * new run id through `runDurable` (steps through `step`, each returning a real message as an `llm`
 * step does), timed from the call to the completed result; after each run, in lockstep, the floor:
 * {@link floorWrites} raw writes of a step record to the same store, one after another for the empty
 * and sequential shapes, the steps' writes in one `Promise.all` then the run's for the parallel ones.
 */
export async function runShapesScenario(
  kind: DurableResult["journal"],
  ctx: BenchContext,
  pool: Message[],
  opts: { runs: number; warmup?: number; shapes?: RunShape[] },
): Promise<RunShapeResult[]> {
  const d = await import("../src/durable/index.js");
  const { journal, cleanup } = await openJournal(kind, ctx);
  let writer: RecordWriter | undefined;
  try {
    // The journal creates its tables on first use: open the floor (which writes beside them) after a first call.
    await journal.readSteps(`bench-shape-${ctx.id}`);
    writer = await recordWriter(kind, ctx, stepRecord(`bench-shape-${ctx.id}`, pool[0]));
    const out: RunShapeResult[] = [];
    let runNo = 0;
    for (const shape of opts.shapes ?? RUN_SHAPES) {
      const body = (i: number) => () => pool[i % pool.length] as never;
      const wf = async () => {
        if (shape.parallel) {
          await Promise.all(Array.from({ length: shape.steps }, (_, i) => d.step(`llm-${i}`, body(i))));
        } else {
          for (let i = 0; i < shape.steps; i++) await d.step(`llm-${i}`, body(i));
        }
        return shape.steps;
      };
      const runTimes: number[] = [];
      const floorTimes: number[] = [];
      const w = writer;
      const floor = async () => {
        if (shape.parallel) await Promise.all(Array.from({ length: shape.steps }, () => w.put()));
        else for (let i = 0; i < shape.steps; i++) await w.put();
        await w.put(); // the run's record
      };
      const warmup = opts.warmup ?? 3;
      for (let r = 0; r < warmup + opts.runs; r++) {
        const runId = `bench-shape-${ctx.id}-${shape.id}-${runNo++}`;
        const t0 = performance.now();
        const result = await d.runDurable(runId, wf, { journal, input: {}, workflow: "bench-shape" });
        const t1 = performance.now();
        if (result.status !== "completed") throw new Error(`run shape ${shape.id} on ${kind}: ended ${result.status}`);
        await floor();
        const t2 = performance.now();
        if (r >= warmup) {
          runTimes.push(t1 - t0);
          floorTimes.push(t2 - t1);
        }
      }
      out.push({
        journal: kind,
        shape: shape.id,
        label: shape.label,
        steps: shape.steps,
        runs: opts.runs,
        p50Ms: median(runTimes),
        p99Ms: quantile(runTimes, 0.99),
        floorP50Ms: median(floorTimes),
        floorP99Ms: quantile(floorTimes, 0.99),
        floorWrite: writer.write,
      });
    }
    return out;
  } finally {
    await writer?.close();
    await journal.close();
    await cleanup();
  }
}

// ---------------------------------------------------------------------------------------------
// Workers

/** Queued runs on worker processes: ours (`DurableQueue` + `DurableWorker`) or raw BullMQ jobs. */
export interface WorkerResult {
  /** The journal the runs are recorded in (the raw jobs write to the same kind of store). */
  journal: "redis" | "postgres";
  /** `durable`: runs through `DurableQueue`/`DurableWorker`; `raw`: BullMQ jobs doing the same record writes. */
  mode: "durable" | "raw";
  /** Worker processes (each takes one job at a time). */
  workers: number;
  runs: number;
  /** Record writes of each run's steps (the raw job writes as many). */
  steps: number;
  /** Runs completed per second, from the first enqueue to the last result. */
  runsPerSecond: number;
  /** ms the producer took to enqueue every run (it runs beside the workers: when close to the whole, it was the limit). */
  enqueueMs: number;
  /** ms from a run's enqueue call to its result reported by the worker (all runs are enqueued at once). */
  p50Ms: number;
  p99Ms: number;
}

const workerChild = fileURLToPath(new URL("./worker-child.ts", import.meta.url));
const now = () => performance.timeOrigin + performance.now();

/**
 * Starts `workers` worker processes (`node --import tsx bench/worker-child.ts`), enqueues `runs` runs
 * of `steps` steps (in batches of 50 concurrent enqueues, so the queue holds a backlog and the workers
 * never wait for the producer), and collects each run's result time as its worker reports it (one
 * stdout line per run, the same machine's clock). Ours: `DurableQueue.enqueue` on the journal, workers
 * are `DurableWorker`s; raw: BullMQ `Queue.add`, workers are BullMQ `Worker`s writing the same number
 * of step records to the same store.
 */
export async function workerScenario(
  mode: WorkerResult["mode"],
  kind: WorkerResult["journal"],
  ctx: BenchContext,
  opts: { workers: number; runs: number; steps: number },
): Promise<WorkerResult> {
  const queueName = `bench-q-${ctx.id}`;
  const bullPrefix = `${redisPrefix(ctx)}bull`;
  const env: Record<string, string> = {
    BENCH_MODE: mode,
    BENCH_KIND: kind,
    BENCH_STEPS: String(opts.steps),
    BENCH_QUEUE: queueName,
    BENCH_BULL_PREFIX: bullPrefix,
    BENCH_JOURNAL_PREFIX: redisPrefix(ctx),
    BENCH_PG_SCHEMA: pgSchema(ctx),
    REDIS_URL: ctx.redisUrl,
    DATABASE_URL: ctx.databaseUrl,
  };
  const { journal, cleanup } = await openJournal(kind, ctx);
  const children: ChildProcess[] = [];
  const finished = new Map<string, number>();
  let wake: (() => void) | undefined;
  // biome-ignore lint/suspicious/noExplicitAny: a DurableQueue or a BullMQ Queue
  let queue: any;
  let rawConnection: { quit(): Promise<unknown> } | undefined;
  try {
    await journal.readSteps("bench-init"); // creates the journal's tables (and the PostgreSQL schema)
    if (kind === "postgres") {
      const pg = await import("pg");
      const client = new pg.default.Client({ connectionString: ctx.databaseUrl });
      await client.connect();
      await client.query(
        `CREATE TABLE "${pgSchema(ctx)}".bench_raw (run_id text NOT NULL, seq integer NOT NULL, body text NOT NULL, PRIMARY KEY (run_id, seq))`,
      );
      await client.end();
    }
    const failures: string[] = [];
    for (let w = 0; w < opts.workers; w++) {
      const child = spawn(process.execPath, ["--import", "tsx", workerChild], {
        env: { ...process.env, ...env, BENCH_OWNER: `bench-w${w}` },
        stdio: ["ignore", "pipe", "pipe"],
      });
      children.push(child);
      let rest = "";
      child.stdout?.on("data", (chunk: Buffer) => {
        const lines = (rest + chunk.toString()).split("\n");
        rest = lines.pop() ?? "";
        for (const line of lines) {
          const [tag, id, t] = line.split(" ");
          if (tag === "done" && id) finished.set(id, Number(t));
        }
        wake?.();
      });
      let err = "";
      child.stderr?.on("data", (chunk: Buffer) => {
        err += chunk.toString();
      });
      child.on("exit", (code) => {
        if (code !== 0 && code !== null) failures.push(`worker ${w} exited ${code}: ${err.slice(-2000)}`);
        wake?.();
      });
    }
    // Each child prints `ready` once its worker takes jobs.
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve, reject) => {
            const onData = (chunk: Buffer) => {
              if (chunk.toString().includes("ready")) {
                child.stdout?.off("data", onData);
                resolve();
              }
            };
            child.stdout?.on("data", onData);
            child.once("exit", (code) => reject(new Error(`a bench worker exited ${code} before it was ready`)));
          }),
      ),
    );
    const enqueue = new Map<string, number>();
    if (mode === "durable") {
      const d = await import("../src/durable/index.js");
      queue = new d.DurableQueue({ journal, queueName, url: ctx.redisUrl, keyPrefix: bullPrefix });
    } else {
      const { Queue } = await import("bullmq");
      const { Redis } = await import("ioredis");
      const connection = new Redis(ctx.redisUrl, { maxRetriesPerRequest: null });
      rawConnection = connection;
      queue = new Queue(queueName, { connection, prefix: bullPrefix });
    }
    const ids = Array.from({ length: opts.runs }, (_, i) => `bench-job-${ctx.id}-${i}`);
    const t0 = now();
    for (let i = 0; i < ids.length; i += 50) {
      await Promise.all(
        ids.slice(i, i + 50).map(async (runId) => {
          enqueue.set(runId, now());
          if (mode === "durable") await queue.enqueue({ runId, workflow: "bench-steps", input: { runId } });
          else await queue.add("run", { runId }, { jobId: runId, removeOnComplete: { count: 1000 } });
        }),
      );
    }
    const enqueued = now();
    const deadline = Date.now() + 10 * 60_000;
    while (finished.size < ids.length) {
      if (failures.length > 0) throw new Error(failures.join("\n"));
      if (Date.now() > deadline) throw new Error(`workers: ${finished.size} of ${ids.length} runs done in 10 min`);
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, 200);
      });
    }
    const last = Math.max(...finished.values());
    const latencies = ids.map((id) => finished.get(id)! - enqueue.get(id)!);
    if (mode === "durable") {
      const run = await journal.getRun(ids[0]!);
      if (run?.status !== "completed") throw new Error(`workers: run ${ids[0]} is ${run?.status}`);
    }
    return {
      journal: kind,
      mode,
      workers: opts.workers,
      runs: opts.runs,
      steps: opts.steps,
      runsPerSecond: opts.runs / ((last - t0) / 1000),
      enqueueMs: enqueued - t0,
      p50Ms: median(latencies),
      p99Ms: quantile(latencies, 0.99),
    };
  } finally {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    await Promise.all(
      children.map((c) =>
        c.exitCode !== null || c.signalCode !== null ? undefined : new Promise((r) => c.once("exit", r)),
      ),
    );
    if (queue) {
      await queue.obliterate({ force: true }).catch(() => undefined);
      await queue.close();
    }
    await rawConnection?.quit();
    await journal.close();
    await cleanup();
    if (kind !== "redis") await deleteRedisPrefix(ctx); // the queue's keys (under the case's prefix)
  }
}
