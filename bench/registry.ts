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
  type BenchContext,
  type BenchStore,
  jsonlBaseline,
  langgraphStore,
  oursStore,
  postgresBaseline,
  redisBaseline,
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
        async (ctx) => {
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
        },
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
    langgraphStore("sqlite"),
    langgraphStore("memory"),
  ];
}
