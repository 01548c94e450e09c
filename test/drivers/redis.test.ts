/**
 * The Redis driver as every Redis component sees it: one option vocabulary
 * (the same InvalidOptionError for a bad URL or timeout from each component,
 * deprecated aliases), a dead Redis as a typed BackendError within the
 * connect timeout and never an unhandled error, an injected client left open
 * and owned ones closed (counted on a private redis-server), `unix:` URLs.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { RedisBackend } from "../../src/backends/redis.js";
import { BackendError, InvalidOptionError } from "../../src/core/errors.js";
import { withTimeout } from "../../src/drivers/redis.js";
import { RedisHotTier } from "../../src/durable/checkpoints/hot-redis.js";
import type { Journal } from "../../src/durable/journal.js";
import { RedisJournal } from "../../src/durable/journal-redis.js";
import { RedisRunStream } from "../../src/durable/stream.js";
import { DurableQueue, DurableWorker } from "../../src/durable/worker.js";
import { makeState } from "../../src/testing/states.js";
import { type PrivateRedis, redisServerBinary, startRedis } from "../helpers/redis-server.js";
import { REDIS_URL, redisSkipReason, SERVICES_REQUIRED } from "../helpers/services.js";

const skip = await redisSkipReason();
const noBinary = redisServerBinary() ? undefined : "redis-server binary not installed";
if (noBinary && SERVICES_REQUIRED) throw new Error(`${noBinary} and DUMPLINGS_REQUIRE_SERVICES=1`);

/** Nothing listens on port 1: every connection attempt is refused. */
const DEAD = "redis://127.0.0.1:1";
const noJournal = {} as Journal;

type Options = Record<string, unknown>;
/** Each Redis component, built from the shared connection options. */
const COMPONENTS: Record<string, (o: Options) => { close(): Promise<void> }> = {
  RedisBackend: (o) => new RedisBackend(o),
  RedisHotTier: (o) => new RedisHotTier(o),
  RedisJournal: (o) => new RedisJournal(o),
  RedisRunStream: (o) => new RedisRunStream(o),
  DurableQueue: (o) => new DurableQueue({ journal: noJournal, ...o }),
};

function invalidOption(make: () => unknown): InvalidOptionError {
  let error: unknown;
  try {
    const made = make() as { close?: () => Promise<void> };
    void made.close?.();
  } catch (e) {
    error = e;
  }
  expect(error).toBeInstanceOf(InvalidOptionError);
  const e = error as InvalidOptionError;
  expect(e.code).toBe("INVALID_OPTION");
  expect(e.component).toBe("redis");
  return e;
}

describe("Redis connection options: one vocabulary, one error", () => {
  const badUrls = [
    "http://127.0.0.1:6379",
    "not a url",
    "",
    "redis://",
    "127.0.0.1:6379",
    "redis://127.0.0.1:6379/zero",
    "unix:",
  ];
  const badTimeouts: unknown[] = [0, -1, Number.NaN, Number.POSITIVE_INFINITY, "1000"];

  for (const [name, make] of Object.entries(COMPONENTS)) {
    it(`${name}: a malformed URL and a bad timeout are InvalidOptionError (option url / …TimeoutMs)`, () => {
      for (const url of badUrls) expect(invalidOption(() => make({ url })).option).toBe("url");
      for (const t of badTimeouts) {
        expect(invalidOption(() => make({ url: DEAD, connectTimeoutMs: t })).option).toBe("connectTimeoutMs");
        expect(invalidOption(() => make({ url: DEAD, commandTimeoutMs: t })).option).toBe("commandTimeoutMs");
      }
    });
  }

  it("a malformed REDIS_URL is refused by name, read when the component is constructed", () => {
    const saved = process.env.REDIS_URL;
    process.env.REDIS_URL = "http://wrong:6379";
    try {
      for (const make of Object.values(COMPONENTS)) {
        const e = invalidOption(() => make({}));
        expect(e.option).toBe("url");
        expect(e.message).toContain("REDIS_URL");
      }
    } finally {
      if (saved === undefined) delete process.env.REDIS_URL;
      else process.env.REDIS_URL = saved;
    }
  });

  it("the password of a refused URL is not repeated in the message", () => {
    const e = invalidOption(() => new RedisBackend({ url: "http://user:s3cret@host:6379" }));
    expect(e.message).not.toContain("s3cret");
  });

  it("a TTL that is not a positive number of ms is InvalidOptionError too (backend and hot tier)", () => {
    expect(invalidOption(() => new RedisBackend({ url: DEAD, ttlMs: -1 })).option).toBe("ttlMs");
    expect(invalidOption(() => new RedisHotTier({ url: DEAD, ttlMs: 0 })).option).toBe("ttlMs");
    expect(invalidOption(() => new RedisRunStream({ url: DEAD, blockMs: Number.NaN })).option).toBe("blockMs");
  });

  it("old option names are deprecated aliases; both given and different is InvalidOptionError", async () => {
    expect(invalidOption(() => new RedisJournal({ url: DEAD, prefix: "a:", keyPrefix: "b:" })).option).toBe(
      "keyPrefix",
    );
    expect(invalidOption(() => new RedisRunStream({ url: DEAD, prefix: "a:", keyPrefix: "b:" })).option).toBe(
      "keyPrefix",
    );
    expect(
      invalidOption(() => new DurableQueue({ journal: noJournal, redisUrl: DEAD, url: "redis://127.0.0.1:2" })).option,
    ).toBe("url");
    expect(
      invalidOption(() => new DurableQueue({ journal: noJournal, url: DEAD, prefix: "x", keyPrefix: "y" })).option,
    ).toBe("keyPrefix");
    // The same value under both names is accepted.
    const same = [
      new RedisJournal({ url: DEAD, prefix: "a:", keyPrefix: "a:" }),
      new RedisRunStream({ url: DEAD, prefix: "a:", keyPrefix: "a:" }),
      new DurableQueue({ journal: noJournal, redisUrl: DEAD, url: DEAD }),
    ];
    for (const c of same) await c.close();
  });
});

describe("a command Redis does not answer in time", () => {
  it("fails after commandTimeoutMs with a message naming the option to raise", async () => {
    const never = new Promise<never>(() => {});
    await expect(withTimeout(never, 20)).rejects.toThrow(/within 20 ms \(commandTimeoutMs: raise it/);
    expect(await withTimeout(Promise.resolve(7), 20)).toBe(7);
  });
});

describe("a dead Redis: typed BackendError within the connect timeout, nothing unhandled", () => {
  const unhandled: unknown[] = [];
  const onUnhandled = (e: unknown) => unhandled.push(e);
  beforeAll(() => {
    process.on("unhandledRejection", onUnhandled);
    process.on("uncaughtException", onUnhandled);
  });
  afterAll(() => {
    process.off("unhandledRejection", onUnhandled);
    process.off("uncaughtException", onUnhandled);
  });
  afterEach(() => vi.restoreAllMocks());

  const CONNECT_MS = 300;
  const options = { url: DEAD, connectTimeoutMs: CONNECT_MS, commandTimeoutMs: CONNECT_MS };

  /** Runs `fn`, expecting a BackendError of backend `redis`; returns it and how long it took. */
  async function fails(fn: () => Promise<unknown>): Promise<{ error: BackendError; ms: number }> {
    const started = performance.now();
    const error = await fn().then(
      () => undefined,
      (e: unknown) => e,
    );
    const ms = performance.now() - started;
    expect(error).toBeInstanceOf(BackendError);
    expect((error as BackendError).backend).toBe("redis");
    return { error: error as BackendError, ms };
  }

  /** Two calls that need Redis: after `first` has waited for it, `again` knows it is down and fails at once. */
  interface Calls {
    first: () => Promise<unknown>;
    again: () => Promise<unknown>;
    close(): Promise<void>;
  }
  const ops: Record<string, () => Calls> = {
    RedisBackend: () => {
      const b = new RedisBackend(options);
      return { first: () => b.load("k1"), again: () => b.save("k1", makeState([])), close: () => b.close() };
    },
    RedisHotTier: () => {
      const h = new RedisHotTier(options);
      return {
        first: () => h.put("k1", { stepIndex: 0, stateJson: "{}" }),
        again: () => h.get("k1"),
        close: () => h.close(),
      };
    },
    RedisJournal: () => {
      const j = new RedisJournal(options);
      return {
        first: () => j.createRun({ runId: "k1", workflow: "w", input: null }),
        again: () => j.getRun("k1"),
        close: () => j.close(),
      };
    },
    RedisRunStream: () => {
      const s = new RedisRunStream(options);
      return {
        first: () => s.append("k1", { type: "token" }),
        // A subscription reads on a connection of its own; Redis is known down, so it fails at once too.
        again: async () => {
          for await (const _ of s.subscribe("k1")) break;
        },
        close: () => s.close(),
      };
    },
    DurableQueue: () => {
      const q = new DurableQueue({ journal: noJournal, ...options });
      return { first: () => q.wake("k1"), again: () => q.jobCounts(), close: () => q.close() };
    },
    DurableWorker: () => {
      const w = new DurableWorker({ journal: noJournal, workflows: {}, ...options });
      // start() makes the worker's connection; the queue side (wake) is known down after its first call.
      return {
        first: async () => {
          await fails(() => w.start());
          return w.wake("k1");
        },
        again: () => w.wake("k2"),
        close: () => w.close(),
      };
    },
  };

  for (const [name, make] of Object.entries(ops)) {
    it(`${name}: the first call fails typed within the bound, the next at once; no unhandled error, no ioredis stack trace`, async () => {
      const printed: string[] = [];
      for (const level of ["error", "warn"] as const) {
        vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
          printed.push(args.map(String).join(" "));
        });
      }
      const c = make();
      try {
        const first = await fails(c.first);
        expect(first.error.key).toBe("k1");
        expect(first.error.message).toMatch(/not connected to Redis within 300 ms.*ECONNREFUSED/);
        expect(first.ms).toBeLessThan(2 * CONNECT_MS + 1500);
        const again = await fails(c.again);
        expect(again.ms, "known down: fail at once").toBeLessThan(CONNECT_MS);
        // Let ioredis try to reconnect a few times: its errors must stay handled.
        await new Promise((r) => setTimeout(r, 600));
      } finally {
        await c.close();
      }
      expect(unhandled).toEqual([]);
      expect(printed.filter((line) => /ioredis|Unhandled error/i.test(line))).toEqual([]);
    });
  }
});

describe.skipIf(!!skip)(`injected clients are left open${skip ? ` (skipped: ${skip})` : ""}`, () => {
  let client: Redis;
  beforeAll(() => {
    client = new Redis(REDIS_URL);
  });
  afterAll(() => client.disconnect());

  it("close() of each component leaves the caller's client connected and usable", async () => {
    const keyPrefix = `test:driver:${process.pid}:${Date.now().toString(36)}:`;
    const backend = new RedisBackend({ client, keyPrefix });
    await backend.save("k", makeState([{ role: "user", content: "hi" }]));
    await backend.delete("k");
    const hot = new RedisHotTier({ client, keyPrefix });
    expect(await hot.waitReady()).toBe(true);
    await hot.put("w", { stepIndex: 1, stateJson: "{}" });
    await hot.delete("w");
    const journal = new RedisJournal({ client, keyPrefix });
    await journal.createRun({ runId: "r", workflow: "w", input: null });
    await journal.clear();
    const stream = new RedisRunStream({ client, keyPrefix, blockMs: 50 });
    await stream.append("r", 1);
    for await (const e of stream.subscribe("r")) {
      expect(e.index).toBe(1);
      break;
    }
    await stream.delete("r");
    for (const c of [backend, hot, journal, stream]) {
      await c.close();
      expect(client.status).toBe("ready");
      expect(await client.ping()).toBe("PONG");
    }
    // A closed component refuses further calls with a typed error.
    await expect(journal.getRun("r")).rejects.toBeInstanceOf(BackendError);
    await expect(backend.load("k")).rejects.toThrow(/closed/);
    // What is left is the backend's revision floor (a deleted session's writers must not match the next one).
    expect(await client.keys(`${keyPrefix}*`)).toEqual([`${keyPrefix}/revision-floor`]);
    expect(await client.get(`${keyPrefix}/revision-floor`)).toBe("1");
    await client.del(`${keyPrefix}/revision-floor`);
  });
});

describe.skipIf(!!noBinary)(`owned clients are closed${noBinary ? ` (skipped: ${noBinary})` : ""}`, () => {
  let server: PrivateRedis;
  let admin: Redis;
  beforeAll(async () => {
    server = await startRedis();
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    admin?.disconnect();
    await server?.kill();
  });

  /** Connections the server sees besides the admin's. */
  async function others(): Promise<number> {
    const list = String(await admin.client("LIST"))
      .trim()
      .split("\n");
    return list.length - 1;
  }
  async function settlesAt(n: number): Promise<void> {
    for (let i = 0; i < 100 && (await others()) !== n; i++) await new Promise((r) => setTimeout(r, 20));
    expect(await others()).toBe(n);
  }

  it("each component's own connections are opened on use and closed by close()", async () => {
    const url = server.url;
    const backend = new RedisBackend({ url });
    const hot = new RedisHotTier({ url });
    const journal = new RedisJournal({ url });
    const stream = new RedisRunStream({ url, blockMs: 50 });
    const worker = new DurableWorker({ journal, url, queueName: "driver-test", workflows: {} });
    await settlesAt(1); // only the worker's queue connects at construction (BullMQ's own first write)
    await backend.save("k", makeState([]));
    await hot.put("w", { stepIndex: 0, stateJson: "{}" });
    await journal.createRun({ runId: "r", workflow: "w", input: null });
    await stream.append("r", 1);
    await worker.start();
    expect(await others()).toBeGreaterThanOrEqual(6);
    for (const c of [backend, hot, stream, worker, journal]) await c.close();
    await settlesAt(0);
    expect(journal.client.status).toBe("end");
    expect(hot.client.status).toBe("end");
  });

  it("a subscription's reader connection is closed when the subscription ends", async () => {
    const stream = new RedisRunStream({ url: server.url, blockMs: 50 });
    await stream.append("r2", 1);
    await settlesAt(1);
    for await (const _ of stream.subscribe("r2")) {
      expect(await others()).toBe(2);
      break;
    }
    await settlesAt(1);
    await stream.close();
    await settlesAt(0);
  });
});

describe.skipIf(!!noBinary)(`unix: URLs${noBinary ? ` (skipped: ${noBinary})` : ""}`, () => {
  let dir: string;
  let child: ChildProcess;
  let socket: string;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), "dumplings-redis-unix-"));
    socket = path.join(dir, "redis.sock");
    child = spawn(
      "redis-server",
      ["--port", "0", "--unixsocket", socket, "--save", "", "--appendonly", "no", "--dir", dir],
      { stdio: "ignore" },
    );
    for (let i = 0; i < 100 && !existsSync(socket); i++) await new Promise((r) => setTimeout(r, 50));
  });
  afterAll(() => {
    child?.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  });

  it("a component connects through unix:/path?db=N", async () => {
    const backend = new RedisBackend({ url: `unix:${socket}?db=3` });
    await backend.save("k", makeState([{ role: "user", content: "over a socket" }]));
    expect((await backend.load("k")).history).toEqual([{ role: "user", content: "over a socket" }]);
    await backend.close();
    const raw = new Redis({ path: socket, db: 3 });
    expect(await raw.exists("duas:k")).toBe(1);
    raw.disconnect();
  });
});

describe.skipIf(!!skip)("a database number the server refuses", () => {
  it("is an InvalidOptionError on every call of every component, and database 0 is never read or written", async () => {
    const prefix = `test:dbrange:${Date.now()}:`;
    const base = new URL(REDIS_URL);
    base.pathname = "/0";
    const zero = new RedisBackend({ url: base.href, keyPrefix: prefix });
    await zero.save("k", makeState([{ role: "user", content: "hi" }]));
    base.pathname = "/99"; // a default server has 16 databases
    const wrong = new RedisBackend({ url: base.href, keyPrefix: prefix });
    await expect(wrong.listKeys()).rejects.toBeInstanceOf(InvalidOptionError);
    await expect(wrong.delete("k")).rejects.toMatchObject({ code: "INVALID_OPTION", option: "url" });
    await expect(wrong.listKeys()).rejects.toThrow(/names database 99, which this server refuses/);
    const journal = new RedisJournal({ url: base.href, keyPrefix: prefix });
    await expect(journal.listRuns()).rejects.toBeInstanceOf(InvalidOptionError);
    expect(await zero.listKeys()).toEqual(["k"]);
    await zero.delete("k");
    await Promise.all([wrong.close?.(), journal.close(), zero.close?.()]);
  });
});
