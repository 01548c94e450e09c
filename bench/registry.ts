/**
 * The stores `npm run bench` compares, in table order. Our backends are
 * imported lazily so that a missing optional server only skips its rows.
 *
 * - `floors`: the raw floor of each kind of store (`stores.ts`);
 * - `agents`: an agent saved with `saveState` on each of our backends (the
 *   main table: what users call);
 * - `backends`: each backend's `write` driven directly (the second table);
 * - `checkpointers`: LangGraph.js checkpointers (LangGraph's and ours).
 *
 * {@link backendSpecs} is the one place that opens, measures and cleans up a
 * backend of each kind; the extra scenarios (`scenarios.ts`) use it too.
 *
 * @module
 */
import { statSync } from "node:fs";
import path from "node:path";
import type Database from "better-sqlite3";
import type { Redis } from "ioredis";
import type { StateBackend } from "../src/backends/types.js";
import { SQLITE_SYNCHRONOUS } from "../src/core/defaults.js";
import { globEscape } from "../src/drivers/redis.js";
import {
  agentStore,
  type BenchCheckpointer,
  type BenchContext,
  type BenchStore,
  checkpointerStore,
  dropPostgresSchema,
  jsonlBaseline,
  oursStore,
  postgresBaseline,
  postgresSchemaSize,
  redisBaseline,
  sqliteFileSize,
  sqliteRowBaseline,
} from "./stores.js";

export type { BenchContext, BenchStore };

/** A PostgreSQL schema name unique to one bench case. */
export const pgSchema = (ctx: BenchContext) => `bench_${ctx.id.replace(/[^a-z0-9_]/gi, "_")}`.toLowerCase();

function size(p: string): number {
  try {
    return statSync(p).size;
  } catch {
    return 0;
  }
}

/** Key prefix of one run of a Redis component. */
export const redisPrefix = (ctx: BenchContext): string => `bench:${ctx.id}:`;

/** Every key under `prefix`, found with SCAN (never KEYS, which blocks the server), the prefix matched literally. */
async function scanKeys(redis: Redis, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor = "0";
  do {
    const [next, batch] = await redis.scan(cursor, "MATCH", `${globEscape(prefix)}*`, "COUNT", 1000);
    keys.push(...batch);
    cursor = next;
  } while (cursor !== "0");
  return keys;
}

/** Deletes every Redis key under the case's prefix (so `npm run bench` leaves nothing behind). */
export async function deleteRedisPrefix(ctx: BenchContext): Promise<void> {
  const { Redis } = await import("ioredis");
  const redis = new Redis(ctx.redisUrl, { maxRetriesPerRequest: 1 });
  try {
    const keys = await scanKeys(redis, redisPrefix(ctx));
    for (let i = 0; i < keys.length; i += 500) await redis.del(...keys.slice(i, i + 500));
  } finally {
    await redis.quit();
  }
}

/** Runs `cleanup` after the store closes. */
function withCleanup(store: BenchStore, cleanup: (ctx: BenchContext) => Promise<void>): BenchStore {
  let ctx: BenchContext | undefined;
  return {
    ...store,
    async open(c) {
      ctx = c;
      await store.open(c);
    },
    async close() {
      try {
        await store.close();
      } finally {
        if (ctx !== undefined) await cleanup(ctx);
      }
    },
  };
}

/** Server memory of every key under the case's prefix (`MEMORY USAGE`, keys found with SCAN). */
async function redisPrefixSize(ctx: BenchContext): Promise<number> {
  const { Redis } = await import("ioredis");
  const redis = new Redis(ctx.redisUrl, { maxRetriesPerRequest: 1 });
  try {
    let total = 0;
    for (const k of await scanKeys(redis, redisPrefix(ctx))) {
      total += Number(await redis.call("MEMORY", "USAGE", k, "SAMPLES", "0"));
    }
    return total;
  } finally {
    await redis.quit();
  }
}

/** How to open, measure and clean up one of our backends for a bench case. */
export interface BackendSpec {
  family: BenchStore["family"];
  label: string;
  needs?: "redis" | "postgres";
  make(ctx: BenchContext): Promise<StateBackend>;
  /** Bytes stored now; `undefined` when not measurable (in-process memory). */
  sizeOf(ctx: BenchContext, backend: StateBackend): Promise<number | undefined>;
  /** Removes what the case left on a server (after the backend closed). */
  cleanup?(ctx: BenchContext): Promise<void>;
}

/** Our backends: file, SQLite, Redis, PostgreSQL and memory, each with its defaults. */
export async function backendSpecs(): Promise<BackendSpec[]> {
  const { FileBackend } = await import("../src/backends/file/index.js");
  const { MemoryBackend } = await import("../src/backends/memory.js");
  const { SQLiteBackend } = await import("../src/backends/sqlite.js");
  const { RedisBackend } = await import("../src/backends/redis.js");
  const { PostgresBackend } = await import("../src/backends/postgres.js");
  return [
    {
      family: "file",
      label: "file (.duas)",
      make: async (ctx) => new FileBackend({ baseDir: ctx.dir }),
      // The agent rows save under `bench-agent`, the write rows under `bench-session`: the case's one file.
      sizeOf: async (ctx) =>
        size(path.join(ctx.dir, "bench-agent.duas")) + size(path.join(ctx.dir, "bench-session.duas")),
    },
    {
      family: "sqlite",
      label: "sqlite",
      make: async (ctx) => new SQLiteBackend({ path: path.join(ctx.dir, "ours.db") }),
      // Fold the WAL into the main file (as the floor's size does) through a second connection.
      sizeOf: async (ctx) => sqliteFileSize(path.join(ctx.dir, "ours.db")),
    },
    {
      family: "redis",
      label: "redis",
      needs: "redis",
      make: async (ctx) => new RedisBackend({ url: ctx.redisUrl, keyPrefix: redisPrefix(ctx) }),
      sizeOf: (ctx) => redisPrefixSize(ctx),
      cleanup: deleteRedisPrefix,
    },
    {
      family: "postgres",
      label: "postgres",
      needs: "postgres",
      make: async (ctx) => new PostgresBackend({ url: ctx.databaseUrl, schema: pgSchema(ctx) }),
      sizeOf: (ctx) =>
        postgresSchemaSize(ctx.databaseUrl, pgSchema(ctx), ["schema_migrations", "dumplings_migrations"]),
      cleanup: (ctx) => dropPostgresSchema(ctx.databaseUrl, pgSchema(ctx)),
    },
    {
      family: "memory",
      label: "memory",
      make: async () => new MemoryBackend(),
      sizeOf: async () => undefined,
    },
  ];
}

/**
 * The LangGraph.js checkpointers: LangGraph's own savers (whole `messages`
 * value at every checkpoint) and `DumplingsSaver` on each of its stores.
 */
async function checkpointers(): Promise<BenchStore[]> {
  const { DumplingsSaver } = await import("../src/langgraph/index.js");
  const ours = (store: ConstructorParameters<typeof DumplingsSaver>[0]["store"]) =>
    new DumplingsSaver({ store }) as unknown as BenchCheckpointer;
  const closeOurs = async (_ctx: BenchContext, saver: BenchCheckpointer) =>
    (saver as unknown as { close(): Promise<void> }).close();
  const lgFile = (ctx: BenchContext) => path.join(ctx.dir, "langgraph.db");
  const oursFile = (ctx: BenchContext) => path.join(ctx.dir, "dumplings-langgraph.db");
  return [
    checkpointerStore({
      name: "LangGraph SqliteSaver",
      family: "sqlite",
      wholeHistory: true,
      async make(ctx) {
        const { SqliteSaver } = await import("@langchain/langgraph-checkpoint-sqlite");
        return SqliteSaver.fromConnString(lgFile(ctx)) as unknown as BenchCheckpointer;
      },
      size: async (ctx) => sqliteFileSize(lgFile(ctx)),
      close: async (_ctx, saver) => {
        (saver as unknown as { db: Database.Database }).db.close();
      },
    }),
    checkpointerStore({
      name: "DumplingsSaver (sqlite)",
      family: "sqlite",
      wholeHistory: false,
      make: async (ctx) => ours({ sqlite: { path: oursFile(ctx) } }),
      size: async (ctx) => sqliteFileSize(oursFile(ctx)),
      close: closeOurs,
    }),
    checkpointerStore({
      name: "LangGraph PostgresSaver",
      family: "postgres",
      wholeHistory: true,
      needs: "postgres",
      async make(ctx) {
        const { PostgresSaver } = await import("@langchain/langgraph-checkpoint-postgres");
        const saver = PostgresSaver.fromConnString(ctx.databaseUrl, { schema: `${pgSchema(ctx)}_lg` });
        await saver.setup();
        return saver as unknown as BenchCheckpointer;
      },
      size: (ctx) => postgresSchemaSize(ctx.databaseUrl, `${pgSchema(ctx)}_lg`, ["checkpoint_migrations"]),
      async close(ctx, saver) {
        await (saver as unknown as { end(): Promise<void> }).end();
        await dropPostgresSchema(ctx.databaseUrl, `${pgSchema(ctx)}_lg`);
      },
    }),
    checkpointerStore({
      name: "DumplingsSaver (postgres)",
      family: "postgres",
      wholeHistory: false,
      needs: "postgres",
      make: async (ctx) => ours({ postgres: { url: ctx.databaseUrl, schema: pgSchema(ctx) } }),
      size: (ctx) => postgresSchemaSize(ctx.databaseUrl, pgSchema(ctx), ["dumplings_migrations"]),
      async close(ctx, saver) {
        await closeOurs(ctx, saver);
        await dropPostgresSchema(ctx.databaseUrl, pgSchema(ctx));
      },
    }),
    withCleanup(
      checkpointerStore({
        name: "DumplingsSaver (redis)",
        family: "redis",
        wholeHistory: false,
        needs: "redis",
        make: async (ctx) => ours({ redis: { url: ctx.redisUrl, keyPrefix: redisPrefix(ctx) } }),
        size: (ctx) => redisPrefixSize(ctx),
        close: closeOurs,
      }),
      deleteRedisPrefix,
    ),
    checkpointerStore({
      name: "LangGraph MemorySaver",
      family: "memory",
      wholeHistory: true,
      async make() {
        const { MemorySaver } = await import("@langchain/langgraph-checkpoint");
        return new MemorySaver() as unknown as BenchCheckpointer;
      },
      size: async () => undefined,
      close: async () => {},
    }),
    checkpointerStore({
      name: "DumplingsSaver (memory)",
      family: "memory",
      wholeHistory: false,
      make: async () => ours({ memory: true }),
      size: async () => undefined,
      close: closeOurs,
    }),
  ];
}

/** Every store of the bench, by role; within each kind, the floor comes first. */
export interface BenchStores {
  /** One raw floor per kind of store (none for memory). */
  floors: BenchStore[];
  /** `saveState` on an agent, one per backend (the main table). */
  agents: BenchStore[];
  /** The backends' `write`, one per backend except memory (the second table). */
  backends: BenchStore[];
  /** LangGraph.js checkpointers, LangGraph's and ours. */
  checkpointers: BenchStore[];
}

/**
 * Every store the bench runs.
 *
 * @param prompt - the system prompt of the agents of the main table
 */
export async function allStores(prompt: string): Promise<BenchStores> {
  const specs = await backendSpecs();
  const withSpecCleanup = (store: BenchStore, spec: BackendSpec) =>
    spec.cleanup ? withCleanup(store, spec.cleanup) : store;
  return {
    floors: [jsonlBaseline(), sqliteRowBaseline(SQLITE_SYNCHRONOUS), redisBaseline(), postgresBaseline()],
    agents: specs.map((spec) =>
      withSpecCleanup(agentStore(spec.family, spec.label, spec.make, spec.sizeOf, prompt), spec),
    ),
    backends: specs
      .filter((spec) => spec.family !== "memory")
      .map((spec) => withSpecCleanup(oursStore(spec.family, spec.label, spec.make, spec.sizeOf), spec)),
    checkpointers: await checkpointers(),
  };
}
