/**
 * One set of rules for what a stored message / stored JSON value may be
 * (core/json.ts, core/state.ts), applied on write and on every read path
 * (load, `iterHistory`, `readHeader` as `dumplings show` uses it) of every
 * backend: file, SQLite, Redis, PostgreSQL, memory.
 *
 * - nesting deeper than MAX_JSON_DEPTH: a NonJsonValueError on save, a
 *   FormatError on read — never an untyped RangeError or a BACKEND_ERROR;
 * - `1e400` (Infinity once parsed): a FormatError naming the key and path;
 * - `-0` (valid JSON): read as 0, so the loaded agent can be saved again;
 * - a message that does not match the history's protocol (`{"role":"robot"}`): a FormatError;
 * - an unknown format version: a FormatError on load and on a header read.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { RedisBackend } from "../../src/backends/redis.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend } from "../../src/backends/types.js";
import { encodeState } from "../../src/core/codec/encode.js";
import { FormatError, NonJsonValueError } from "../../src/core/errors.js";
import { MAX_JSON_DEPTH } from "../../src/core/json.js";
import type { Message } from "../../src/core/messages.js";
import { BaseAgent, iterHistory, loadState, saveState } from "../../src/index.js";
import { makeState } from "../../src/testing/states.js";
import { runCli } from "../cli/run-cli.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";

const redisSkip = await redisSkipReason();
const postgresSkip = await postgresSkipReason();
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-rules-"));

/** `[[[…1…]]]` nested `levels` arrays deep, as JSON text (JSON.parse reads it; JSON.stringify of it would overflow). */
const deepText = (levels: number) => `${"[".repeat(levels)}1${"]".repeat(levels)}`;
const deepValue = (levels: number): unknown => {
  let v: unknown = 1;
  for (let i = 0; i < levels; i++) v = [v];
  return v;
};

/** A stored message body: `{"role":"user","content":"hi","x":<raw>}`. */
const bodyWith = (raw: string) => `{"role":"user","content":"hi","x":${raw}}`;

/** How a test reaches a store's raw data behind the backend's back. */
interface Harness {
  name: string;
  skip?: string;
  backend: () => StateBackend;
  /** Replaces the JSON text of message `index` of `key`. */
  setMessage: (b: StateBackend, key: string, index: number, text: string) => Promise<void>;
  /** Replaces the JSON text of `meta` of `key`. */
  setMeta: (b: StateBackend, key: string, text: string) => Promise<void>;
  /** CLI options that open the same store. */
  cli?: (b: StateBackend) => string[];
  close: () => Promise<void>;
}

const base = () => makeState([{ role: "user", content: "one" } as Message, { role: "assistant", content: "two" }]);

const harnesses: Harness[] = [];

{
  const dir = path.join(tmp, "files");
  /** The file backend reads text written by the codec (no integrity lines): edit it as a person would. */
  const rewrite = (key: string, edit: (s: ReturnType<typeof base>) => string) =>
    writeFileSync(path.join(dir, `${key}.duas`), edit(base()));
  harnesses.push({
    name: "file",
    backend: () => new FileBackend({ baseDir: dir }),
    async setMessage(_b, key, index, text) {
      rewrite(key, (s) => {
        const lines = encodeState(s).split("\n");
        const first = lines.indexOf("[HISTORY]") + 1;
        lines[first + index] = text;
        return lines.join("\n");
      });
    },
    async setMeta(_b, key, text) {
      const meta = JSON.parse(text) as { formatVersion: string };
      rewrite(key, (s) =>
        encodeState(s)
          .replace("# format: duagent-state/1.0", `# format: duagent-state/${meta.formatVersion}`)
          .replace("format_version = 1.0", `format_version = ${meta.formatVersion}`),
      );
    },
    cli: () => ["--dir", dir],
    close: async () => undefined,
  });
}

{
  const file = path.join(tmp, "rules.db");
  const raw = () => new Database(file);
  harnesses.push({
    name: "sqlite",
    backend: () => new SQLiteBackend({ dbPath: file }),
    async setMessage(_b, key, index, text) {
      const db = raw();
      // A message's id is `(sid << 32) | seq`.
      db.prepare("UPDATE messages SET body = ? WHERE id = ((SELECT sid FROM sessions WHERE key = ?) << 32) | ?").run(
        text,
        key,
        index,
      );
      db.close();
    },
    async setMeta(_b, key, text) {
      const db = raw();
      db.prepare("UPDATE sessions SET meta = ? WHERE key = ?").run(text, key);
      db.close();
    },
    cli: () => ["--backend", "sqlite", "--db", file],
    close: async () => undefined,
  });
}

{
  const admin = new Redis(REDIS_URL, { lazyConnect: true });
  const prefix = `duas-rules:${randomUUID()}:`;
  harnesses.push({
    name: "redis",
    skip: redisSkip,
    backend: () => new RedisBackend({ url: REDIS_URL, keyPrefix: prefix }),
    async setMessage(_b, key, index, text) {
      await admin.lset(`${prefix}${key}/history`, index, text);
    },
    async setMeta(_b, key, text) {
      await admin.hset(`${prefix}${key}`, "meta", text);
    },
    async close() {
      if (redisSkip) return;
      const keys = await admin.keys(`${prefix.replace(/[*?[\]\\]/g, "\\$&")}*`);
      if (keys.length > 0) await admin.del(...keys);
      admin.disconnect();
    },
  });
}

{
  const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  const schema = `duas_rules_${randomUUID().replaceAll("-", "").slice(0, 20)}`;
  harnesses.push({
    name: "postgres",
    skip: postgresSkip,
    backend: () => new PostgresBackend({ url: DATABASE_URL, schema }),
    async setMessage(_b, key, index, text) {
      await admin.query(
        `UPDATE "${schema}".messages SET body = $1, body_gz = NULL WHERE session_key = $2 AND seq = $3`,
        [text, key, index],
      );
    },
    async setMeta(_b, key, text) {
      await admin.query(`UPDATE "${schema}".sessions SET meta = $1 WHERE session_key = $2`, [text, key]);
    },
    async close() {
      if (!postgresSkip) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin.end();
    },
  });
}

afterAll(async () => {
  for (const h of harnesses) await h.close();
  rmSync(tmp, { recursive: true, force: true });
});

/** Everything a read path can do with `key`: load (API), iterate (API), read the header (show). */
async function readPaths(b: StateBackend, key: string): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  const attempt = async (name: string, fn: () => Promise<unknown>) => {
    try {
      out[name] = await fn();
    } catch (e) {
      out[name] = e;
    }
  };
  await attempt("loadState", () => loadState(key, { backend: b }));
  await attempt("iterHistory", async () => {
    const all: Message[] = [];
    for await (const m of iterHistory(key, { backend: b })) all.push(m);
    return all;
  });
  if (typeof b.readHeader === "function") await attempt("readHeader", () => b.readHeader!(key));
  return out;
}

for (const h of harnesses) {
  describe.skipIf(!!h.skip)(`stored value rules: ${h.name}${h.skip ? ` (skipped: ${h.skip})` : ""}`, () => {
    const backends: StateBackend[] = [];
    const open = () => {
      const b = h.backend();
      backends.push(b);
      return b;
    };
    afterAll(async () => {
      for (const b of backends) await b.close?.();
    });
    const stored = async (b: StateBackend) => {
      const key = `k-${randomUUID().slice(0, 8)}`;
      await b.save(key, base());
      return key;
    };

    it("a save nested deeper than the limit is a NonJsonValueError naming the message (never a RangeError)", async () => {
      const b = open();
      const agent = new BaseAgent({ name: "deep" });
      agent.history.push({ role: "user", content: "hi", extra: deepValue(5000) } as unknown as Message);
      const e = await saveState(agent, `deep-${randomUUID().slice(0, 8)}`, { backend: b }).catch((x) => x);
      expect(e).toBeInstanceOf(NonJsonValueError);
      expect(e.messageIndex).toBe(0);
      expect(e.message).toContain(`deeper than ${MAX_JSON_DEPTH}`);
      // The limit itself is accepted.
      agent.history[0] = { role: "user", content: "hi", extra: deepValue(MAX_JSON_DEPTH - 1) } as unknown as Message;
      await expect(saveState(agent, `ok-${randomUUID().slice(0, 8)}`, { backend: b })).resolves.toBeDefined();
    });

    it.each([
      ["nested 5,000 levels deep", bodyWith(deepText(5000)), /deeper than 512/],
      ["1e400 (Infinity once parsed)", bodyWith("1e400"), /Infinity cannot be stored/],
      ['{"role":"robot"}', '{"role":"robot","content":"beep"}', /history\[1\]\.role/],
      ["an array instead of a message", "[1,2]", /history\[1\]/],
    ])("a stored message %s is a FormatError on every read path", async (_label, text, pattern) => {
      const b = open();
      const key = await stored(b);
      await h.setMessage(b, key, 1, text);
      const r = await readPaths(b, key);
      for (const path of ["loadState", "iterHistory"]) {
        expect(r[path], path).toBeInstanceOf(FormatError);
        expect((r[path] as Error).message, path).toMatch(pattern);
      }
    });

    it("-0 in a stored message loads as 0, and the agent saves again", async () => {
      const b = open();
      const key = await stored(b);
      await h.setMessage(b, key, 1, '{"role":"assistant","content":"two","n":-0,"m":[-0.0]}');
      const agent = await loadState(key, { backend: b });
      const m = agent.history[1] as unknown as { n: number; m: number[] };
      expect(Object.is(m.n, 0)).toBe(true);
      expect(Object.is(m.m[0], 0)).toBe(true);
      agent.history.push({ role: "user", content: "three" });
      await expect(saveState(agent, undefined, { backend: b, force: true })).resolves.toMatchObject({ key });
      const all: Message[] = [];
      for await (const x of iterHistory(key, { backend: b })) all.push(x);
      expect(all).toHaveLength(3);
      expect(Object.is((all[1] as unknown as { n: number }).n, 0)).toBe(true);
    });

    it("an unknown format version is a FormatError on load, on iterHistory and on a header read", async () => {
      const b = open();
      const key = await stored(b);
      const meta = { ...base().meta, formatVersion: "9.0" };
      await h.setMeta(b, key, JSON.stringify(meta));
      const r = await readPaths(b, key);
      for (const [path, value] of Object.entries(r)) {
        expect(value, path).toBeInstanceOf(FormatError);
        expect((value as Error).message, path).toMatch(/9\.0/);
      }
    });

    if (h.cli) {
      it("the CLI exits 4 (format) for these, not 1", () => {
        const b = open();
        return (async () => {
          const key = await stored(b);
          await h.setMessage(b, key, 1, bodyWith(deepText(5000)));
          const show = runCli(["show", key, ...h.cli!(b)]);
          expect(show.code, show.stderr).toBe(4);
          expect(show.stderr).toMatch(/FORMAT_ERROR/);
          const key2 = await stored(b);
          await h.setMeta(b, key2, JSON.stringify({ ...base().meta, formatVersion: "9.0" }));
          const show2 = runCli(["show", key2, ...h.cli!(b)]);
          expect(show2.code, show2.stderr).toBe(4);
          expect(show2.stdout).toBe("");
        })();
      }, 60_000);
    }
  });
}

describe("stored value rules: memory", () => {
  it("a save nested deeper than the limit is a NonJsonValueError; the stored data is untouched", async () => {
    const b = new MemoryBackend();
    const agent = new BaseAgent({ name: "deep" });
    agent.history.push({ role: "user", content: "ok" });
    await saveState(agent, "m", { backend: b });
    agent.history.push({ role: "user", content: "hi", extra: deepValue(5000) } as unknown as Message);
    await expect(saveState(agent, undefined, { backend: b })).rejects.toBeInstanceOf(NonJsonValueError);
    expect((await b.read("m"))?.state.history).toEqual([{ role: "user", content: "ok" }]);
  });
});
