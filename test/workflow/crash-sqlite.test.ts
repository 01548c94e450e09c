/**
 * Crash test, Redis + SQLite: child processes run the 20-node workflow for 10
 * workflows and are SIGKILLed at random points; every workflow finishes with
 * the state of an uninterrupted run and every guarded side effect happened
 * exactly once.
 */
import path from "node:path";
import { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { CheckpointStore, SqliteColdStore } from "../../src/workflow/index.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { crashRuns } from "./crash-harness.js";
import { tempDir } from "./helpers.js";

const skip = await redisSkipReason();
const prefix = `dumplings-test:wf-crash-sqlite:${process.pid}:${Date.now().toString(36)}:`;

describe.skipIf(skip)("crash: SIGKILL at random points, Redis + SQLite", () => {
  const tmp = tempDir("crash-sqlite", { memory: true });
  afterAll(async () => {
    const r = new Redis(REDIS_URL);
    const keys = await r.keys(`${prefix}*`);
    if (keys.length) await r.del(...keys);
    await r.quit();
    tmp.cleanup();
  });

  it("10 workflows killed and restarted equal the uninterrupted run; side effects exactly once", async () => {
    const env = {
      WF_COLD: "sqlite",
      WF_SQLITE_PATH: path.join(tmp.dir, "checkpoints.db"),
      WF_REDIS_URL: REDIS_URL,
      WF_REDIS_PREFIX: prefix,
      WF_EFFECTS_DB: path.join(tmp.dir, "effects.db"),
      WF_BLOB_DIR: path.join(tmp.dir, "blobs"),
    };
    const store = await CheckpointStore.open({
      cold: new SqliteColdStore({ path: env.WF_SQLITE_PATH }),
      blobDir: env.WF_BLOB_DIR,
    });
    const seed = Number(process.env.WF_CRASH_SEED ?? Date.now() % 100_000);
    const { interrupted, landed } = await crashRuns({
      label: "sqlite",
      runs: 10,
      env,
      store,
      effectsDb: env.WF_EFFECTS_DB,
      seed,
    });
    console.log(
      `[crash sqlite] seed ${seed}: ${landed} kills landed, ${interrupted.size}/10 workflows interrupted mid-run`,
    );
    expect(landed, `seed ${seed}`).toBeGreaterThanOrEqual(1);
    expect(interrupted.size, `seed ${seed}`).toBeGreaterThanOrEqual(1);
    await store.close();
  }, 120_000);
});
