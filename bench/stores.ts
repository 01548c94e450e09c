/**
 * The stores `npm run bench` compares, behind one small adapter interface:
 *
 * - agents: a `BaseAgent` saved with `agent.saveState(key)` after each pushed
 *   message, loaded back with `loadState(key)`: the public API, what users call
 *   (the main table);
 * - backends: the dumplings-ai backends (file, SQLite, Redis, PostgreSQL), saved
 *   the way the persistence layer saves them (`write` with the revision and the
 *   number of messages already stored, so a save sends only the new message);
 *   the second table;
 * - LangGraph.js checkpointers: LangGraph's `SqliteSaver`, `MemorySaver` and
 *   `PostgresSaver`, and ours, `DumplingsSaver` on SQLite, PostgreSQL, Redis
 *   and memory; the messages as one channel, a pending write and a new
 *   checkpoint per save (how a LangGraph agent with a `messages` channel
 *   checkpoints after every step);
 * - raw baselines: the cheapest way to make one more message durable in each
 *   kind of store (JSONL append + fdatasync; an SQLite row per message in WAL;
 *   Redis RPUSH; a PostgreSQL INSERT per message).
 *
 * @module
 */
import { closeSync, fdatasyncSync, openSync, readFileSync, statSync, writeSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import type { StateBackend } from "../src/backends/types.js";
import type { Message } from "../src/core/messages.js";
import type { AgentState } from "../src/core/state.js";
import { BaseAgent, loadState } from "../src/index.js";
import { makeState } from "../src/testing/states.js";

/** Where a store keeps its data for one bench case. */
export interface BenchContext {
  /** A fresh temp directory for this store and case. */
  dir: string;
  /** A unique id for keys, schemas and prefixes of this case. */
  id: string;
  redisUrl: string;
  databaseUrl: string;
}

/** One store under test. */
export interface BenchStore {
  /** Row label, e.g. `ours: sqlite`. */
  name: string;
  /** Kind of store, for grouping and the baseline ratio. */
  family: "file" | "sqlite" | "redis" | "postgres" | "memory";
  /** `agent`: `saveState` on an agent; `backend`: a backend's `write`; `baseline`: a raw floor. */
  group: "agent" | "backend" | "langgraph" | "baseline";
  /** True when every save rewrites the whole history (sampled in windows at large N). */
  wholeHistory?: boolean;
  /** Needs a server: `redis` or `postgres`. */
  needs?: "redis" | "postgres";
  open(ctx: BenchContext): Promise<void>;
  /** Persist the history after message `history.length - 1` was appended. */
  save(history: Message[]): Promise<void> | void;
  /** Load the whole history back; returns it. */
  load(): Promise<Message[]>;
  /** Bytes the store occupies now (files, server memory or relation size). `undefined` when not measurable. */
  size(): Promise<number | undefined>;
  close(): Promise<void>;
}

function fileSize(p: string): number {
  try {
    return statSync(p).size;
  } catch {
    return 0;
  }
}

/** Our backends through their revision-aware `write`, as the persistence layer drives them. */
export function oursStore(
  family: BenchStore["family"],
  label: string,
  make: (ctx: BenchContext) => Promise<StateBackend>,
  sizeOf: (ctx: BenchContext, backend: StateBackend) => Promise<number | undefined>,
): BenchStore {
  let backend: StateBackend;
  let ctx: BenchContext;
  let state: AgentState;
  let revision: number | null = null;
  let stored = 0;
  const key = "bench-session";
  return {
    name: `write: ${label}`,
    family,
    group: "backend",
    needs: family === "redis" ? "redis" : family === "postgres" ? "postgres" : undefined,
    async open(c) {
      ctx = c;
      backend = await make(c);
      state = makeState([], { name: "bench" });
      revision = null;
      stored = 0;
    },
    async save(history) {
      state.history = history;
      state.meta.messageCount = history.length;
      if (!backend.write) throw new Error(`${label} has no write capability`);
      const r = await backend.write(key, state, {
        expectedRevision: revision,
        baseLength: revision === null ? undefined : stored,
      });
      revision = r.revision;
      stored = history.length;
    },
    async load() {
      const s = await backend.load(key);
      return s?.history ?? [];
    },
    size: () => sizeOf(ctx, backend),
    async close() {
      await backend.close?.();
    },
  };
}

/** The key the agent rows save under. */
export const AGENT_KEY = "bench-agent";

/**
 * A `BaseAgent` saved the way users save one: push the new message onto
 * `agent.history`, then `agent.saveState(key)` (the first save names the
 * backend instance; later saves go back to the key's backend, as a loaded
 * agent's do). Loading is `loadState(key, { backend })`, which rebuilds the agent.
 *
 * @param prompt - the agent's system prompt (`[CONFIG] prompt`)
 */
export function agentStore(
  family: BenchStore["family"],
  label: string,
  make: (ctx: BenchContext) => Promise<StateBackend>,
  sizeOf: (ctx: BenchContext, backend: StateBackend) => Promise<number | undefined>,
  prompt: string,
): BenchStore {
  let backend: StateBackend;
  let ctx: BenchContext;
  let agent: BaseAgent;
  let saved = false;
  return {
    name: `saveState: ${label}`,
    family,
    group: "agent",
    needs: family === "redis" ? "redis" : family === "postgres" ? "postgres" : undefined,
    async open(c) {
      ctx = c;
      backend = await make(c);
      agent = newBenchAgent(prompt);
      saved = false;
    },
    async save(history) {
      agent.history.push(history[history.length - 1]!);
      if (saved) await agent.saveState(AGENT_KEY);
      else {
        await agent.saveState(AGENT_KEY, { backend });
        saved = true;
      }
    },
    async load() {
      const loaded = await loadState(AGENT_KEY, { backend });
      return loaded.history;
    },
    size: () => sizeOf(ctx, backend),
    async close() {
      await backend.close?.();
    },
  };
}

/** The agent every agent scenario saves: an OpenAI-protocol `BaseAgent` with `prompt` as its system prompt. */
export function newBenchAgent(prompt: string): BaseAgent {
  return new BaseAgent({
    name: "bench",
    prompt,
    apiProvider: "https://api.openai.com/v1",
    apiKeyEnv: "OPENAI_API_KEY",
    modelName: "gpt-4o-mini",
  });
}

/** Raw floor: append the new message as a JSONL line, then fdatasync. */
export function jsonlBaseline(): BenchStore {
  let fd = -1;
  let file = "";
  return {
    name: "floor: JSONL append + fdatasync",
    family: "file",
    group: "baseline",
    async open(ctx) {
      file = path.join(ctx.dir, "history.jsonl");
      fd = openSync(file, "a");
    },
    save(history) {
      writeSync(fd, `${JSON.stringify(history[history.length - 1])}\n`);
      fdatasyncSync(fd);
    },
    async load() {
      const text = readFileSync(file, "utf8");
      const out: Message[] = [];
      for (const line of text.split("\n")) if (line) out.push(JSON.parse(line));
      return out;
    },
    async size() {
      return fileSize(file);
    },
    async close() {
      if (fd >= 0) closeSync(fd);
      fd = -1;
    },
  };
}

/** Raw floor: one SQLite row per message, WAL, the same `synchronous` setting as our SQLite backend. */
export function sqliteRowBaseline(synchronous: string): BenchStore {
  let db: Database.Database;
  let insert: Database.Statement;
  let file = "";
  return {
    name: `floor: SQLite row per message (WAL, ${synchronous})`,
    family: "sqlite",
    group: "baseline",
    async open(ctx) {
      file = path.join(ctx.dir, "rows.db");
      db = new Database(file);
      db.pragma("journal_mode = WAL");
      db.pragma(`synchronous = ${synchronous}`);
      db.exec("CREATE TABLE m (seq INTEGER PRIMARY KEY, body TEXT NOT NULL)");
      insert = db.prepare("INSERT INTO m (seq, body) VALUES (?, ?)");
    },
    save(history) {
      insert.run(history.length - 1, JSON.stringify(history[history.length - 1]));
    },
    async load() {
      return (db.prepare("SELECT body FROM m ORDER BY seq").all() as { body: string }[]).map((r) => JSON.parse(r.body));
    },
    async size() {
      db.pragma("wal_checkpoint(TRUNCATE)");
      return fileSize(file) + fileSize(`${file}-wal`);
    },
    async close() {
      db.close();
    },
  };
}

/** Raw floor: RPUSH of the new message to a Redis list. */
export function redisBaseline(): BenchStore {
  // biome-ignore lint/suspicious/noExplicitAny: ioredis is loaded lazily so the bench runs without a server
  let redis: any;
  let key = "";
  return {
    name: "floor: Redis RPUSH",
    family: "redis",
    group: "baseline",
    needs: "redis",
    async open(ctx) {
      const { Redis } = await import("ioredis");
      redis = new Redis(ctx.redisUrl, { maxRetriesPerRequest: 1, connectTimeout: 2000 });
      key = `bench:${ctx.id}:rpush`;
      await redis.del(key);
    },
    async save(history) {
      await redis.rpush(key, JSON.stringify(history[history.length - 1]));
    },
    async load() {
      return ((await redis.lrange(key, 0, -1)) as string[]).map((s) => JSON.parse(s));
    },
    async size() {
      return Number(await redis.call("MEMORY", "USAGE", key, "SAMPLES", "0"));
    },
    async close() {
      await redis.del(key);
      await redis.quit();
    },
  };
}

/** Raw floor: one INSERT per message into a PostgreSQL table (autocommit). */
export function postgresBaseline(): BenchStore {
  // biome-ignore lint/suspicious/noExplicitAny: pg is loaded lazily so the bench runs without a server
  let client: any;
  let table = "";
  return {
    name: "floor: PostgreSQL INSERT per message",
    family: "postgres",
    group: "baseline",
    needs: "postgres",
    async open(ctx) {
      const pg = await import("pg");
      client = new pg.default.Client({ connectionString: ctx.databaseUrl });
      await client.connect();
      table = `bench_rows_${ctx.id.replace(/[^a-z0-9_]/gi, "_")}`;
      await client.query(`DROP TABLE IF EXISTS ${table}`);
      await client.query(`CREATE TABLE ${table} (seq integer PRIMARY KEY, body text NOT NULL)`);
    },
    async save(history) {
      await client.query(`INSERT INTO ${table} (seq, body) VALUES ($1, $2)`, [
        history.length - 1,
        JSON.stringify(history[history.length - 1]),
      ]);
    },
    async load() {
      const r = await client.query(`SELECT body FROM ${table} ORDER BY seq`);
      return r.rows.map((row: { body: string }) => JSON.parse(row.body));
    },
    async size() {
      const r = await client.query("SELECT pg_total_relation_size($1::regclass) AS n", [table]);
      return Number(r.rows[0].n);
    },
    async close() {
      await client.query(`DROP TABLE IF EXISTS ${table}`);
      await client.end();
    },
  };
}

/** The part of LangGraph's `BaseCheckpointSaver` the bench drives. */
export interface BenchCheckpointer {
  // biome-ignore lint/suspicious/noExplicitAny: LangGraph's RunnableConfig/Checkpoint types, kept loose for every saver
  put(config: any, checkpoint: any, metadata: any, newVersions: Record<string, number>): Promise<any>;
  // biome-ignore lint/suspicious/noExplicitAny: as above
  putWrites(config: any, writes: [string, unknown][], taskId: string): Promise<void>;
  // biome-ignore lint/suspicious/noExplicitAny: as above
  getTuple(config: any): Promise<any>;
}

/** How to open, measure and close one LangGraph checkpointer for {@link checkpointerStore}. */
export interface CheckpointerSpec {
  name: string;
  family: BenchStore["family"];
  /** True for LangGraph's savers, which store the whole `messages` value at every checkpoint. */
  wholeHistory: boolean;
  needs?: "redis" | "postgres";
  make(ctx: BenchContext): Promise<BenchCheckpointer>;
  /** Bytes stored now; `undefined` when not measurable (in-process memory). */
  size(ctx: BenchContext, saver: BenchCheckpointer): Promise<number | undefined>;
  close(ctx: BenchContext, saver: BenchCheckpointer): Promise<void>;
}

/**
 * A LangGraph.js checkpointer driven as a graph with a `messages` channel
 * (`MessagesAnnotation`) drives it when one node appends one message per step:
 * the step's write is stored as a pending write of the current checkpoint
 * (`putWrites`), then the next checkpoint is stored (`put`) with the channel
 * at a new version, its parent the previous checkpoint. A save is both calls.
 * The channel value is a new array each step, as LangGraph's reducer returns.
 */
export function checkpointerStore(spec: CheckpointerSpec): BenchStore {
  let saver: BenchCheckpointer;
  let ctx: BenchContext;
  let threadId = "";
  let parentId: string | undefined;
  let step = 0;
  // biome-ignore lint/suspicious/noExplicitAny: module namespace of @langchain/langgraph-checkpoint
  let lg: any;
  return {
    name: spec.name,
    family: spec.family,
    group: "langgraph",
    wholeHistory: spec.wholeHistory,
    needs: spec.needs,
    async open(c) {
      ctx = c;
      lg = await import("@langchain/langgraph-checkpoint");
      saver = await spec.make(c);
      threadId = `bench-${c.id}`;
      parentId = undefined;
      step = 0;
    },
    async save(history) {
      const config = {
        configurable: { thread_id: threadId, checkpoint_ns: "", ...(parentId ? { checkpoint_id: parentId } : {}) },
      };
      if (parentId) await saver.putWrites(config, [["messages", [history[history.length - 1]]]], `task-${step}`);
      const checkpoint = lg.emptyCheckpoint();
      checkpoint.id = lg.uuid6(step);
      // A new array, as the messages reducer returns (a saver may keep the previous value to compare).
      checkpoint.channel_values = { messages: history.slice() };
      checkpoint.channel_versions = { messages: step + 1 };
      const next = await saver.put(config, checkpoint, { source: "loop", step, parents: {} }, { messages: step + 1 });
      parentId = next.configurable.checkpoint_id;
      step++;
    },
    async load() {
      const t = await saver.getTuple({ configurable: { thread_id: threadId, checkpoint_ns: "" } });
      return (t?.checkpoint.channel_values.messages ?? []) as Message[];
    },
    size: () => spec.size(ctx, saver),
    close: () => spec.close(ctx, saver),
  };
}

/** SQLite file size with its WAL folded in (through a second connection). */
export function sqliteFileSize(file: string): number {
  const db = new Database(file);
  try {
    db.pragma("wal_checkpoint(TRUNCATE)");
  } finally {
    db.close();
  }
  return fileSize(file) + fileSize(`${file}-wal`);
}

/** Total size of the tables (with indexes and TOAST) of a PostgreSQL schema, except `exclude`d ledgers. */
export async function postgresSchemaSize(databaseUrl: string, schema: string, exclude: string[]): Promise<number> {
  const pg = await import("pg");
  const client = new pg.default.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const r = await client.query(
      "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS n FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r' AND NOT (c.relname = ANY($2))",
      [schema, exclude],
    );
    return Number(r.rows[0].n);
  } finally {
    await client.end();
  }
}

/** Drops a bench schema. */
export async function dropPostgresSchema(databaseUrl: string, schema: string): Promise<void> {
  const pg = await import("pg");
  const client = new pg.default.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}
