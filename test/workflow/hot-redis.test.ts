/**
 * The Redis hot tier over a real SQLite cold store: hits, stale and expired
 * entries fall back to cold and refill, a dead or killed Redis costs a bounded
 * timeout and the run continues on the cold tier.
 */
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type CheckpointStore,
  createWorkflowState,
  END,
  type GraphNode,
  RedisHotTier,
  ResumableGraphRunner,
  type WorkflowState,
} from "../../src/workflow/index.js";
import { freePort, redisServerBinary, startRedis } from "../helpers/redis-server.js";
import { REDIS_URL, redisSkipReason, SERVICES_REQUIRED } from "../helpers/services.js";
import { sqliteStore, tempDir } from "./helpers.js";

const skip = await redisSkipReason();
const noBinary = redisServerBinary() ? undefined : "redis-server binary not installed";
if (noBinary && SERVICES_REQUIRED) throw new Error(`${noBinary} and DUMPLINGS_REQUIRE_SERVICES=1`);
const prefix = `dumplings-test:wf-hot:${process.pid}:${Date.now().toString(36)}:`;

const next = (s: WorkflowState, patch: Partial<WorkflowState> = {}): WorkflowState => ({
  ...s,
  stepIndex: s.stepIndex + 1,
  updatedAt: s.updatedAt + 1,
  ...patch,
});

describe.skipIf(skip)("Redis hot tier (shared server)", () => {
  let tmp: ReturnType<typeof tempDir>;
  let raw: Redis;
  const stores: CheckpointStore[] = [];
  const open = async (ttlMs?: number) => {
    const s = await sqliteStore(tmp.dir, { hot: new RedisHotTier({ url: REDIS_URL, keyPrefix: prefix, ttlMs }) });
    await s.hot!.waitReady(2000);
    stores.push(s);
    return s;
  };
  beforeAll(() => {
    tmp = tempDir("hot");
    raw = new Redis(REDIS_URL);
  });
  afterAll(async () => {
    for (const s of stores) await s.close();
    const keys = await raw.keys(`${prefix}*`);
    if (keys.length) await raw.del(...keys);
    await raw.quit();
    tmp.cleanup();
  });

  it("caches the snapshot's bytes by script SHA (sent again after SCRIPT FLUSH), and as text through a client without evalsha", async () => {
    // A minimal injected client: the six methods of RedisClientLike, no evalsha.
    const inner = new Redis(REDIS_URL);
    const minimal = {
      eval: inner.eval.bind(inner),
      hmget: inner.hmget.bind(inner),
      del: inner.del.bind(inner),
      quit: inner.quit.bind(inner),
      disconnect: inner.disconnect.bind(inner),
      get status() {
        return inner.status;
      },
    };
    try {
      for (const [id, hot] of [
        ["sha1", new RedisHotTier({ url: REDIS_URL, keyPrefix: prefix })],
        ["plain1", new RedisHotTier({ client: minimal as never, keyPrefix: prefix })],
      ] as const) {
        const store = await sqliteStore(tmp.dir, { hot });
        stores.push(store);
        await hot.waitReady(2000);
        await raw.script("FLUSH"); // the first write finds no script (NOSCRIPT) and sends its text
        const s0 = createWorkflowState({
          workflowId: id,
          sharedMemory: { text: "ünï ✓ 🙂", list: [{ a: 1 }, { b: 2 }] },
        });
        await store.save(s0, { expectedStep: null });
        await store.save(next(s0), { expectedStep: 0 });
        const cold = await store.cold.latest(id);
        expect(await raw.hget(`${prefix}agent:state:${id}`, "state"), id).toBe(cold?.stateJson);
        expect(await raw.hget(`${prefix}agent:state:${id}`, "step"), id).toBe("1");
        expect(store.stats.hotErrors, id).toBe(0);
      }
    } finally {
      await inner.quit();
    }
  });

  it("writes agent:state:{id} with a TTL and serves current loads from it", async () => {
    const store = await open();
    const s0 = createWorkflowState({ workflowId: "h1", sharedMemory: { a: 1 } });
    await store.save(s0, { expectedStep: null });
    const key = `${prefix}agent:state:h1`;
    expect(await raw.hget(key, "step")).toBe("0");
    const ttl = await raw.pttl(key);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(86_400_000);
    expect((await store.loadLatest("h1"))?.sharedMemory).toEqual({ a: 1 });
    expect(store.stats.hotHits).toBe(1);
    expect(store.stats.coldReads).toBe(0);
  });

  it("a hot entry older than the cold row is not used; the hot tier is refilled", async () => {
    const store = await open();
    const s0 = createWorkflowState({ workflowId: "h2", sharedMemory: { v: 0 } });
    await store.save(s0, { expectedStep: null });
    const staleJson = await raw.hget(`${prefix}agent:state:h2`, "state");
    await store.save(next(s0, { sharedMemory: { v: 1 } }), { expectedStep: 0 });
    // Put the old snapshot back, as a hot write that failed while cold succeeded would leave it.
    await raw.hset(`${prefix}agent:state:h2`, "step", "0", "state", staleJson!);
    expect((await store.loadLatest("h2"))?.sharedMemory).toEqual({ v: 1 });
    expect(store.stats.hotStale).toBe(1);
    expect(await raw.hget(`${prefix}agent:state:h2`, "step")).toBe("1");
    // A corrupted entry is a counted cache failure, never a wrong answer.
    await raw.hset(`${prefix}agent:state:h2`, "state", "{not json");
    const errorsBefore = store.stats.hotErrors;
    expect((await store.loadLatest("h2"))?.sharedMemory).toEqual({ v: 1 });
    expect(store.stats.hotErrors).toBe(errorsBefore + 1);
  });

  it("an expired hot entry (PEXPIRE) falls back to the cold row and is refilled", async () => {
    const store = await open(150);
    const s0 = createWorkflowState({ workflowId: "h3", sharedMemory: { v: "cold" } });
    await store.save(s0, { expectedStep: null });
    const key = `${prefix}agent:state:h3`;
    for (let i = 0; i < 100 && (await raw.exists(key)); i++) await new Promise((r) => setTimeout(r, 50));
    expect(await raw.exists(key)).toBe(0);
    expect((await store.loadLatest("h3"))?.sharedMemory).toEqual({ v: "cold" });
    expect(store.stats.hotMisses).toBe(1);
    expect(store.stats.coldReads).toBe(1);
    expect(await raw.hget(key, "step")).toBe("0");
  });

  it("delete removes both tiers, and an orphan hot entry is never served", async () => {
    const store = await open();
    const s0 = createWorkflowState({ workflowId: "h4" });
    await store.save(s0, { expectedStep: null });
    const json = await raw.hget(`${prefix}agent:state:h4`, "state");
    expect(await store.delete("h4")).toBe(true);
    expect(await raw.exists(`${prefix}agent:state:h4`)).toBe(0);
    await raw.hset(`${prefix}agent:state:h4`, "step", "0", "state", json!);
    expect(await store.loadLatest("h4")).toBeUndefined();
    expect(await raw.exists(`${prefix}agent:state:h4`)).toBe(0);
  });

  it("a hot write never replaces a newer step (slow writer)", async () => {
    const store = await open();
    await store.hot!.put("h5", { stepIndex: 7, stateJson: "{}" });
    await store.hot!.put("h5", { stepIndex: 3, stateJson: "{}" });
    expect((await store.hot!.get("h5"))?.stepIndex).toBe(7);
  });
});

describe.skipIf(noBinary)("Redis down: the run continues on the cold tier", () => {
  it("a Redis that is not there costs a bounded timeout, never a hang, and is counted", async () => {
    const tmp = tempDir("hot-dead");
    const port = await freePort(); // nothing listens here
    const errors: string[] = [];
    const store = await sqliteStore(tmp.dir, {
      hot: new RedisHotTier({ url: `redis://127.0.0.1:${port}`, connectTimeoutMs: 200, commandTimeoutMs: 200 }),
      onHotError: (_e, op) => errors.push(op),
    });
    const runner = new ResumableGraphRunner({
      store,
      nodes: {
        a: (s) => ({
          next: (s.sharedMemory.n as number) >= 4 ? END : "a",
          updates: { n: (s.sharedMemory.n as number) + 1 },
        }),
      },
    });
    const out = await runner.runOrResume("dead", { sharedMemory: { n: 0 } });
    expect(out.state.sharedMemory.n).toBe(5);
    expect(store.stats.hotErrors).toBeGreaterThanOrEqual(6);
    expect(errors).toContain("put");
    expect((await store.loadLatest("dead"))?.stepIndex).toBe(5);
    await store.close();
    tmp.cleanup();
  });

  it("killing our own redis-server mid-run: the workflow finishes from the cold store; Redis back → hot again", async () => {
    const tmp = tempDir("hot-kill");
    const redis = await startRedis();
    const store = await sqliteStore(tmp.dir, {
      hot: new RedisHotTier({ url: redis.url, connectTimeoutMs: 300, commandTimeoutMs: 300 }),
      onHotError: () => undefined,
    });
    expect(await store.hot!.waitReady(3000)).toBe(true);
    let killedAt = -1;
    const nodes: Record<string, GraphNode> = {
      work: async (s) => {
        const n = s.sharedMemory.n as number;
        if (n === 5) {
          await redis.kill();
          killedAt = s.stepIndex;
        }
        return { next: n + 1 >= 10 ? END : "work", updates: { n: n + 1 } };
      },
    };
    const runner = new ResumableGraphRunner({ store, nodes });
    const out = await runner.runOrResume("killed", { sharedMemory: { n: 0 } });
    expect(killedAt).toBe(5);
    expect(out.state.sharedMemory.n).toBe(10);
    expect(store.stats.hotErrors).toBeGreaterThan(0);
    const history = await store.history("killed");
    expect(history.map((h) => h.stepIndex)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect((await store.loadLatest("killed"))?.sharedMemory.n).toBe(10);

    // Redis comes back on the same port: the client reconnects by itself and the hot tier is used again.
    const again = await startRedis(redis.port);
    expect(await store.hot!.waitReady(5000)).toBe(true);
    const hitsBefore = store.stats.hotHits;
    await store.loadLatest("killed"); // miss → refill
    await store.loadLatest("killed"); // hit
    expect(store.stats.hotHits).toBe(hitsBefore + 1);
    await store.close();
    await again.kill();
    tmp.cleanup();
  });
});
