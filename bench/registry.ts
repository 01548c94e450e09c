/**
 * The list of stores the bench runs, in table order. Our backends are
 * imported lazily so that a missing optional server only skips its rows.
 *
 * @module
 */
import { statSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import type { Redis } from "ioredis";
import type { StateBackend } from "../src/backends/types.js";
import { globEscape } from "../src/drivers/redis.js";
import {
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

const pgSchema = (ctx: BenchContext) => `bench_${ctx.id.replace(/[^a-z0-9_]/gi, "_")}`.toLowerCase();

function size(p: string): number {
  try {
    return statSync(p).size;
  } catch {
    return 0;
  }
}

/** Key prefix of one run of the Redis backend. */
const redisPrefix = (ctx: BenchContext): string => `bench:${ctx.id}:`;

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

/** Deletes the run's Redis keys when the store closes, so `npm run bench` leaves nothing behind. */
function withRedisCleanup(store: BenchStore): BenchStore {
  let ctx: BenchContext | undefined;
  return {
    ...store,
    async open(c) {
      ctx = c;
      await store.open(c);
    },
    async close() {
      await store.close();
      if (ctx === undefined) return;
      const { Redis } = await import("ioredis");
      const redis = new Redis(ctx.redisUrl, { maxRetriesPerRequest: 1 });
      try {
        const keys = await scanKeys(redis, redisPrefix(ctx));
        for (let i = 0; i < keys.length; i += 500) await redis.del(...keys.slice(i, i + 500));
      } finally {
        await redis.quit();
      }
    },
  };
}

/** Server memory of every key under the run's prefix (`MEMORY USAGE`, keys found with SCAN). */
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
    withRedisCleanup(
      checkpointerStore({
        name: "DumplingsSaver (redis)",
        family: "redis",
        wholeHistory: false,
        needs: "redis",
        make: async (ctx) => ours({ redis: { url: ctx.redisUrl, keyPrefix: redisPrefix(ctx) } }),
        size: (ctx) => redisPrefixSize(ctx),
        close: closeOurs,
      }),
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

/** Every store, baselines first within each kind. */
export async function allStores(): Promise<BenchStore[]> {
  const { FileBackend } = await import("../src/backends/file.js");
  const { SQLiteBackend } = await import("../src/backends/sqlite.js");
  const { RedisBackend } = await import("../src/backends/redis.js");
  const { PostgresBackend } = await import("../src/backends/postgres.js");
  return [
    jsonlBaseline(),
    oursStore(
      "file",
      "file (.duas)",
      async (ctx) => new FileBackend({ baseDir: ctx.dir }) as StateBackend,
      async (ctx) => size(path.join(ctx.dir, "bench-session.duas")),
    ),
    sqliteRowBaseline("NORMAL"),
    oursStore(
      "sqlite",
      "sqlite",
      async (ctx) => new SQLiteBackend({ dbPath: path.join(ctx.dir, "ours.db") }) as StateBackend,
      async (ctx) => {
        // Fold the WAL into the main file (as the baseline's size does) through a second connection.
        const p = path.join(ctx.dir, "ours.db");
        const db = new Database(p);
        db.pragma("wal_checkpoint(TRUNCATE)");
        db.close();
        return size(p) + size(`${p}-wal`);
      },
    ),
    redisBaseline(),
    withRedisCleanup(
      oursStore(
        "redis",
        "redis",
        async (ctx) => new RedisBackend({ url: ctx.redisUrl, keyPrefix: redisPrefix(ctx) }) as StateBackend,
        (ctx) => redisPrefixSize(ctx),
      ),
    ),
    postgresBaseline(),
    oursStore(
      "postgres",
      "postgres",
      async (ctx) =>
        new PostgresBackend({
          connectionString: ctx.databaseUrl,
          schema: pgSchema(ctx),
        }) as StateBackend,
      async (ctx) => {
        const pg = await import("pg");
        const client = new pg.default.Client({ connectionString: ctx.databaseUrl });
        await client.connect();
        try {
          const r = await client.query(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS n FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname <> 'schema_migrations'",
            [pgSchema(ctx)],
          );
          return Number(r.rows[0].n);
        } finally {
          await client.query(`DROP SCHEMA IF EXISTS "${pgSchema(ctx)}" CASCADE`);
          await client.end();
        }
      },
    ),
    ...(await checkpointers()),
  ];
}
