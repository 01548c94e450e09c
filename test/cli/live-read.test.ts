/**
 * Reads of a live session: `show` and `export` read the header and then stream
 * the history; a save landing between the two reads used to pair the header of
 * one revision with the history of the next (a false "message_count = N but
 * its history holds N+1" FormatError, or a header and history of two states).
 * Every read here must be exactly one saved state, on every store, while a
 * writer saves after every message.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { RedisBackend } from "../../src/backends/redis.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend, WriteOptions } from "../../src/backends/types.js";
import { decodeState } from "../../src/core/codec/bytes.js";
import type { Message } from "../../src/core/messages.js";
import { openSession, readSession } from "../../src/ops/sessions.js";
import { stateAt } from "../fixtures/crash/file-history.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { runCli } from "./run-cli.js";

const dirs: string[] = [];
const tmp = (p: string) => {
  const d = mkdtempSync(path.join(os.tmpdir(), p));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/**
 * Reads `key` as show does for `ms`, and on (up to 20 s) until `enough()` (the writer saved enough
 * meanwhile: a loaded machine slows it down), checking each read is one saved state; returns the
 * number of reads.
 */
async function readWhileSaving(
  backend: StateBackend,
  key: string,
  ms: number,
  enough: () => boolean = () => true,
): Promise<number> {
  let reads = 0;
  const until = Date.now() + ms;
  const last = Date.now() + 20_000;
  while (Date.now() < until || (!enough() && Date.now() < last)) {
    const got = await readSession(backend, key, undefined, async (session) => {
      const history: Message[] = [];
      for await (const m of session.history) history.push(m);
      return { header: session.header, history };
    });
    const n = got.history.length;
    expect(got.header.meta.messageCount).toBe(n);
    const expected = stateAt(n);
    expect(got.header.state).toEqual(expected.state);
    expect(got.history).toEqual(expected.history);
    reads++;
    // A read of the memory store never leaves the microtask queue: let the in-process writer's
    // setImmediate run between reads, or it never saves again.
    await new Promise((r) => setImmediate(r));
  }
  return reads;
}

/**
 * Starts a writer fixture (`test/fixtures/<fixture>`, printing `ack …` after each save) in a process
 * of its own and waits for its first `ready` saves; `kill()` SIGKILLs it.
 */
async function childWriter(fixture: string, args: string[], ready: number) {
  const file = fileURLToPath(new URL(`../fixtures/${fixture}`, import.meta.url));
  const child = spawn(process.execPath, ["--import", "tsx", file, ...args], { stdio: ["ignore", "pipe", "inherit"] });
  let acks = 0;
  child.stdout.on("data", (d: Buffer) => {
    acks += String(d)
      .split("\n")
      .filter((l) => l.startsWith("ack")).length;
  });
  for (let i = 0; i < 1500 && acks < ready; i++) await new Promise((r) => setTimeout(r, 20));
  return {
    get acks() {
      return acks;
    },
    kill: () => child.kill("SIGKILL"),
  };
}

/** Saves stateAt(n) after every message from n = `from` (appends, every 10th a whole write) until `stop()`. */
function inProcessWriter(backend: StateBackend, key: string, from = 1) {
  let stopped = false;
  let saves = 0;
  const done = (async () => {
    const write = backend.write?.bind(backend);
    if (!write) throw new Error("no write");
    let revision: number | null = null;
    for (let n = from; !stopped; n++) {
      const options: WriteOptions =
        n % 10 === 0 || n === from ? { expectedRevision: revision } : { expectedRevision: revision, baseLength: n - 1 };
      revision = (await write(key, stateAt(n), options)).revision;
      saves++;
      await new Promise((r) => setImmediate(r));
    }
  })();
  return {
    get saves() {
      return saves;
    },
    async stop() {
      stopped = true;
      await done;
    },
  };
}

describe("a live session read while it is saved is one saved state", () => {
  const stores: [string, () => Promise<StateBackend | string>][] = [
    ["memory", async () => new MemoryBackend()],
    ["sqlite", async () => new SQLiteBackend({ path: path.join(tmp("live-sqlite-"), "s.db") })],
    [
      "postgres",
      async () =>
        (await postgresSkipReason()) ??
        new PostgresBackend({ connectionString: DATABASE_URL, schema: `live_${process.pid}`, maxConnections: 4 }),
    ],
    [
      "redis",
      async () => (await redisSkipReason()) ?? new RedisBackend({ url: REDIS_URL, keyPrefix: `live-${process.pid}:` }),
    ],
  ];
  for (const [name, make] of stores) {
    it(`${name}: show's read during saves`, async (ctx) => {
      const made = await make();
      if (typeof made === "string") return ctx.skip(made);
      const backend = made;
      const key = `live-${Date.now()}`;
      const writer = inProcessWriter(backend, key);
      try {
        while (writer.saves < 2) await new Promise((r) => setTimeout(r, 5));
        expect(await readWhileSaving(backend, key, 1500, () => writer.saves > 10)).toBeGreaterThan(5);
        expect(writer.saves).toBeGreaterThan(10);
      } finally {
        await writer.stop();
        await backend.delete(key);
        await backend.close?.();
      }
    }, 30_000);
  }

  it("sqlite: a history longer than a page, appended to while it is read page by page, is still read", async () => {
    const backend = new SQLiteBackend({ path: path.join(tmp("live-sqlite-pages-"), "s.db") });
    const writer = inProcessWriter(backend, "long", 1500);
    try {
      while (writer.saves < 2) await new Promise((r) => setTimeout(r, 5));
      expect(await readWhileSaving(backend, "long", 1500)).toBeGreaterThan(2);
    } finally {
      await writer.stop();
      backend.close();
    }
  }, 30_000);

  it("file: show's read during another process's saves (appends, in-place headers, whole rewrites)", async () => {
    const dir = tmp("live-file-");
    const writer = await childWriter("crash/file-writer.ts", [dir, "k"], 2);
    try {
      const backend = new FileBackend({ baseDir: dir });
      expect(await readWhileSaving(backend, "k", 3000, () => writer.acks > 10)).toBeGreaterThan(5);
      expect(writer.acks).toBeGreaterThan(10);
      // `dumplings export` and `show` of the live session: a valid file of one saved state, exit 0
      for (let i = 0; i < 3; i++) {
        const out = path.join(dir, `out-${i}.duas`);
        const r = runCli(["export", "k", "--dir", dir, "-o", out]);
        expect(r.code, r.stderr).toBe(0);
        const state = decodeState(readFileSync(out, "utf8"));
        expect(state).toEqual(stateAt(state.history.length));
        const s = runCli(["show", "k", "--dir", dir, "--json"]);
        expect(s.code, s.stderr).toBe(0);
        const shown = JSON.parse(s.stdout) as { meta: { messageCount: number }; messages: { total: number } };
        expect(shown.messages.total).toBe(shown.meta.messageCount);
      }
    } finally {
      writer.kill();
    }
  }, 60_000);

  it("sqlite: `dumplings export -o -` and `-o FILE` of a 1,500-message session another process rewrites and appends to: a whole saved state or nothing, never a truncated file", async () => {
    const db = path.join(tmp("live-export-"), "s.db");
    const writer = await childWriter("live-writer.ts", [`sqlite:${db}`, "k", "1500"], 3);
    try {
      for (let i = 0; i < 4; i++) {
        const out = runCli(["export", "k", "--backend", `sqlite:${db}`, "-o", "-"]);
        expect(out.code, out.stderr).toBe(0);
        const state = decodeState(out.stdout);
        expect(state).toEqual(stateAt(state.history.length));
        const file = path.join(path.dirname(db), `out-${i}.duas`);
        const r = runCli(["export", "k", "--backend", `sqlite:${db}`, "-o", file]);
        expect(r.code, r.stderr).toBe(0);
        const saved = decodeState(readFileSync(file, "utf8"));
        expect(saved).toEqual(stateAt(saved.history.length));
      }
      // runCli blocks this event loop: let the writer's buffered acks arrive before counting them
      await new Promise((r) => setTimeout(r, 200));
      expect(writer.acks).toBeGreaterThan(3);
    } finally {
      writer.kill();
    }
  }, 90_000);

  it("openSession with a revision the session no longer has is a ConflictError; without one it reads the new one", async () => {
    const backend = new FileBackend({ baseDir: tmp("live-pin-") });
    const first = await backend.write("k", stateAt(3), { expectedRevision: null });
    await backend.write("k", stateAt(4), { expectedRevision: first.revision, baseLength: 3 });
    await expect(openSession(backend, "k", undefined, { revision: first.revision })).rejects.toMatchObject({
      code: "CONFLICT",
    });
    const now = await openSession(backend, "k");
    expect(now.revision).toBe(first.revision + 1);
    const got: Message[] = [];
    for await (const m of now.history) got.push(m);
    expect(got).toEqual(stateAt(4).history);
  });
});
