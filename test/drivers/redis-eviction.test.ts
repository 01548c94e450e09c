/**
 * Redis as the source of truth (issue 25, item 1), on private `redis-server`s:
 *
 * - a server that may evict keys (`maxmemory-policy allkeys-lru`) is refused by
 *   every store that is the only copy of its data (sessions, the durable
 *   journal, run streams, the LangGraph checkpointer), with a typed
 *   `InvalidOptionError` (option `allowEviction`) before anything is written;
 *   `allowEviction: true` accepts it with one process warning; the policy is
 *   read from `INFO memory` when `CONFIG` is renamed away (managed Redis); the
 *   checkpoint hot tier, a cache, accepts eviction silently;
 * - a waiting durable run whose keys Redis evicted is a `JournalIntegrityError`
 *   at the next `runDurable`, and none of its completed steps runs again
 *   (counted); a run whose step records alone vanished is refused the same way;
 * - a session whose history list vanished refuses the next append (FormatError)
 *   instead of reporting success; a save during which a TTL command fails has
 *   written nothing (all or nothing, TTLs included).
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisBackend } from "../../src/backends/redis.js";
import { BackendError, FormatError, InvalidOptionError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import { EVICTION_WARNING_CODE } from "../../src/drivers/redis.js";
import { RedisHotTier } from "../../src/durable/checkpoints/hot-redis.js";
import { step, waitForSignal } from "../../src/durable/context.js";
import { JournalIntegrityError } from "../../src/durable/errors.js";
import { RedisJournal } from "../../src/durable/journal-redis.js";
import { runDurable } from "../../src/durable/run.js";
import { RedisRunStream } from "../../src/durable/stream.js";
import { RedisSaverStorage } from "../../src/langgraph/storage-redis.js";
import { makeState } from "../../src/testing/states.js";
import { type PrivateRedis, redisServerBinary, startRedis } from "../helpers/redis-server.js";

const noBinary = !redisServerBinary();
const servers: PrivateRedis[] = [];
const closers: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const close of closers) await close().catch(() => undefined);
  for (const s of servers) await s.kill();
});

const start = async (args: string[]) => {
  const s = await startRedis(undefined, args);
  servers.push(s);
  return s;
};
const admin = (url: string) => {
  const c = new Redis(url, { lazyConnect: false });
  closers.push(() => c.quit());
  return c;
};
const track = <T extends { close(): Promise<unknown> }>(x: T): T => {
  closers.push(() => x.close());
  return x;
};

/** Process warnings of the eviction check emitted while `fn` runs. */
async function evictionWarnings(fn: () => Promise<unknown>): Promise<string[]> {
  const seen: string[] = [];
  const on = (w: Error & { code?: string }) => {
    if (w.code === EVICTION_WARNING_CODE) seen.push(w.message);
  };
  process.on("warning", on);
  try {
    await fn();
    await new Promise((r) => setImmediate(r)); // warnings are emitted on the next tick
  } finally {
    process.off("warning", on);
  }
  return seen;
}

const history: Message[] = [
  { role: "user", content: "hello" },
  { role: "assistant", content: "hi" },
];

/** The four source-of-truth stores, each with one call that reads or writes. */
const stores = (url: string, extra: { allowEviction?: boolean } = {}) => {
  const backend = track(new RedisBackend({ url, ...extra }));
  const journal = track(new RedisJournal({ url, ...extra }));
  const stream = track(new RedisRunStream({ url, ...extra }));
  const saver = track(new RedisSaverStorage({ url, ...extra }));
  return [
    { name: "RedisBackend", call: () => backend.save("k1", makeState(history)) },
    { name: "RedisJournal", call: () => journal.createRun({ runId: "r1", workflow: "w", input: null }) },
    { name: "RedisRunStream", call: () => stream.append("r1", { type: "token", text: "a" }) },
    { name: "RedisSaverStorage", call: () => saver.getCheckpoint("t1", "") },
  ];
};

describe.skipIf(noBinary)("a Redis that may evict keys is refused by the stores that are the source of truth", () => {
  let lru: PrivateRedis;
  let noConfig: PrivateRedis;
  beforeAll(async () => {
    lru = await start(["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"]);
    noConfig = await start([
      "--maxmemory",
      "64mb",
      "--maxmemory-policy",
      "volatile-lru",
      "--rename-command",
      "CONFIG",
      "",
    ]);
  });

  it("allkeys-lru: each store refuses with InvalidOptionError (allowEviction) and writes nothing", async () => {
    const raw = admin(lru.url);
    for (const s of stores(lru.url)) {
      const e = await s.call().catch((x: unknown) => x);
      expect(e, s.name).toBeInstanceOf(InvalidOptionError);
      expect(e).toMatchObject({ code: "INVALID_OPTION", option: "allowEviction" });
      expect(String((e as Error).message)).toMatch(/maxmemory-policy allkeys-lru.*noeviction/);
      // refused again on the next call (a refusal is not remembered as a pass)
      await expect(s.call(), s.name).rejects.toBeInstanceOf(InvalidOptionError);
    }
    expect(await raw.dbsize()).toBe(0);

    // the checkpoint hot tier, a cache, accepts eviction without a word
    const hot = track(new RedisHotTier({ url: lru.url, keyPrefix: "hot:" }));
    const warnings = await evictionWarnings(async () => {
      await hot.put("w1", { stepIndex: 1, stateJson: "{}" });
      expect((await hot.get("w1"))?.stepIndex).toBe(1);
    });
    expect(warnings).toEqual([]);
  });

  it("allowEviction: true accepts it with one process warning per connection", async () => {
    for (const s of stores(lru.url, { allowEviction: true })) {
      const warnings = await evictionWarnings(async () => {
        await s.call();
        await s.call(); // the same connection: no second warning
      });
      expect(warnings, s.name).toHaveLength(1);
      expect(warnings[0]).toMatch(/maxmemory-policy allkeys-lru/);
    }
    // noeviction: accepted without a warning
    const ok = await start(["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"]);
    const quiet = await evictionWarnings(async () => {
      for (const s of stores(ok.url)) await s.call();
    });
    expect(quiet).toEqual([]);
  });

  it("CONFIG renamed away (managed Redis): the policy is read from INFO memory", async () => {
    const raw = admin(noConfig.url);
    await expect(raw.config("GET", "maxmemory-policy")).rejects.toThrow(/unknown command/i);
    for (const s of stores(noConfig.url)) {
      const e = await s.call().catch((x: unknown) => x);
      expect(e, s.name).toBeInstanceOf(InvalidOptionError);
      expect(String((e as Error).message)).toMatch(/maxmemory-policy volatile-lru/);
    }
    // an injected client of the backend's small shape (no config, no info): INFO through a script
    const raw2 = admin(noConfig.url);
    const client = {
      evalsha: (...a: Parameters<Redis["evalsha"]>) => raw2.evalsha(...a),
      eval: (...a: Parameters<Redis["eval"]>) => raw2.eval(...a),
      scan: (...a: [string, "MATCH", string, "COUNT", number, "TYPE", string]) => raw2.scan(...a),
    };
    const injected = new RedisBackend({ client });
    await expect(injected.save("k2", makeState(history))).rejects.toThrow(/option allowEviction.*volatile-lru/);
    expect(await raw2.exists("duas:k2")).toBe(0);
  });

  it("allowEviction is a boolean of each source-of-truth store, not of the cache", () => {
    for (const allowEviction of [true, false]) {
      expect(() => new RedisBackend({ url: lru.url, allowEviction })).not.toThrow();
      expect(() => new RedisJournal({ url: lru.url, allowEviction })).not.toThrow();
      expect(() => new RedisRunStream({ url: lru.url, allowEviction })).not.toThrow();
      expect(() => new RedisSaverStorage({ url: lru.url, allowEviction })).not.toThrow();
    }
    for (const make of [
      () => new RedisBackend({ url: lru.url, allowEviction: "yes" as never }),
      () => new RedisJournal({ url: lru.url, allowEviction: 1 as never }),
      () => new RedisRunStream({ url: lru.url, allowEviction: null as never }),
      () => new RedisSaverStorage({ url: lru.url, allowEviction: "true" as never }),
    ]) {
      expect(make).toThrow(InvalidOptionError);
      expect(make).toThrow(/option allowEviction: must be true or false/);
    }
    // a cache does not take the option
    expect(() => new RedisHotTier({ url: lru.url, allowEviction: true } as never)).toThrow(InvalidOptionError);
  });
});

describe.skipIf(noBinary)("a durable run whose keys vanished never runs a completed step again", () => {
  it("evicted under memory pressure: the next runDurable is a JournalIntegrityError, no step re-executed", async () => {
    const server = await start([
      "--maxmemory",
      "4mb",
      "--maxmemory-policy",
      "allkeys-lru",
      "--maxmemory-samples",
      "64",
    ]);
    const raw = admin(server.url);
    const journal = track(new RedisJournal({ url: server.url, allowEviction: true }));
    const runs = new Map<string, number>();
    const wf = async () => {
      const a = await step("charge", () => {
        runs.set("charge", (runs.get("charge") ?? 0) + 1);
        return 10;
      });
      const b = await step("ship", () => {
        runs.set("ship", (runs.get("ship") ?? 0) + 1);
        return 20;
      });
      const go = await waitForSignal<number>("go");
      return a + b + go;
    };
    const runId = `order-${randomUUID()}`;
    const first = await evictionWarnings(() => runDurable(runId, wf, { journal, input: { amount: 10 } }));
    expect(first).toHaveLength(1);
    expect(await journal.getRun(runId)).toMatchObject({ status: "waiting" });
    expect(Object.fromEntries(runs)).toEqual({ charge: 1, ship: 1 });

    // Redis's LRU clock ticks once a second. The run waits; later other data fills memory to just below
    // maxmemory; later still the app keeps working (other runs start: the journal's indexes are the
    // newest keys), and more data comes: Redis evicts the least recently used keys, the waiting run's
    // first. Every key is sampled at each eviction (few keys, maxmemory-samples 64); EXISTS touches none.
    const tick = () => new Promise((r) => setTimeout(r, 1100));
    const used = async () => Number(/used_memory:(\d+)/.exec(await raw.info("memory"))?.[1]);
    const value = "x".repeat(300_000);
    await tick();
    let n = 0;
    while ((await used()) < 4 * 1024 * 1024 - 700_000) await raw.set(`fill:${n++}`, value);
    expect(await raw.exists(`dumplings:durable:{${runId}}:run`)).toBe(1); // nothing evicted yet
    await tick();
    const runKey = `dumplings:durable:{${runId}}:run`;
    let evicted = false;
    for (let i = 0; i < 20 && !evicted; i++) {
      await journal.createRun({ runId: `other-${i}`, workflow: "w", input: null });
      await raw.set(`more:${i}`, value);
      evicted = (await raw.exists(runKey)) === 0;
    }
    expect(evicted).toBe(true);
    expect(await raw.zscore("dumplings:durable:runs", runId)).not.toBeNull(); // the journal's index of its runs

    const e = await runDurable(runId, wf, { journal, input: { amount: 10 } }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(JournalIntegrityError);
    expect(e).toMatchObject({ code: "JOURNAL_INTEGRITY", runId });
    expect(String((e as Error).message)).toMatch(/keys are gone/);
    expect(Object.fromEntries(runs)).toEqual({ charge: 1, ship: 1 }); // zero duplicate executions
    expect(await raw.exists(runKey)).toBe(0); // and it was not created again

    // deleting it on purpose makes the id free again
    await journal.deleteRun(runId);
    await raw.flushdb(); // room for the new run
    const again = await runDurable(runId, wf, { journal, input: { amount: 10 } });
    expect(again.status).toBe("waiting");
    expect(Object.fromEntries(runs)).toEqual({ charge: 2, ship: 2 });
  });

  it("its step records alone vanished: the lease is refused, no step re-executed", async () => {
    const server = await start([]);
    const raw = admin(server.url);
    const journal = track(new RedisJournal({ url: server.url }));
    let charges = 0;
    const wf = async () => {
      await step("charge", () => ++charges);
      return waitForSignal<number>("go");
    };
    const runId = `order-${randomUUID()}`;
    expect((await runDurable(runId, wf, { journal, input: 1 })).status).toBe("waiting");
    await raw.del(`dumplings:durable:{${runId}}:steps`, `dumplings:durable:{${runId}}:stepmeta`);
    const e = await runDurable(runId, wf, { journal, input: 1 }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(JournalIntegrityError);
    expect(String((e as Error).message)).toMatch(/step records #0…#\d+ are gone/);
    expect(charges).toBe(1);
  });
});

describe.skipIf(noBinary)("a session save is checked against its header, and all or nothing", () => {
  let server: PrivateRedis;
  beforeAll(async () => {
    server = await start([]);
  });

  it("a history list that vanished: the next append fails with FormatError, nothing written", async () => {
    const raw = admin(server.url);
    const b = track(new RedisBackend({ url: server.url, keyPrefix: `s-${randomUUID()}:` }));
    const { revision } = await b.write("chat", makeState(history), { expectedRevision: null });
    await raw.del(`${b.keyPrefix}chat/history`); // evicted
    const next = makeState([...history, { role: "user", content: "and now?" }]);
    const e = await b
      .write("chat", next, { expectedRevision: revision, baseLength: history.length })
      .catch((x: unknown) => x);
    expect(e).toBeInstanceOf(FormatError);
    expect(String((e as Error).message)).toMatch(/"chat" has 0 messages, header says 2/);
    expect(await raw.exists(`${b.keyPrefix}chat/history`)).toBe(0);
    expect(await raw.hget(`${b.keyPrefix}chat`, "rev")).toBe(String(revision));
  });

  it("a TTL command that fails (ACL) leaves nothing written: a new session, and an append", async () => {
    const raw = admin(server.url);
    await raw.call("ACL", "SETUSER", "nopexpire", "on", ">pw", "~*", "&*", "+@all", "-pexpire");
    const keyPrefix = `t-${randomUUID()}:`;
    const url = server.url.replace("redis://", "redis://nopexpire:pw@");
    const b = track(new RedisBackend({ url, keyPrefix, ttlMs: 60_000 }));
    const e1 = await b.save("new", makeState(history)).catch((x: unknown) => x);
    expect(e1).toBeInstanceOf(BackendError);
    expect(String((e1 as Error).message)).toMatch(/can't run this command/);
    expect(await raw.exists(`${keyPrefix}new`, `${keyPrefix}new/history`)).toBe(0);
    // the run stream's append too: refused, nothing appended (a retry would have doubled the event)
    const stream = track(new RedisRunStream({ url, keyPrefix, ttlMs: 60_000 }));
    await expect(stream.append("r1", { type: "token", text: "a" })).rejects.toBeInstanceOf(BackendError);
    expect(await raw.exists(`${keyPrefix}{r1}:events`, `${keyPrefix}{r1}:n`)).toBe(0);

    // an existing session (written by a user allowed to set TTLs), appended to by the refused one
    const full = track(new RedisBackend({ url: server.url, keyPrefix, ttlMs: 60_000 }));
    const { revision } = await full.write("old", makeState(history), { expectedRevision: null });
    const next = makeState([...history, { role: "user", content: "more" }]);
    const e2 = await b
      .write("old", next, { expectedRevision: revision, baseLength: history.length })
      .catch((x: unknown) => x);
    expect(e2).toBeInstanceOf(BackendError);
    expect(await raw.llen(`${keyPrefix}old/history`)).toBe(2);
    expect(await raw.hget(`${keyPrefix}old`, "rev")).toBe(String(revision));
    // so the writer's retry (by one allowed to) is no ConflictError: the failed save did not land
    const r = await full.write("old", next, { expectedRevision: revision, baseLength: history.length });
    expect(r.revision).toBe(revision + 1);
    const ttls = [await raw.pttl(`${keyPrefix}old`), await raw.pttl(`${keyPrefix}old/history`)];
    expect(ttls.every((t) => t > 50_000)).toBe(true);
  });
});
