/**
 * The bench's scenarios beyond "save after every message" (see `run.ts`):
 *
 * - {@link promptScenario}: the cost of adding one message to an agent whose
 *   prompt is 50 MB, against the same with a 1 KB prompt (unchanged state
 *   must not be paid for again);
 * - {@link cpuScenario}: CPU time per `saveState` of the file backend on
 *   tmpfs (`/dev/shm`), where a sync costs nothing, minus the CPU time of
 *   encoding the new bytes;
 * - {@link durableScenario}: a journaled durable step against the journal
 *   store's raw write floor, and the replay of a 1,000-step run against a raw
 *   read of its step rows;
 * - {@link checkpointScenario}: one workflow checkpoint of a 100 KB state
 *   (SQLite cold store + Redis hot tier) against a raw SQLite insert plus a
 *   Redis SET of the same bytes.
 *
 * Everything is driven through the public API (`saveState`, `runDurable` +
 * `step`, `CheckpointStore.save`); the floors use the drivers directly.
 *
 * @module
 */
import { spawnSync } from "node:child_process";
import {
  closeSync,
  fdatasyncSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  writeSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import Database from "better-sqlite3";
import type { StateBackend } from "../src/backends/types.js";
import type { Message } from "../src/core/messages.js";
import type { Journal } from "../src/durable/index.js";
import { type BackendSpec, type BenchContext, deleteRedisPrefix, pgSchema, redisPrefix } from "./registry.js";
import { dropPostgresSchema, newBenchAgent } from "./stores.js";

/** Sorted-copy quantile (nearest rank). */
export function quantile(xs: number[], q: number): number {
  if (xs.length === 0) return Number.NaN;
  const sorted = [...xs].sort((a, b) => a - b);
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}
export const median = (xs: number[]) => quantile(xs, 0.5);

let caseCounter = 0;
/** A fresh case: a temp directory (under `root`, default the OS temp dir) and a unique id. */
export function newContext(redisUrl: string, databaseUrl: string, root = os.tmpdir()): BenchContext {
  const dir = mkdtempSync(path.join(root, "dumplings-bench-"));
  return { dir, id: `${process.pid}_${Date.now().toString(36)}_x${caseCounter++}`, redisUrl, databaseUrl };
}

// ---------------------------------------------------------------------------------------------
// 50 MB prompt

/** One store's save cost with a small and a huge prompt. */
export interface PromptResult {
  store: string;
  family: BackendSpec["family"];
  /** Saves measured per prompt size. */
  saves: number;
  /** History length before the measured saves. */
  history: number;
  /** Prompt sizes in bytes. */
  smallBytes: number;
  largeBytes: number;
  /** p50 µs of one `saveState` adding one message. */
  smallP50: number;
  largeP50: number;
}

/**
 * Two agents, one with a `smallBytes` prompt and one with a `largeBytes`
 * prompt, each on a fresh store that already holds it with `historyLength`
 * messages (that first save, which writes the prompt, is not measured); then
 * `saves` times: add one message to each and save each, in lockstep (so a
 * burst of load on the machine hits both alike).
 */
export async function promptScenario(
  spec: BackendSpec,
  ctxOf: () => BenchContext,
  pool: Message[],
  opts: { saves: number; historyLength: number; smallBytes: number; largeBytes: number },
): Promise<PromptResult> {
  const sides = [opts.smallBytes, opts.largeBytes].map((bytes) => ({
    bytes,
    ctx: ctxOf(),
    backend: undefined as StateBackend | undefined,
    times: [] as number[],
  }));
  try {
    const agents = [];
    for (const side of sides) {
      side.backend = await spec.make(side.ctx);
      const agent = newBenchAgent(promptText(side.bytes));
      for (let i = 0; i < opts.historyLength; i++) agent.history.push(pool[i % pool.length]!);
      await agent.saveState("bench-prompt", { backend: side.backend });
      agents.push(agent);
    }
    for (let i = 0; i < opts.saves; i++) {
      for (const [k, agent] of agents.entries()) {
        agent.history.push(pool[(opts.historyLength + i) % pool.length]!);
        const t0 = performance.now();
        await agent.saveState("bench-prompt");
        sides[k]!.times.push((performance.now() - t0) * 1000);
      }
    }
  } finally {
    for (const side of sides) {
      await side.backend?.close?.();
      await spec.cleanup?.(side.ctx);
      rmSync(side.ctx.dir, { recursive: true, force: true });
    }
  }
  return {
    store: `saveState: ${spec.label}`,
    family: spec.family,
    saves: opts.saves,
    history: opts.historyLength,
    smallBytes: opts.smallBytes,
    largeBytes: opts.largeBytes,
    smallP50: median(sides[0]!.times),
    largeP50: median(sides[1]!.times),
  };
}

/** A system prompt of exactly `bytes` bytes of ordinary prose (no credential-like tokens). */
export function promptText(bytes: number): string {
  const sentence = "You are a careful support agent. Answer briefly, cite the order number, and never guess. ";
  return sentence.repeat(Math.ceil(bytes / sentence.length)).slice(0, bytes);
}

// ---------------------------------------------------------------------------------------------
// CPU per save on tmpfs

/** CPU per save on tmpfs. */
export interface CpuResult {
  store: string;
  /** Directory the files lived in (tmpfs when `tmpfs`). */
  dir: string;
  tmpfs: boolean;
  /** Saves whose CPU time was summed (after the warm-up). */
  saves: number;
  /** Final history length. */
  n: number;
  /** µs of process CPU (user + system, every thread) per save. */
  cpuPerSave: number;
  /** µs of CPU to encode one new message's bytes (`JSON.stringify` + UTF-8 `Buffer`), averaged. */
  encodePerSave: number;
  /** µs of wall time per save (p50). */
  wallP50: number;
}

/** True when `dir` is on a tmpfs (per /proc/mounts). */
export function isTmpfs(dir: string): boolean {
  try {
    const mounts = readFileSync("/proc/mounts", "utf8")
      .split("\n")
      .map((l) => l.split(" "))
      .filter((f) => f.length > 2 && (dir === f[1] || dir.startsWith(`${f[1]}/`) || f[1] === "/"))
      .sort((a, b) => b[1]!.length - a[1]!.length);
    return mounts[0]?.[2] === "tmpfs";
  } catch {
    return false;
  }
}

const cpuNow = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

/**
 * Process CPU (user + system, all threads: `process.cpuUsage()`) of `n`
 * saves after `warmup` unmeasured ones, per save; and the CPU of encoding
 * each new message alone (its JSON line as UTF-8 bytes), per save.
 *
 * @param save - makes message `i` durable (history has `i + 1` messages)
 */
export async function cpuPerSave(
  label: string,
  dir: string,
  messages: Message[],
  warmup: number,
  save: (history: Message[]) => Promise<void> | void,
): Promise<CpuResult> {
  const history: Message[] = [];
  const wall: number[] = [];
  let cpu = 0;
  for (let i = 0; i < messages.length; i++) {
    history.push(messages[i]!);
    const c0 = cpuNow();
    const t0 = performance.now();
    await save(history);
    const t1 = performance.now();
    if (i >= warmup) {
      cpu += cpuNow() - c0;
      wall.push((t1 - t0) * 1000);
    }
  }
  // Encoding the new bytes: what any durable append must spend per message. Repeated for resolution.
  const reps = 5;
  let sink = 0;
  const c0 = cpuNow();
  for (let r = 0; r < reps; r++) {
    for (let i = warmup; i < messages.length; i++) sink += Buffer.from(`${JSON.stringify(messages[i])}\n`).length;
  }
  const encode = (cpuNow() - c0) / (reps * (messages.length - warmup));
  if (sink < 0) throw new Error("unreachable");
  return {
    store: label,
    dir,
    tmpfs: isTmpfs(dir),
    saves: messages.length - warmup,
    n: messages.length,
    cpuPerSave: cpu / (messages.length - warmup),
    encodePerSave: encode,
    wallP50: median(wall),
  };
}

/** The JSONL floor (append + fdatasync) driven for {@link cpuPerSave}. */
export function jsonlAppender(dir: string): { save(h: Message[]): void; close(): void } {
  const fd = openSync(path.join(dir, "floor.jsonl"), "a");
  return {
    save(h) {
      writeSync(fd, `${JSON.stringify(h[h.length - 1])}\n`);
      fdatasyncSync(fd);
    },
    close: () => closeSync(fd),
  };
}

/** The directory the tmpfs scenario uses: `/dev/shm` when it is a tmpfs, else the OS temp dir. */
export function tmpfsRoot(): string {
  try {
    if (statSync("/dev/shm").isDirectory() && isTmpfs("/dev/shm")) return "/dev/shm";
  } catch {
    // no /dev/shm
  }
  return os.tmpdir();
}

// ---------------------------------------------------------------------------------------------
// Durable steps

/** A journal's step cost and replay time against its store's floors. */
export interface DurableResult {
  journal: "sqlite" | "postgres" | "redis";
  steps: number;
  /** p50 µs of one `await step(...)` that runs and is journaled (a `started` and a `completed` record). */
  stepP50: number;
  /** p50 µs of one raw write of the same completed record's bytes to the same store. */
  floorWriteP50: number;
  /** What the floor write is. */
  floorWrite: string;
  /** ms of `runDurable` replaying the recorded steps up to the run's wait (median of the repeats). */
  replayMs: number;
  /** ms of a raw read of the run's step rows with their outputs parsed (median of the repeats). */
  rawReadMs: number;
  /** What the raw read is. */
  rawRead: string;
  repeats: number;
}

/** The record a floor writes: what a journal stores for a completed step returning `output`. */
export function stepRecord(runId: string, output: unknown): string {
  return JSON.stringify({
    runId,
    seq: 0,
    name: "llm",
    inputHash: "0".repeat(64),
    status: "completed",
    attempt: 1,
    startedAt: Date.now(),
    finishedAt: Date.now(),
    fencingToken: 1,
    output,
  });
}

/** The raw floors of a journal's store: one write of a step record, and a read of a run's step rows. */
interface DurableFloor {
  write: string;
  read: string;
  /** Writes row `i` (the record's bytes). */
  put(i: number): Promise<void> | void;
  /** Reads the run's step rows and parses their outputs; returns how many rows. */
  readRun(): Promise<number> | number;
  close(): Promise<void> | void;
}

/**
 * Records a run of `steps` steps (each returns a real message, as an `llm`
 * step does) that then waits for a signal, timing each step; after each step,
 * in lockstep, one raw write of a step record to the same store (the floor).
 * Then, `repeats` times in turn, `runDurable` on the waiting run (it replays
 * every step from the journal and stops at the wait again) and a raw read of
 * the run's step rows.
 */
export async function durableScenario(
  kind: DurableResult["journal"],
  ctx: BenchContext,
  pool: Message[],
  opts: { steps: number; repeats: number },
): Promise<DurableResult> {
  const d = await import("../src/durable/index.js");
  const runId = `bench-run-${ctx.id}`;
  const { journal, cleanup } = await openJournal(kind, ctx);
  let floor: DurableFloor | undefined;
  try {
    // The floor's record: what the journal stores for a completed step returning pool[0].
    const record = stepRecord(runId, pool[0]);
    // The journal creates its tables on first use: open the floor (which reads them) after a first call.
    await journal.readSteps(runId);
    floor = await durableFloor(kind, ctx, runId, record);
    let recording = true;
    const stepTimes: number[] = [];
    const writeTimes: number[] = [];
    const wf = async () => {
      for (let i = 0; i < opts.steps; i++) {
        const t0 = performance.now();
        await d.step("llm", () => pool[i % pool.length] as never);
        if (recording) {
          const t1 = performance.now();
          await floor!.put(i);
          writeTimes.push((performance.now() - t1) * 1000);
          stepTimes.push((t1 - t0) * 1000);
        }
      }
      await d.waitForSignal("done");
      return null;
    };
    const first = await d.runDurable(runId, wf, { journal, input: {}, workflow: "bench" });
    if (first.status !== "waiting") throw new Error(`durable ${kind}: the recorded run ended ${first.status}`);
    recording = false;
    const replays: number[] = [];
    const reads: number[] = [];
    for (let r = 0; r < opts.repeats; r++) {
      const t0 = performance.now();
      const again = await d.runDurable(runId, wf, { journal });
      replays.push(performance.now() - t0);
      if (again.status !== "waiting") throw new Error(`durable ${kind}: the replay ended ${again.status}`);
      const t1 = performance.now();
      const rows = await floor.readRun();
      reads.push(performance.now() - t1);
      if (rows < opts.steps) throw new Error(`durable ${kind}: the raw read found ${rows} step rows`);
    }
    return {
      journal: kind,
      steps: opts.steps,
      stepP50: median(stepTimes),
      floorWriteP50: median(writeTimes),
      floorWrite: floor.write,
      replayMs: median(replays),
      rawReadMs: median(reads),
      rawRead: floor.read,
      repeats: opts.repeats,
    };
  } finally {
    await floor?.close();
    await journal.close();
    await cleanup();
  }
}

/**
 * Opens the journal of `kind` on the case's store, as users construct it: an
 * SQLite file `journal.db` in the case's directory (WAL, `synchronous=FULL`),
 * the case's PostgreSQL schema, or the case's Redis key prefix.
 *
 * @returns the journal and a cleanup that drops what it stored (after `journal.close()`)
 */
export async function openJournal(
  kind: DurableResult["journal"],
  ctx: BenchContext,
): Promise<{ journal: Journal; cleanup: () => Promise<void> }> {
  const d = await import("../src/durable/index.js");
  if (kind === "sqlite") {
    return { journal: new d.SqliteJournal({ path: path.join(ctx.dir, "journal.db") }), cleanup: async () => {} };
  }
  if (kind === "postgres") {
    return {
      journal: new d.PostgresJournal({ url: ctx.databaseUrl, schema: pgSchema(ctx) }),
      cleanup: () => dropPostgresSchema(ctx.databaseUrl, pgSchema(ctx)),
    };
  }
  return {
    journal: new d.RedisJournal({ url: ctx.redisUrl, keyPrefix: redisPrefix(ctx) }),
    cleanup: () => deleteRedisPrefix(ctx),
  };
}

/**
 * A raw floor's table in the journal's own SQLite file (its own connection; WAL, synchronous = FULL, the
 * journal's default): one autocommit INSERT of `(seq, body)` per record.
 */
export function floorTable(ctx: BenchContext, table: string): { db: Database.Database; insert: Database.Statement } {
  const db = new Database(path.join(ctx.dir, "journal.db"));
  db.pragma("busy_timeout = 10000");
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = FULL");
  db.exec(`CREATE TABLE ${table} (seq INTEGER PRIMARY KEY, body TEXT NOT NULL)`);
  return { db, insert: db.prepare(`INSERT INTO ${table} (seq, body) VALUES (?, ?)`) };
}

/** Opens the raw floors of one journal's store (its own connection to the same file, database or server). */
async function durableFloor(
  kind: DurableResult["journal"],
  ctx: BenchContext,
  runId: string,
  record: string,
): Promise<DurableFloor> {
  if (kind === "sqlite") {
    const { db, insert } = floorTable(ctx, "bench_floor");
    const select = db.prepare("SELECT * FROM durable_steps WHERE run_id = ? ORDER BY seq");
    return {
      write: "SQLite INSERT of the record, WAL, synchronous=FULL (as the journal)",
      read: "SELECT * of the run's step rows + JSON.parse of each output",
      put: (i) => void insert.run(i, record),
      readRun() {
        const rows = select.all(runId) as { output_json: string | null }[];
        for (const row of rows) if (row.output_json !== null) JSON.parse(row.output_json);
        return rows.length;
      },
      close: () => void db.close(),
    };
  }
  if (kind === "postgres") {
    const pg = await import("pg");
    const client = new pg.default.Client({ connectionString: ctx.databaseUrl });
    await client.connect();
    const schema = pgSchema(ctx);
    await client.query(`CREATE TABLE "${schema}".bench_floor (seq integer PRIMARY KEY, body text NOT NULL)`);
    return {
      write: "PostgreSQL INSERT of the record (autocommit)",
      read: "SELECT * of the run's step rows + JSON.parse of each output",
      async put(i) {
        await client.query(`INSERT INTO "${schema}".bench_floor (seq, body) VALUES ($1, $2)`, [i, record]);
      },
      async readRun() {
        const res = await client.query(`SELECT * FROM "${schema}".durable_steps WHERE run_id = $1 ORDER BY seq`, [
          runId,
        ]);
        for (const row of res.rows as { output_json: string | null }[]) {
          if (row.output_json !== null) JSON.parse(row.output_json);
        }
        return res.rows.length;
      },
      close: () => client.end(),
    };
  }
  const { Redis } = await import("ioredis");
  const redis = new Redis(ctx.redisUrl, { maxRetriesPerRequest: 1 });
  const floorKey = `${redisPrefix(ctx)}floor`;
  // The journal's own key of the run's steps hash (`<keyPrefix>{<runId>}:steps`).
  const stepsKey = `${redisPrefix(ctx)}{${runId}}:steps`;
  return {
    write: "Redis HSET of the record",
    read: "HGETALL of the run's steps hash + JSON.parse of each record, sorted by seq",
    async put(i) {
      await redis.hset(floorKey, String(i), record);
    },
    async readRun() {
      const h = await redis.hgetall(stepsKey);
      const records = Object.values(h).map((text) => JSON.parse(text) as { seq: number });
      records.sort((a, b) => a.seq - b.seq);
      return records.length;
    },
    close: async () => void (await redis.quit()),
  };
}

// ---------------------------------------------------------------------------------------------
// Workflow checkpoints

/** One workflow checkpoint against the raw writes of its bytes. */
export interface CheckpointResult {
  checkpoints: number;
  /** Bytes of one snapshot (`state_json`). */
  stateBytes: number;
  /** p50 µs of `CheckpointStore.save` (SQLite cold store, Redis hot tier). */
  saveP50: number;
  /** p50 µs of a raw SQLite INSERT (WAL, synchronous=FULL, as the cold store) plus a Redis SET of the same bytes. */
  floorP50: number;
  /** The two parts of the floor, p50 µs each. */
  floorSqliteP50: number;
  floorRedisP50: number;
}

/**
 * Saves `checkpoints` consecutive checkpoints of one workflow whose
 * `sharedMemory` holds about `stateBytes` of real messages (below the blob
 * threshold, so inline), with compare-and-set on the step, through
 * `CheckpointStore` with a `SqliteColdStore` and a `RedisHotTier`; after each,
 * in lockstep, the floor: a raw SQLite insert + Redis SET of the same bytes.
 */
export async function checkpointScenario(
  ctx: BenchContext,
  pool: Message[],
  opts: { checkpoints: number; stateBytes: number },
): Promise<CheckpointResult> {
  const w = await import("../src/workflow/index.js");
  const messages: Message[] = [];
  let bytes = 0;
  for (let i = 0; bytes < opts.stateBytes; i++) {
    const m = pool[i % pool.length]!;
    messages.push(m);
    bytes += Buffer.byteLength(JSON.stringify(m)) + 1;
  }
  mkdirSync(path.join(ctx.dir, "blobs"), { recursive: true });
  const store = await w.CheckpointStore.open({
    cold: new w.SqliteColdStore({ path: path.join(ctx.dir, "workflows.db") }),
    hot: new w.RedisHotTier({ url: ctx.redisUrl, keyPrefix: redisPrefix(ctx) }),
    blobDir: path.join(ctx.dir, "blobs"),
  });
  // The floor: its own SQLite file (WAL, FULL, as the cold store) and its own Redis connection.
  const db = new Database(path.join(ctx.dir, "floor.db"));
  const { Redis } = await import("ioredis");
  const redis = new Redis(ctx.redisUrl, { maxRetriesPerRequest: 1 });
  const saves: number[] = [];
  const both: number[] = [];
  const sq: number[] = [];
  const rd: number[] = [];
  let stateBytes = 0;
  try {
    db.pragma("journal_mode = WAL");
    db.pragma("synchronous = FULL");
    db.exec(
      "CREATE TABLE s (workflow_id TEXT NOT NULL, step INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (workflow_id, step))",
    );
    const insert = db.prepare("INSERT INTO s (workflow_id, step, body) VALUES (?, ?, ?)");
    const workflowId = `bench-wf-${ctx.id}`;
    let state = w.createWorkflowState({ workflowId, sharedMemory: { messages: messages as never } });
    for (let i = 0; i < opts.checkpoints; i++) {
      state = { ...state, stepIndex: i, currentNode: `node-${i % 3}`, updatedAt: Date.now() };
      const t0 = performance.now();
      await store.save(state, { expectedStep: i === 0 ? null : i - 1 });
      saves.push((performance.now() - t0) * 1000);
      // The same bytes as the stored snapshot (its JSON; the store adds its schema version).
      const json = JSON.stringify({ ...state, schemaVersion: store.schemaVersion });
      stateBytes = Buffer.byteLength(json);
      const t1 = performance.now();
      insert.run(workflowId, i, json);
      const t2 = performance.now();
      await redis.set(`${redisPrefix(ctx)}floor`, json);
      const t3 = performance.now();
      sq.push((t2 - t1) * 1000);
      rd.push((t3 - t2) * 1000);
      both.push((t3 - t1) * 1000);
    }
    if (store.stats.hotErrors > 0) throw new Error("checkpoint: the Redis hot tier failed");
  } finally {
    await store.close();
    db.close();
    await redis.quit();
    await deleteRedisPrefix(ctx);
  }
  return {
    checkpoints: opts.checkpoints,
    stateBytes,
    saveP50: median(saves),
    floorP50: median(both),
    floorSqliteP50: median(sq),
    floorRedisP50: median(rd),
  };
}

/** Start-up time of one `dumplings` command line, beside a bare `node -e 0` run in lockstep. */
export interface StartupResult {
  /** The command line measured, e.g. `dumplings --help`. */
  command: string;
  /** Runs of each (the command and the floor alternate). */
  runs: number;
  /** Wall time from spawn to exit, ms. */
  p50Ms: number;
  minMs: number;
  /** `node -e 0` on the same machine in the same minutes (the floor no CLI can beat), ms. */
  nodeP50Ms: number;
}

/**
 * Measures how long the built CLI takes to answer (spawn to exit) for a few
 * command lines that need no store contents: `--help`, and `ls` on an empty
 * directory. Each run alternates with a `node -e 0` start, so a loaded machine
 * moves both.
 *
 * @param cli - the built CLI (`dist/cli/index.js`)
 * @param options - `runs` of each command line @default 10
 * @returns one result per command line
 */
export function cliStartupScenario(cli: string, options: { runs?: number } = {}): StartupResult[] {
  const runs = options.runs ?? 10;
  const empty = mkdtempSync(path.join(os.tmpdir(), "dumplings-bench-startup-"));
  const time = (args: string[]) => {
    const t0 = performance.now();
    const r = spawnSync(process.execPath, args, { stdio: ["ignore", "ignore", "pipe"], encoding: "utf8" });
    const ms = performance.now() - t0;
    if (r.status !== 0) throw new Error(`${args.join(" ")} exited ${r.status}: ${r.stderr}`);
    return ms;
  };
  try {
    const cases: [string, string[]][] = [
      ["dumplings --help", [cli, "--help"]],
      ["dumplings ls (empty store)", [cli, "ls", "--dir", empty]],
    ];
    return cases.map(([command, args]) => {
      const own: number[] = [];
      const floor: number[] = [];
      time(args); // warm the file cache
      for (let i = 0; i < runs; i++) {
        own.push(time(args));
        floor.push(time(["-e", "0"]));
      }
      return { command, runs, p50Ms: median(own), minMs: Math.min(...own), nodeP50Ms: median(floor) };
    });
  } finally {
    rmSync(empty, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Chat saves from request bodies

/** One more message to a long chat against one more to a short chat, through `createChatStore`. */
export interface ChatSaveResult {
  store: string;
  family: BackendSpec["family"];
  /** `UIMessage` (ids) or `ModelMessage` (no ids) through a chat store; or OpenAI messages through `saveState`. */
  shape: "UIMessage" | "ModelMessage" | "saveState";
  saves: number;
  short: number;
  long: number;
  /** µs, p50 of a one-message save of a freshly parsed array of `short` / `long` messages. */
  shortP50: number;
  longP50: number;
}

/** A chat message of the given shape, about 300 bytes of text from the data set. */
function chatMessage(shape: ChatSaveResult["shape"], i: number, pool: Message[]): unknown {
  const m = pool[i % pool.length] as { content?: unknown };
  const text = `${i}: ${typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? "")}`.slice(0, 300);
  const role = i % 2 === 0 ? "user" : "assistant";
  if (shape === "saveState") return { role, content: text };
  return shape === "UIMessage"
    ? { id: `msg-${i}`, role, parts: [{ type: "text", text }] }
    : { role, content: [{ type: "text", text }] };
}

/**
 * Chat saves as a `useChat` route makes them: each request body is parsed afresh (`JSON.parse`: new
 * objects every time, nothing shared with what the store saw), one message longer than the last.
 * Two chats on fresh stores of `spec`, `short` and `long` messages long (that first save is not
 * measured); then `saves` times, in lockstep: add one message to each, parse a fresh copy (not
 * measured) and time `chats.save(id, parsed)`. Shape `saveState`: an agent whose history is replaced
 * by the parsed copy (`history.splice(0, history.length, ...parsed)`, not measured), then `saveState`.
 */
export async function chatSaveScenario(
  spec: BackendSpec,
  ctxOf: () => BenchContext,
  pool: Message[],
  opts: { shape: ChatSaveResult["shape"]; saves: number; short: number; long: number },
): Promise<ChatSaveResult> {
  const { createChatStore } = await import("../src/ai-sdk/chat-store.js");
  type ChatMessage = import("../src/ai-sdk/chat-store.js").ChatMessage;
  const sides = [opts.short, opts.long].map((length) => ({
    length,
    ctx: ctxOf(),
    backend: undefined as StateBackend | undefined,
    times: [] as number[],
    text: "",
  }));
  try {
    const saves: ((body: unknown[]) => Promise<number>)[] = [];
    for (const side of sides) {
      const backend = await spec.make(side.ctx);
      side.backend = backend;
      const messages = Array.from({ length: side.length }, (_, i) => chatMessage(opts.shape, i, pool));
      side.text = JSON.stringify(messages);
      if (opts.shape === "saveState") {
        const agent = newBenchAgent(promptText(1024));
        agent.history.push(...(JSON.parse(side.text) as Message[]));
        await agent.saveState("bench-chat", { backend });
        saves.push(async (body) => {
          agent.history.splice(0, agent.history.length, ...(body as Message[]));
          const t0 = performance.now();
          const r = await agent.saveState("bench-chat");
          const us = (performance.now() - t0) * 1000;
          if (r.written !== 1) throw new Error(`saveState wrote ${r.written} messages, not 1`);
          return us;
        });
      } else {
        const store = createChatStore({ store: backend });
        await store.save("bench-chat", JSON.parse(side.text));
        saves.push(async (body) => {
          const t0 = performance.now();
          const r = await store.save("bench-chat", body as ChatMessage[]);
          const us = (performance.now() - t0) * 1000;
          if (r.written !== 1) throw new Error(`chat save wrote ${r.written} messages, not 1`);
          return us;
        });
      }
    }
    for (let i = 0; i < opts.saves; i++) {
      for (const [k, save] of saves.entries()) {
        const side = sides[k]!;
        const next = JSON.stringify(chatMessage(opts.shape, side.length + i, pool));
        side.text = `${side.text.slice(0, -1)},${next}]`;
        side.times.push(await save(JSON.parse(side.text)));
      }
    }
  } finally {
    for (const side of sides) {
      await side.backend?.close?.();
      await spec.cleanup?.(side.ctx);
      rmSync(side.ctx.dir, { recursive: true, force: true });
    }
  }
  return {
    store: `${opts.shape === "saveState" ? "saveState" : "chat save"}: ${spec.label}`,
    family: spec.family,
    shape: opts.shape,
    saves: opts.saves,
    short: opts.short,
    long: opts.long,
    shortP50: median(sides[0]!.times),
    longP50: median(sides[1]!.times),
  };
}
