/**
 * The commands that walk a whole session store (`convert`, `ls`, `gc`) on a
 * store where some sessions cannot be read — a truncated `.duas`, a
 * hand-edited history, a directory where a file should be, a malformed row in
 * SQLite, PostgreSQL or Redis — among good ones, as real processes on real
 * stores: every readable session is still handled, each unreadable one is
 * named on stderr (and in `--json`) with its error, file and line, nothing is
 * written for it, and the command exits 6 (`SESSIONS_UNREADABLE`).
 */
import { randomBytes } from "node:crypto";
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend } from "../../src/backends/types.js";
import type { AgentState } from "../../src/core/state.js";
import { makeState } from "../../src/testing/states.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { runCli } from "./run-cli.js";

const redisReason = await redisSkipReason();
const postgresReason = await postgresSkipReason();
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-cli-unreadable-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const run = randomBytes(4).toString("hex");

/** The good sessions, by key: each with its own history. */
const good = new Map<string, AgentState>(
  ["a-good", "c-good", "g-good"].map((key, i) => [
    key,
    makeState(
      [
        { role: "user", content: `question ${i} of ${key}` },
        { role: "assistant", content: `answer ${i}\nwith two lines` },
      ],
      { name: key, savedAt: "2020-01-02T03:04:05.000Z" },
    ),
  ]),
);
const GOOD = [...good.keys()];
/** The store: the good sessions, `b-truncated` (cut inside its header), `d-edited` (a message changed by hand), `e-dir` (a directory). */
const dir = path.join(tmp, "sessions");
let snapshot: Map<string, Buffer>;

function fileOf(key: string): string {
  return path.join(dir, `${key}.duas`);
}

beforeAll(async () => {
  const files = new FileBackend({ baseDir: dir });
  for (const [key, state] of good) await files.save(key, state);
  for (const key of ["b-truncated", "d-edited"]) await files.save(key, makeState([{ role: "user", content: "hello" }]));
  await files.close?.();
  truncateSync(fileOf("b-truncated"), 300); // a copy cut short: the header ends mid-way
  const edited = readFileSync(fileOf("d-edited"), "utf8");
  expect(edited).toContain('"content":"hello"');
  writeFileSync(fileOf("d-edited"), edited.replace('"content":"hello"', '"content":"HELLO"')); // a hand edit
  mkdirSync(fileOf("e-dir")); // a directory named like a session file
  snapshot = new Map(["b-truncated", "d-edited"].map((k) => [k, readFileSync(fileOf(k))]));
});

/** Every session of a store, loaded (sorted by key). */
async function contents(backend: StateBackend): Promise<Map<string, AgentState | undefined>> {
  try {
    const keys = [...(await backend.listKeys())].sort();
    return new Map(await Promise.all(keys.map(async (k) => [k, await backend.load(k)] as const)));
  } finally {
    await backend.close?.();
  }
}

/** Asserts that a store holds exactly the good sessions, each identical to its source. */
async function expectOnlyGood(backend: StateBackend, keys = GOOD): Promise<void> {
  const held = await contents(backend);
  expect([...held.keys()]).toEqual(keys);
  for (const key of keys) expect(held.get(key)).toEqual(good.get(key));
}

/** The source files of the unreadable sessions are left as they were. */
function expectSourceUntouched(): void {
  for (const [k, bytes] of snapshot) expect(readFileSync(fileOf(k)).equals(bytes), k).toBe(true);
}

const truncatedLine = (what: string) =>
  new RegExp(
    `^dumplings: cannot ${what} session "b-truncated": ${reEscape(fileOf("b-truncated"))}:line \\d+: .*\\(FORMAT_ERROR\\)$`,
    "m",
  );
const editedLine = (what: string) =>
  new RegExp(
    `^dumplings: cannot ${what} session "d-edited": ${reEscape(fileOf("d-edited"))}:line \\d+: the history does not match history_crc32.*\\(FORMAT_ERROR\\)$`,
    "m",
  );
const dirLine = (what: string) =>
  new RegExp(`^dumplings: cannot ${what} session "e-dir": .*EISDIR.*\\(BACKEND_ERROR\\)$`, "m");

function reEscape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

describe("convert from a store with unreadable sessions", () => {
  it("copies and verifies every readable session, names each unreadable one, writes nothing for it, exits 6", async () => {
    const db = path.join(tmp, "plain.db");
    const r = runCli(["convert", "--from", `file:${dir}`, "--to", `sqlite:${db}`]);
    expect(r.code, r.stderr).toBe(6);
    expect(r.stdout).toMatch(
      /^copied 3 of 6 sessions \(6 messages\) from file:.* to sqlite:.*; 3 of 3 new verified identical; 3 not converted: b-truncated, d-edited, e-dir\n$/,
    );
    expect(r.stderr).toMatch(truncatedLine("convert"));
    expect(r.stderr).toMatch(editedLine("convert"));
    expect(r.stderr).toMatch(dirLine("convert"));
    // progress goes on past them; the last line sums it up
    expect(r.stderr).toMatch(/^convert 6\/6 g-good ok$/m);
    expect(r.stderr.trimEnd().split("\n").at(-1)).toMatch(
      /^dumplings: 3 of 6 sessions of file:.* were not converted: "b-truncated" \(FORMAT_ERROR\), "d-edited" \(FORMAT_ERROR\), "e-dir" \(BACKEND_ERROR\); nothing was written for them in sqlite:.*; the 3 other sessions were copied \(SESSIONS_UNREADABLE\)$/,
    );
    await expectOnlyGood(new SQLiteBackend({ path: db }));
    expectSourceUntouched();
  });

  it("with --json, lists the failures with key, code, message, file and line, and the error with exit code 6", async () => {
    const db = path.join(tmp, "json.db");
    const r = runCli(["convert", "--from", `file:${dir}`, "--to", `sqlite:${db}`, "--json", "-q"]);
    expect(r.code, r.stderr).toBe(6);
    const report = JSON.parse(r.stdout) as Record<string, unknown> & {
      failed: { key: string; code: string; message: string; file?: string; line?: number; side: string }[];
    };
    expect(report).toMatchObject({ copied: 3, created: 3, verified: 3, messages: 6, mismatches: [], overwritten: [] });
    expect(report.failed.map((f) => [f.key, f.code, f.side])).toEqual([
      ["b-truncated", "FORMAT_ERROR", "source"],
      ["d-edited", "FORMAT_ERROR", "source"],
      ["e-dir", "BACKEND_ERROR", "source"],
    ]);
    expect(report.failed[0]).toMatchObject({ file: fileOf("b-truncated"), line: expect.any(Number) });
    expect(report.failed[1]).toMatchObject({ file: fileOf("d-edited"), line: expect.any(Number) });
    expect(report.failed[1]?.message).toMatch(/history_crc32/);
    expect(report.failed[2]?.message).toMatch(/EISDIR/);
    expect(report.error).toMatchObject({ code: "SESSIONS_UNREADABLE", exitCode: 6 });
    // -q silences progress, never the failures
    expect(r.stderr).not.toMatch(/^convert \d/m);
    expect(r.stderr).toMatch(truncatedLine("convert"));
    await expectOnlyGood(new SQLiteBackend({ path: db }));
  });

  it("with --overwrite, leaves the target's copy of an unreadable source session as it was", async () => {
    const db = path.join(tmp, "overwrite.db");
    const theirs = makeState([{ role: "user", content: "the target's own b-truncated" }]);
    const target = new SQLiteBackend({ path: db });
    await target.save("b-truncated", theirs);
    await target.close();
    const r = runCli(["convert", "--from", `file:${dir}`, "--to", `sqlite:${db}`, "--overwrite", "--json", "-q"]);
    expect(r.code, r.stderr).toBe(6);
    expect(JSON.parse(r.stdout)).toMatchObject({ copied: 3, overwritten: [] });
    const held = await contents(new SQLiteBackend({ path: db }));
    expect([...held.keys()]).toEqual(["a-good", "b-truncated", "c-good", "g-good"]);
    expect(held.get("b-truncated")).toEqual(theirs);
  });

  it("from SQLite, a malformed row is skipped and named, the other rows are copied", async () => {
    const db = path.join(tmp, "source.db");
    const source = new SQLiteBackend({ path: db });
    for (const [key, state] of good) await source.save(key, state);
    await source.close();
    const raw = new Database(db);
    raw.prepare("UPDATE sessions SET meta = '{not json' WHERE key = 'c-good'").run();
    raw.close();
    const out = path.join(tmp, "from-sqlite");
    const r = runCli(["convert", "--from", `sqlite:${db}`, "--to", `file:${out}`, "-q"]);
    expect(r.code, r.stderr).toBe(6);
    expect(r.stderr).toMatch(
      /^dumplings: cannot convert session "c-good": .*meta of key "c-good" is not valid JSON.*\(FORMAT_ERROR\)$/m,
    );
    expect(r.stdout).toMatch(/^copied 2 of 3 sessions .*; 1 not converted: c-good\n$/);
    await expectOnlyGood(new FileBackend({ baseDir: out }), ["a-good", "g-good"]);
  });

  it("a store without unreadable sessions converts as before, exit 0 and no failures", () => {
    const clean = path.join(tmp, "clean");
    cpSync(dir, clean, { recursive: true });
    for (const k of ["b-truncated", "d-edited", "e-dir"]) rmSync(path.join(clean, `${k}.duas`), { recursive: true });
    const r = runCli(["convert", "--from", `file:${clean}`, "--to", "memory:", "--json", "-q"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("");
    const report = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(report).toMatchObject({ copied: 3, verified: 3, failed: [] });
    expect(report.error).toBeUndefined();
  });
});

describe("ls on a store with unreadable sessions", () => {
  it("--json marks each unreadable session with readError (and error), keeps the good entries as they were, exits 6", () => {
    const r = runCli(["ls", "--json", "--dir", dir]);
    expect(r.code, r.stderr).toBe(6);
    const json = JSON.parse(r.stdout) as {
      count: number;
      unreadable: number;
      sessions: Record<string, unknown>[];
      error?: { code: string; exitCode: number };
    };
    expect(json).toMatchObject({ count: 6, unreadable: 2, error: { code: "SESSIONS_UNREADABLE", exitCode: 6 } });
    const byKey = new Map(json.sessions.map((s) => [s.key, s]));
    expect(json.sessions.map((s) => s.key)).toEqual(["a-good", "b-truncated", "c-good", "d-edited", "e-dir", "g-good"]);
    for (const key of [...GOOD, "d-edited"]) expect(byKey.get(key)).toEqual({ key }); // header readable
    expect(byKey.get("b-truncated")).toMatchObject({
      error: expect.stringMatching(/b-truncated\.duas:line \d+: .*\(FORMAT_ERROR\)$/),
      readError: { code: "FORMAT_ERROR", file: fileOf("b-truncated"), line: expect.any(Number) },
    });
    expect(byKey.get("e-dir")).toMatchObject({
      readError: { code: "BACKEND_ERROR", message: expect.stringMatching(/EISDIR/) },
    });
    expect(r.stderr).toMatch(truncatedLine("read"));
    expect(r.stderr).toMatch(dirLine("read"));
    expectSourceUntouched();
  });

  it("--long --json gives the good sessions' header fields and the unreadable ones' errors", () => {
    const r = runCli(["ls", "--long", "--json", "--dir", dir]);
    expect(r.code).toBe(6);
    const json = JSON.parse(r.stdout) as { sessions: Record<string, unknown>[] };
    const a = json.sessions.find((s) => s.key === "a-good");
    expect(a).toEqual({
      key: "a-good",
      name: "a-good",
      protocol: "openai",
      messages: 2,
      savedAt: "2020-01-02T03:04:05.000Z",
    });
    expect(json.sessions.find((s) => s.key === "b-truncated")?.readError).toMatchObject({ code: "FORMAT_ERROR" });
  });

  it("--verify reads each session whole: the hand-edited history is marked too", () => {
    const r = runCli(["ls", "--verify", "--json", "--dir", dir]);
    expect(r.code).toBe(6);
    const json = JSON.parse(r.stdout) as { unreadable: number; sessions: Record<string, unknown>[] };
    expect(json.unreadable).toBe(3);
    expect(json.sessions.find((s) => s.key === "d-edited")?.readError).toMatchObject({
      code: "FORMAT_ERROR",
      file: fileOf("d-edited"),
      message: expect.stringMatching(/history_crc32/),
    });
    expect(r.stderr).toMatch(editedLine("read"));
  });

  it("as text: every key on stdout, each unreadable one named on stderr; --long marks its row", () => {
    const plain = runCli(["ls", "--dir", dir]);
    expect(plain.code).toBe(6);
    expect(plain.stdout).toBe("a-good\nb-truncated\nc-good\nd-edited\ne-dir\ng-good\n");
    expect(plain.stderr).toMatch(truncatedLine("read"));
    expect(plain.stderr.trimEnd().split("\n").at(-1)).toMatch(
      /^dumplings: 2 of 6 sessions of file:.* cannot be read: "b-truncated" \(FORMAT_ERROR\), "e-dir" \(BACKEND_ERROR\); every session is still listed \(SESSIONS_UNREADABLE\)$/,
    );
    const long = runCli(["ls", "-l", "--dir", dir]);
    expect(long.code).toBe(6);
    expect(long.stdout).toMatch(/^b-truncated +UNREADABLE \(FORMAT_ERROR\) +- +- +-$/m);
    expect(long.stdout).toMatch(/^e-dir +UNREADABLE \(BACKEND_ERROR\) +- +- +-$/m);
    expect(long.stdout).toMatch(/^a-good +a-good +openai +2 +2020-01-02T03:04:05.000Z$/m);
  });
});

describe("a session file that is a symbolic link", () => {
  it("is one unreadable session (never followed), not a failure of the whole store", async () => {
    const links = path.join(tmp, "links");
    const files = new FileBackend({ baseDir: links });
    await files.save("a-good", good.get("a-good") as AgentState);
    symlinkSync(fileOf("c-good"), path.join(links, "linked.duas"));
    const ls = runCli(["ls", "--json", "--dir", links]);
    expect(ls.code, ls.stderr).toBe(6);
    expect((JSON.parse(ls.stdout) as { sessions: Record<string, unknown>[] }).sessions).toEqual([
      { key: "a-good" },
      expect.objectContaining({
        key: "linked",
        readError: { code: "BACKEND_ERROR", message: expect.stringMatching(/refusing to follow the symlink/) },
      }),
    ]);
    const db = path.join(tmp, "links.db");
    const r = runCli(["convert", "--from", `file:${links}`, "--to", `sqlite:${db}`, "-q"]);
    expect(r.code, r.stderr).toBe(6);
    await expectOnlyGood(new SQLiteBackend({ path: db }), ["a-good"]);
  });
});

describe("gc on a store with unreadable sessions", () => {
  it("collects the readable old sessions, keeps and names the unreadable ones (age unknown), exits 6", async () => {
    const copy = path.join(tmp, "gc");
    cpSync(dir, copy, { recursive: true });
    const dry = runCli(["gc", "--older-than", "30d", "--dry-run", "--dir", copy]);
    expect(dry.code, dry.stderr).toBe(6);
    expect(dry.stdout).toMatch(/^would delete 3 sessions saved before .*; kept 2 unreadable\n$/m);
    const r = runCli(["gc", "--older-than", "30d", "--json", "--dir", copy]);
    expect(r.code, r.stderr).toBe(6);
    const report = JSON.parse(r.stdout) as { deleted: string[]; unreadable: { key: string; code: string }[] };
    expect(report.deleted).toEqual(["a-good", "c-good", "g-good"]); // d-edited was saved now
    expect(report.unreadable.map((u) => [u.key, u.code])).toEqual([
      ["b-truncated", "FORMAT_ERROR"],
      ["e-dir", "BACKEND_ERROR"],
    ]);
    expect(r.stderr).toMatch(
      /cannot be read: "b-truncated" \(FORMAT_ERROR\), "e-dir" \(BACKEND_ERROR\); their ages are unknown, so they were kept/,
    );
    expect(
      readFileSync(path.join(copy, "b-truncated.duas")).equals(snapshot.get("b-truncated") ?? Buffer.alloc(0)),
    ).toBe(true);
    expect([...(await new FileBackend({ baseDir: copy }).listKeys())].sort()).toEqual([
      "b-truncated",
      "d-edited",
      "e-dir",
    ]);
  });
});

describe.skipIf(postgresReason)("convert through PostgreSQL with unreadable sessions", () => {
  const schema = `cli_unreadable_${run}`;
  const url = new URL(DATABASE_URL);
  url.searchParams.set("schema", schema);
  const spec = `postgres:${url.href}`;
  afterAll(async () => {
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    try {
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    } finally {
      await client.end();
    }
  });

  it("file → PostgreSQL copies the readable sessions only; a malformed row there is skipped on the way back", async () => {
    const there = runCli(["convert", "--from", `file:${dir}`, "--to", spec, "-q"]);
    expect(there.code, there.stderr).toBe(6);
    expect(there.stderr).toMatch(truncatedLine("convert"));
    const { PostgresBackend } = await import("../../src/backends/postgres.js");
    await expectOnlyGood(new PostgresBackend({ url: DATABASE_URL, schema }));
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    try {
      await client.query(`UPDATE ${schema}.sessions SET config = '[' WHERE session_key = 'g-good'`);
    } finally {
      await client.end();
    }
    const out = path.join(tmp, "from-postgres.db");
    const back = runCli(["convert", "--from", spec, "--to", `sqlite:${out}`, "--json", "-q"]);
    expect(back.code, back.stderr).toBe(6);
    expect((JSON.parse(back.stdout) as { failed: { key: string; code: string }[] }).failed).toEqual([
      expect.objectContaining({ key: "g-good", code: "FORMAT_ERROR", side: "source" }),
    ]);
    await expectOnlyGood(new SQLiteBackend({ path: out }), ["a-good", "c-good"]);
  });
});

describe.skipIf(redisReason)("convert through Redis with unreadable sessions", () => {
  const prefix = `cli-unreadable-${run}:`;
  const url = new URL(REDIS_URL);
  url.searchParams.set("prefix", prefix);
  const spec = `redis:${url.href}`;
  afterAll(async () => {
    const redis = new Redis(REDIS_URL);
    try {
      const keys = await redis.keys(`${prefix}*`);
      if (keys.length > 0) await redis.del(...keys);
    } finally {
      redis.disconnect();
    }
  });

  it("file → Redis copies the readable sessions only; a corrupt message there is marked by ls --verify and skipped", async () => {
    const there = runCli(["convert", "--from", `file:${dir}`, "--to", spec, "-q"]);
    expect(there.code, there.stderr).toBe(6);
    const { RedisBackend } = await import("../../src/backends/redis.js");
    await expectOnlyGood(new RedisBackend({ url: REDIS_URL, keyPrefix: prefix }));
    const redis = new Redis(REDIS_URL);
    try {
      await redis.lset(`${prefix}a-good/history`, 1, '{"role":');
    } finally {
      redis.disconnect();
    }
    const ls = runCli(["ls", "--verify", "--json", "--backend", spec]);
    expect(ls.code, ls.stderr).toBe(6);
    expect((JSON.parse(ls.stdout) as { sessions: Record<string, unknown>[] }).sessions[0]).toMatchObject({
      key: "a-good",
      readError: { code: "FORMAT_ERROR" },
    });
    const out = path.join(tmp, "from-redis.db");
    const back = runCli(["convert", "--from", spec, "--to", `sqlite:${out}`, "-q"]);
    expect(back.code, back.stderr).toBe(6);
    expect(back.stderr).toMatch(/^dumplings: cannot convert session "a-good": .*history\[1\].*\(FORMAT_ERROR\)$/m);
    await expectOnlyGood(new SQLiteBackend({ path: out }), ["c-good", "g-good"]);
  });
});
