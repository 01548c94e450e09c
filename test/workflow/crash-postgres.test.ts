/**
 * Crash test, Redis + PostgreSQL: child processes run the 20-node workflow for
 * 10 workflows and are SIGKILLed at random points; every workflow finishes
 * with the state of an uninterrupted run and every guarded side effect
 * happened exactly once.
 */
import path from "node:path";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { CheckpointStore, PostgresColdStore } from "../../src/workflow/index.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { crashRuns } from "./crash-harness.js";
import { tempDir } from "./helpers.js";

const skip = (await redisSkipReason()) ?? (await postgresSkipReason());
const tag = `${process.pid}_${Date.now().toString(36)}`;
const prefix = `dumplings-test:wf-crash-pg:${tag}:`;
const schema = `wf_crash_${tag}`;

describe.skipIf(skip)("crash: SIGKILL at random points, Redis + PostgreSQL", () => {
  const tmp = tempDir("crash-pg", { memory: true });
  afterAll(async () => {
    const r = new Redis(REDIS_URL);
    const keys = await r.keys(`${prefix}*`);
    if (keys.length) await r.del(...keys);
    await r.quit();
    const pool = new pg.Pool({ connectionString: DATABASE_URL });
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
    tmp.cleanup();
  });

  it("10 workflows killed and restarted equal the uninterrupted run; side effects exactly once", async () => {
    const env = {
      WF_COLD: "postgres",
      WF_PG_URL: DATABASE_URL,
      WF_PG_SCHEMA: schema,
      WF_REDIS_URL: REDIS_URL,
      WF_REDIS_PREFIX: prefix,
      WF_EFFECTS_DB: path.join(tmp.dir, "effects.db"),
      WF_BLOB_DIR: path.join(tmp.dir, "blobs"),
    };
    const store = await CheckpointStore.open({
      cold: new PostgresColdStore({ url: DATABASE_URL, schema }),
      blobDir: env.WF_BLOB_DIR,
    });
    const seed = Number(process.env.WF_CRASH_SEED ?? Date.now() % 100_000);
    const { interrupted, landed } = await crashRuns({
      label: "pg",
      runs: 10,
      env,
      store,
      effectsDb: env.WF_EFFECTS_DB,
      seed,
    });
    console.log(
      `[crash postgres] seed ${seed}: ${landed} kills landed, ${interrupted.size}/10 workflows interrupted mid-run`,
    );
    expect(landed, `seed ${seed}`).toBeGreaterThanOrEqual(1);
    expect(interrupted.size, `seed ${seed}`).toBeGreaterThanOrEqual(1);
    await store.close();
  }, 120_000);
});
