/**
 * LangGraph's own checkpointer validation suite
 * (`@langchain/langgraph-checkpoint-validation`) on every store of
 * DumplingsSaver: memory, SQLite (a fresh file per checkpointer),
 * PostgreSQL (a fresh schema per checkpointer) and Redis (a fresh key prefix
 * per checkpointer). The suite is run through its
 * library entry (its command-line runner fails before any test); it calls
 * vitest's `describe`/`it`/`expect` as globals, so they are provided first.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import * as vitest from "vitest";
import { globEscape, type RedisConnection } from "../../src/drivers/redis.js";
import { DumplingsSaver, type RedisSaverStorage } from "../../src/langgraph/index.js";
import {
  DATABASE_URL,
  postgresSkipReason,
  REDIS_URL,
  redisSkipReason,
  SERVICES_REQUIRED,
} from "../helpers/services.js";

Object.assign(globalThis, {
  describe: vitest.describe,
  it: vitest.it,
  test: vitest.test,
  expect: vitest.expect,
  beforeAll: vitest.beforeAll,
  afterAll: vitest.afterAll,
  beforeEach: vitest.beforeEach,
  afterEach: vitest.afterEach,
});
const { validate } = await import("@langchain/langgraph-checkpoint-validation");

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-langgraph-validation-"));
vitest.afterAll(() => rmSync(dir, { recursive: true, force: true }));
const schemas = new Map<DumplingsSaver, string>();
let n = 0;

validate({
  checkpointerName: "DumplingsSaver(memory)",
  createCheckpointer: () => new DumplingsSaver({ store: { memory: true } }),
});

validate({
  checkpointerName: "DumplingsSaver(sqlite)",
  createCheckpointer: () => new DumplingsSaver({ store: { sqlite: { path: path.join(dir, `v${n++}.db`) } } }),
  destroyCheckpointer: (saver) => saver.close(),
});

const postgresSkip = await postgresSkipReason();
if (postgresSkip === undefined || SERVICES_REQUIRED) {
  validate({
    checkpointerName: "DumplingsSaver(postgres)",
    createCheckpointer: () => {
      const schema = `lg_${process.pid}_${Date.now().toString(36)}_${n++}`;
      const saver = new DumplingsSaver({ store: { postgres: { url: DATABASE_URL, schema, maxConnections: 2 } } });
      schemas.set(saver, schema);
      return saver;
    },
    destroyCheckpointer: async (saver) => {
      const schema = schemas.get(saver);
      const pool = (saver.storage as unknown as { driver: { pool: { query(sql: string): Promise<unknown> } } }).driver
        .pool;
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await saver.close();
    },
  });
} else {
  vitest.describe("DumplingsSaver(postgres)", () => {
    vitest.it.skip(`skipped: ${postgresSkip}`, () => {});
  });
}

const redisSkip = await redisSkipReason();
if (redisSkip === undefined || SERVICES_REQUIRED) {
  validate({
    checkpointerName: "DumplingsSaver(redis)",
    createCheckpointer: () =>
      new DumplingsSaver({
        store: { redis: { url: REDIS_URL, keyPrefix: `test:lg:${process.pid}:${Date.now().toString(36)}:${n++}:` } },
      }),
    destroyCheckpointer: async (saver) => {
      const conn = (saver.storage as RedisSaverStorage).conn as RedisConnection<Redis>;
      await conn.call("cleanup", undefined, async (c) => {
        for (let cursor = "0"; ; ) {
          const [next, keys] = await c.scan(cursor, "MATCH", `${globEscape(conn.keyPrefix)}*`, "COUNT", 1000);
          if (keys.length > 0) await c.del(...keys);
          cursor = next;
          if (cursor === "0") break;
        }
      });
      await saver.close();
    },
  });
} else {
  vitest.describe("DumplingsSaver(redis)", () => {
    vitest.it.skip(`skipped: ${redisSkip}`, () => {});
  });
}
