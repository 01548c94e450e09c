/**
 * SQLiteBackend specifics beyond the conformance suite: schema and WAL, the
 * seed-schema migration, corrupt rows, driver errors, busy handling (pb-15),
 * retention (gc), compressed bodies, delete leaving no rows (pb-26), and
 * O(new messages) writes.
 */
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { gzipSync } from "node:zlib";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend, SQLiteBusyError } from "../../src/backends/sqlite.js";
import { BackendError, ConflictError, FormatError, StateNotFoundError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import type { AgentState } from "../../src/core/state.js";
import { loadSampleConversations } from "../../src/testing/samples.js";
import { makeState } from "../../src/testing/states.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-sqlite-schema-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const freshPath = () => path.join(dir, `s${n++}.db`);

/** SQL: the `messages` rows of session `key` (a message's id is `(sid << 32) | seq`). */
const rowsOf = (key: string) => `(id >> 32) = (SELECT sid FROM sessions WHERE key = '${key}')`;
/** SQL: a message's 0-based index in its history. */
const SEQ = "(id & 4294967295)";

const msgs = (count: number, seed = "m"): Message[] =>
  Array.from({ length: count }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `${seed} ${i}` }) as Message);

/**
 * A database exactly as schema version 1 (dumplings-ai 0.1 without the ledger, or the builds with the
 * ledger at `sessions` version 1) creates and fills it: meta, config and state in the session row.
 */
function version1Database(file: string, options: { ledger: boolean; sessions: Record<string, AgentState> }): void {
  const db = new Database(file);
  db.pragma("journal_mode = WAL");
  db.exec(`CREATE TABLE sessions (
      key TEXT PRIMARY KEY, meta TEXT NOT NULL, config TEXT NOT NULL, state TEXT NOT NULL, history TEXT,
      saved_at TEXT NOT NULL, revision INTEGER NOT NULL DEFAULT 1, message_count INTEGER)`);
  db.exec(`CREATE TABLE messages (
      session_key TEXT NOT NULL, seq INTEGER NOT NULL, body, PRIMARY KEY (session_key, seq))`);
  db.exec("CREATE TABLE dumplings_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID");
  db.exec("CREATE INDEX sessions_saved_at ON sessions (saved_at)");
  if (options.ledger) {
    db.exec(`CREATE TABLE dumplings_migrations (
        component TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,
        applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        PRIMARY KEY (component, version)) WITHOUT ROWID`);
    db.exec(
      "INSERT INTO dumplings_migrations (component, version, name) VALUES ('sessions', 1, 'sessions and messages')",
    );
  }
  db.pragma("user_version = 1");
  const insert = db.prepare(
    "INSERT INTO sessions (key, meta, config, state, history, saved_at, revision, message_count) VALUES (?, ?, ?, ?, NULL, ?, ?, ?)",
  );
  const message = db.prepare("INSERT INTO messages (session_key, seq, body) VALUES (?, ?, ?)");
  for (const [key, s] of Object.entries(options.sessions)) {
    const json = (v: unknown) => JSON.stringify(v);
    insert.run(key, json(s.meta), json(s.config), json(s.state), new Date().toISOString(), 3, s.history.length);
    s.history.forEach((m, i) => {
      message.run(key, i, json(m));
    });
  }
  db.close();
}

/** Every read path's view of a key: load, read, readHeader, iterHistory. */
async function everyReadPath(backend: SQLiteBackend, key: string): Promise<unknown[]> {
  const streamed: Message[] = [];
  for await (const m of backend.iterHistory(key)) streamed.push(m);
  const read = await backend.read(key);
  const head = await backend.readHeader(key);
  return [backend.load(key), read?.state, { ...head?.header, history: streamed }, read?.revision, head?.revision];
}

describe("SQLiteBackend schema and connections", () => {
  it("creates the documented schema in WAL mode, on every connection (pb-15)", () => {
    const dbPath = freshPath();
    const backend = new SQLiteBackend({ dbPath });
    backend.save("a", makeState(msgs(3)));
    const raw = new Database(dbPath);
    expect(raw.pragma("journal_mode", { simple: true })).toBe("wal");
    expect(raw.pragma("user_version", { simple: true })).toBe(3);
    const tables = raw.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").pluck().all();
    expect(tables).toEqual(["dumplings_meta", "dumplings_migrations", "messages", "session_parts", "sessions"]);
    // One B-tree for the messages: an integer key, no index beside the table.
    expect(raw.prepare("SELECT name FROM sqlite_master WHERE tbl_name = 'messages'").pluck().all()).toEqual([
      "messages",
    ]);
    const ledger = raw.prepare("SELECT component, version FROM dumplings_migrations ORDER BY version").all();
    expect(ledger).toEqual([
      { component: "sessions", version: 1 },
      { component: "sessions", version: 2 },
      { component: "sessions", version: 3 },
    ]);
    const row = raw
      .prepare("SELECT config, state, history, revision, message_count, saved_at FROM sessions WHERE key = 'a'")
      .get() as {
      config: string;
      state: string;
      history: unknown;
      revision: number;
      message_count: number;
      saved_at: string;
    };
    // config and state live in session_parts, out of the row every save rewrites.
    expect(row).toMatchObject({ config: "", state: "", history: null, revision: 1, message_count: 3 });
    const parts = raw.prepare("SELECT part, body FROM session_parts WHERE session_key = 'a' ORDER BY part").all() as {
      part: string;
      body: string;
    }[];
    expect(parts.map((p) => p.part)).toEqual(["config", "state"]);
    expect(JSON.parse(parts[1]?.body as string)).toEqual({ currentTaskId: null, hooks: [], fields: {} });
    expect(new Date(row.saved_at).toISOString()).toBe(row.saved_at);
    expect(
      raw
        .prepare(`SELECT ${SEQ}, body FROM messages WHERE ${rowsOf("a")} ORDER BY id`)
        .raw()
        .all(),
    ).toEqual([
      [0, '{"role":"user","content":"m 0"}'],
      [1, '{"role":"assistant","content":"m 1"}'],
      [2, '{"role":"user","content":"m 2"}'],
    ]);
    raw.close();
    backend.close();
    // A second backend on the same file sees the same data.
    const again = new SQLiteBackend({ dbPath });
    expect(again.load("a").history).toEqual(msgs(3));
    again.close();
  });

  it("an append inserts only the new rows and keeps the earlier ones untouched", async () => {
    const dbPath = freshPath();
    const backend = new SQLiteBackend({ dbPath });
    const r1 = await backend.write("k", makeState(msgs(100)), { expectedRevision: null });
    const raw = new Database(dbPath);
    const rowids = () =>
      raw
        .prepare(`SELECT rowid FROM messages WHERE ${rowsOf("k")} ORDER BY id`)
        .pluck()
        .all();
    const before = rowids();
    const r2 = await backend.write("k", makeState(msgs(103)), { expectedRevision: r1.revision, baseLength: 100 });
    expect(r2).toEqual({ revision: 2, written: 3, rewritten: false });
    expect(rowids().slice(0, 100)).toEqual(before);
    expect(rowids()).toHaveLength(103);
    raw.close();
    backend.close();
  });

  it("migrates a seed database (single table, JSONL history) and keeps every session exact", async () => {
    const dbPath = freshPath();
    const seed = new Database(dbPath);
    seed.exec(
      "CREATE TABLE sessions (key TEXT PRIMARY KEY, meta TEXT, config TEXT, state TEXT, history TEXT, saved_at TEXT)",
    );
    const convs = loadSampleConversations().slice(0, 6);
    const states = convs.map((c) => makeState(c.messages, { protocol: c.protocol, name: c.id }));
    const insert = seed.prepare("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?)");
    states.forEach((s, i) => {
      insert.run(
        `seed-${i}`,
        JSON.stringify(s.meta),
        JSON.stringify(s.config),
        JSON.stringify(s.state),
        s.history.map((m) => `${JSON.stringify(m)}\n`).join(""),
        "2024-01-02T03:04:05+02:00",
      );
    });
    insert.run("seed-empty", JSON.stringify(states[0]?.meta), "{}", "{}", "", "2024-01-02T03:04:05Z");
    seed.close();

    const backend = new SQLiteBackend({ dbPath });
    states.forEach((s, i) => {
      expect(backend.load(`seed-${i}`)).toEqual(s);
    });
    expect(backend.load("seed-empty").history).toEqual([]);
    const raw = new Database(dbPath);
    expect(raw.pragma("user_version", { simple: true })).toBe(3);
    expect(raw.prepare("SELECT count(*) FROM sessions WHERE history IS NOT NULL").pluck().get()).toBe(0);
    expect(raw.prepare("SELECT saved_at FROM sessions WHERE key = 'seed-0'").pluck().get()).toBe(
      "2024-01-02T01:04:05.000Z",
    );
    raw.close();
    // Migrated sessions take appends like any other.
    const s0 = states[0] as ReturnType<typeof makeState>;
    const got = await backend.read("seed-0");
    expect(got?.revision).toBe(1);
    const next = { ...s0, history: [...s0.history, { role: "user", content: "after migration" } as Message] };
    const r = await backend.write("seed-0", next, { expectedRevision: 1, baseLength: s0.history.length });
    expect(r.revision).toBe(2);
    expect(backend.load("seed-0")).toEqual(next);
    backend.close();
  });

  it("adopts a file written by 0.1 (user_version 1, no ledger) without re-running its DDL, and shares a file with other components", async () => {
    const dbPath = freshPath();
    // What 0.1 left: the version-1 tables, user_version 1, no ledger.
    const old = makeState(msgs(4));
    version1Database(dbPath, { ledger: false, sessions: { old } });
    const backend = new SQLiteBackend({ dbPath });
    expect(backend.load("old")).toEqual(old);
    const check = new Database(dbPath);
    expect(check.prepare("SELECT component, version, name FROM dumplings_migrations ORDER BY version").all()).toEqual([
      { component: "sessions", version: 1, name: "sessions and messages (adopted)" },
      { component: "sessions", version: 2, name: "config and state beside the session row" },
      { component: "sessions", version: 3, name: "messages keyed by one integer, (sid << 32) | seq" },
    ]);
    expect(check.pragma("user_version", { simple: true })).toBe(3);
    check.close();
    backend.close();
    // A newer ledger entry for the sessions component is refused with the file and the version.
    const future = new Database(dbPath);
    future
      .prepare("INSERT INTO dumplings_migrations (component, version, name) VALUES ('sessions', 7, 'future')")
      .run();
    future.close();
    const error = (() => {
      try {
        return new SQLiteBackend({ dbPath });
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(FormatError);
    expect((error as FormatError).message).toMatch(/version 7, newer than this build/);
  });

  it("migrates a database of schema version 1 on open; every read path sees the same data before and after the next save moves config and state out of the row", async () => {
    const dbPath = freshPath();
    const big = makeState(msgs(5), { name: "big", config: { prompt: "p".repeat(1 << 20) }, fields: { doc: "d" } });
    const small = makeState(msgs(2), { name: "small" });
    version1Database(dbPath, { ledger: true, sessions: { big, small } });
    const backend = new SQLiteBackend({ dbPath });
    const raw = new Database(dbPath);
    try {
      expect(raw.prepare("SELECT version FROM dumplings_migrations ORDER BY version").pluck().all()).toEqual([1, 2, 3]);
      expect(raw.pragma("user_version", { simple: true })).toBe(3);
      // Opening moves no data: a row keeps its parts in its columns until its next save.
      expect(raw.prepare("SELECT count(*) FROM session_parts").pluck().get()).toBe(0);
      expect(await everyReadPath(backend, "big")).toEqual([big, big, big, 3, 3]);
      expect(await everyReadPath(backend, "small")).toEqual([small, small, small, 3, 3]);
      expect(backend.listKeys().sort()).toEqual(["big", "small"]);

      const next = {
        ...big,
        meta: { ...big.meta, messageCount: 6 },
        history: [...big.history, { role: "user", content: "after" } as Message],
      };
      expect(await backend.write("big", next, { expectedRevision: 3, baseLength: 5 })).toEqual({
        revision: 4,
        written: 1,
        rewritten: false,
      });
      const rowSize = (key: string) =>
        raw
          .prepare("SELECT length(meta) + length(config) + length(state) FROM sessions WHERE key = ?")
          .pluck()
          .get(key) as number;
      expect(rowSize("big")).toBeLessThan(1000);
      expect(rowSize("small")).toBeGreaterThan(100); // untouched
      expect(await everyReadPath(backend, "big")).toEqual([next, next, next, 4, 4]);

      // A process of the version-1 build, still running, writes the row in its shape: its config wins
      // over the part left in session_parts.
      const theirs = { ...next.config, prompt: "changed by an old process" };
      raw
        .prepare("UPDATE sessions SET config = ?, state = ?, revision = revision + 1 WHERE key = 'big'")
        .run(JSON.stringify(theirs), JSON.stringify(next.state));
      const seen = await backend.read("big");
      expect(seen?.state.config).toEqual(theirs);
      // Saving that config again at its revision moves it into session_parts (not skipped as "already stored").
      const after = {
        ...next,
        meta: { ...next.meta, messageCount: 7 },
        config: theirs,
        history: [...next.history, { role: "assistant", content: "ok" } as Message],
      };
      await backend.write("big", after, { expectedRevision: 5, baseLength: 6 });
      expect(raw.prepare("SELECT config FROM sessions WHERE key = 'big'").pluck().get()).toBe("");
      const other = new SQLiteBackend({ dbPath });
      expect(await everyReadPath(other, "big")).toEqual([after, after, after, 6, 6]);
      other.close();

      // delete and gc remove the parts too; gc also removes parts an old build's delete left behind.
      expect(backend.delete("big")).toBe(true);
      expect(raw.prepare("SELECT count(*) FROM session_parts WHERE session_key = 'big'").pluck().get()).toBe(0);
      backend.save("small", small);
      raw.prepare("DELETE FROM sessions WHERE key = 'small'").run(); // what a version-1 process's delete does
      raw.prepare("INSERT INTO session_parts (session_key, part, body) VALUES ('gone', 'config', '{}')").run();
      backend.save("kept", small);
      expect(backend.gc({ olderThanMs: 3_600_000 })).toEqual({ deleted: 0 });
      expect(raw.prepare("SELECT DISTINCT session_key FROM session_parts").pluck().all()).toEqual(["kept"]);
      expect(backend.load("kept")).toEqual(small);
    } finally {
      raw.close();
      backend.close();
    }
  });

  it("migrates a database of schema version 2 (messages keyed by session_key, seq) on open: every session loads exactly and takes appends", async () => {
    const dbPath = freshPath();
    const long = makeState(msgs(700, "long"), { name: "long", fields: { doc: "d" } });
    const short = makeState(msgs(3, "short"), { name: "short" });
    const empty = makeState([], { name: "empty" });
    // What a build of schema 2 leaves: the version-1 tables, session_parts, ledger at 2, user_version 2.
    version1Database(dbPath, { ledger: true, sessions: { long, short, empty } });
    const v2 = new Database(dbPath);
    v2.exec(`CREATE TABLE session_parts (
        session_key TEXT NOT NULL, part TEXT NOT NULL CHECK (part IN ('config', 'state')), body TEXT NOT NULL,
        PRIMARY KEY (session_key, part))`);
    v2.exec(
      "INSERT INTO dumplings_migrations (component, version, name) VALUES ('sessions', 2, 'config and state beside the session row')",
    );
    v2.pragma("user_version = 2");
    // "long" keeps its parts apart (as a schema-2 save leaves them) and one body gzip-compressed.
    v2.prepare(
      "INSERT INTO session_parts (session_key, part, body) VALUES ('long', 'config', ?), ('long', 'state', ?)",
    ).run(JSON.stringify(long.config), JSON.stringify(long.state));
    v2.prepare("UPDATE sessions SET config = '', state = '' WHERE key = 'long'").run();
    v2.prepare("UPDATE messages SET body = ? WHERE session_key = 'long' AND seq = 5").run(
      gzipSync(JSON.stringify(long.history[5])),
    );
    v2.prepare("INSERT INTO messages (session_key, seq, body) VALUES ('nobody', 0, '{}')").run(); // an orphan row
    v2.close();

    const backend = new SQLiteBackend({ dbPath });
    const raw = new Database(dbPath);
    try {
      expect(raw.pragma("user_version", { simple: true })).toBe(3);
      expect(raw.prepare("SELECT version FROM dumplings_migrations ORDER BY version").pluck().all()).toEqual([1, 2, 3]);
      expect(raw.prepare("SELECT count(*) FROM messages").pluck().get()).toBe(703); // the orphan is not carried over
      expect(
        raw
          .prepare(`SELECT typeof(body) FROM messages WHERE ${rowsOf("long")} AND ${SEQ} = 5`)
          .pluck()
          .get(),
      ).toBe("blob");
      expect(await everyReadPath(backend, "long")).toEqual([long, long, long, 3, 3]);
      expect(await everyReadPath(backend, "short")).toEqual([short, short, short, 3, 3]);
      expect(await everyReadPath(backend, "empty")).toEqual([empty, empty, empty, 3, 3]);
      const next = {
        ...short,
        meta: { ...short.meta, messageCount: 4 },
        history: [...short.history, { role: "user", content: "after v3" } as Message],
      };
      expect(await backend.write("short", next, { expectedRevision: 3, baseLength: 3 })).toEqual({
        revision: 4,
        written: 1,
        rewritten: false,
      });
      // A new session takes a number no other holds; the others' rows are untouched.
      await backend.write("new", makeState(msgs(2, "new")), { expectedRevision: null });
      const sids = raw.prepare("SELECT sid FROM sessions ORDER BY sid").pluck().all() as number[];
      expect(new Set(sids).size).toBe(4);
      const other = new SQLiteBackend({ dbPath });
      expect(await everyReadPath(other, "short")).toEqual([next, next, next, 4, 4]);
      expect(other.load("long")).toEqual(long);
      expect(other.load("new").history).toEqual(msgs(2, "new"));
      other.close();
    } finally {
      raw.close();
      backend.close();
    }
    // A build of schema 2 refuses the migrated file: its ledger holds a version it does not know.
    const ledger = new Database(dbPath, { readonly: true });
    expect(
      ledger.prepare("SELECT MAX(version) FROM dumplings_migrations WHERE component = 'sessions'").pluck().get(),
    ).toBe(3);
    ledger.close();
  });

  it("an unchanged big state is not rewritten by an append; a changed one is; a missing part is a FormatError", async () => {
    const dbPath = freshPath();
    const backend = new SQLiteBackend({ dbPath });
    const raw = new Database(dbPath);
    try {
      const state = makeState(msgs(1), { fields: { doc: "d".repeat(4 << 20) } });
      let { revision } = await backend.write("k", state, { expectedRevision: null });
      const wal = async (change?: () => void): Promise<number> => {
        raw.pragma("wal_checkpoint(TRUNCATE)");
        change?.();
        state.history.push({ role: "user", content: "more" });
        const r = await backend.write("k", state, { expectedRevision: revision, baseLength: state.history.length - 1 });
        revision = r.revision;
        return statSync(`${dbPath}-wal`).size;
      };
      for (let i = 0; i < 12; i++) expect(await wal()).toBeLessThan(64 * 1024);
      expect(await wal(() => Object.assign(state.state.fields, { doc: "e".repeat(4 << 20) }))).toBeGreaterThan(4 << 20);
      const other = new SQLiteBackend({ dbPath });
      expect(other.load("k")).toEqual(state);
      raw.prepare("DELETE FROM session_parts WHERE session_key = 'k' AND part = 'state'").run();
      expect(() => other.load("k")).toThrow(FormatError);
      expect(() => other.load("k")).toThrow(/state of key "k"/);
      await expect(other.readHeader("k")).rejects.toBeInstanceOf(FormatError);
      other.close();
    } finally {
      raw.close();
      backend.close();
    }
  });

  it("refuses a database written by a newer schema", () => {
    const dbPath = freshPath();
    const raw = new Database(dbPath);
    raw.pragma("user_version = 99");
    raw.close();
    expect(() => new SQLiteBackend({ dbPath })).toThrow(/schema version 99/);
  });

  it("a corrupt stored row is a FormatError naming the key, never a bare SyntaxError", async () => {
    const dbPath = freshPath();
    const backend = new SQLiteBackend({ dbPath, compressHistory: true, compressMinBytes: 1 });
    for (const k of ["meta", "body", "missing", "gzip", "count"]) backend.save(k, makeState(msgs(4)));
    const raw = new Database(dbPath);
    raw.prepare("UPDATE sessions SET meta = '{\"truncated' WHERE key = 'meta'").run();
    raw.prepare(`UPDATE messages SET body = '{"role":' WHERE ${rowsOf("body")} AND ${SEQ} = 2`).run();
    raw.prepare(`DELETE FROM messages WHERE ${rowsOf("missing")} AND ${SEQ} = 1`).run();
    raw.prepare(`UPDATE messages SET body = x'1f8b0800' WHERE ${rowsOf("gzip")} AND ${SEQ} = 0`).run();
    raw.prepare("UPDATE sessions SET message_count = 9 WHERE key = 'count'").run();
    raw.close();
    for (const k of ["meta", "body", "missing", "gzip", "count"]) {
      let error: unknown;
      try {
        backend.load(k);
      } catch (e) {
        error = e;
      }
      expect(error, k).toBeInstanceOf(FormatError);
      expect((error as Error).message).toContain(`"${k}"`);
    }
    await expect(async () => {
      for await (const _ of backend.iterHistory("body")) {
        // consume
      }
    }).rejects.toBeInstanceOf(FormatError);
    backend.close();
  });

  it("wraps driver failures in BackendError with the key and the cause", () => {
    const backend = new SQLiteBackend({ dbPath: freshPath() });
    backend.close();
    let error: unknown;
    try {
      backend.save("k", makeState([]));
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(BackendError);
    expect((error as BackendError).key).toBe("k");
    expect((error as Error).message).toMatch(/^\[dumplings:sqlite\] cannot save "k": /);
    expect((error as Error).cause).toBeInstanceOf(Error);
    expect(() => new SQLiteBackend({ dbPath: dir })).toThrow(BackendError); // a directory is not a database
  });

  it("a write that cannot get the lock within busyTimeoutMs is a retryable SQLiteBusyError; nothing is written (pb-15)", () => {
    const dbPath = freshPath();
    const backend = new SQLiteBackend({ dbPath, busyTimeoutMs: 50 });
    backend.save("kept", makeState(msgs(1)));
    const other = new Database(dbPath);
    other.exec("BEGIN IMMEDIATE");
    let error: unknown;
    try {
      backend.save("blocked", makeState(msgs(2)));
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(SQLiteBusyError);
    expect((error as SQLiteBusyError).retryable).toBe(true);
    expect((error as SQLiteBusyError).code).toBe("BACKEND_ERROR");
    // Readers are not blocked by a writer in WAL mode.
    expect(backend.load("kept").history).toEqual(msgs(1));
    other.exec("ROLLBACK");
    expect(backend.listKeys()).toEqual(["kept"]);
    backend.save("blocked", makeState(msgs(2)));
    expect(backend.load("blocked").history).toEqual(msgs(2));
    other.close();
    backend.close();
  });

  it("a long read transaction on another connection does not make writes fail (pb-15)", () => {
    const dbPath = freshPath();
    const backend = new SQLiteBackend({ dbPath });
    backend.save("seed", makeState(msgs(1)));
    const reader = new Database(dbPath);
    reader.exec("BEGIN");
    reader.prepare("SELECT count(*) FROM sessions").get();
    for (let i = 0; i < 200; i++) backend.save(`p2-${i}`, makeState(msgs(2, `n${i}`)));
    expect(reader.prepare("SELECT count(*) FROM sessions").pluck().get()).toBe(1); // its snapshot
    reader.exec("COMMIT");
    expect(backend.listKeys()).toHaveLength(201);
    reader.close();
    backend.close();
  });

  it("delete removes every row of the key, and a late CAS write is refused (pb-26)", async () => {
    const dbPath = freshPath();
    const backend = new SQLiteBackend({ dbPath });
    const r1 = await backend.write("t26", makeState([{ role: "user", content: "delete me later" }]), {
      expectedRevision: null,
    });
    expect(backend.delete("t26")).toBe(true);
    await expect(
      backend.write("t26", makeState([{ role: "assistant", content: "late full" }]), { expectedRevision: r1.revision }),
    ).rejects.toBeInstanceOf(ConflictError);
    expect(backend.delete("t26")).toBe(false);
    expect(() => backend.load("t26")).toThrow(StateNotFoundError);
    const raw = new Database(dbPath);
    expect(raw.prepare("SELECT count(*) FROM sessions WHERE key = 't26'").pluck().get()).toBe(0);
    expect(raw.prepare("SELECT count(*) FROM messages").pluck().get()).toBe(0);
    raw.close();
    // Re-created on purpose: a new generation whose revisions the stale writer cannot match.
    const again = await backend.write("t26", makeState([]), { expectedRevision: null });
    expect(again.revision).toBeGreaterThan(r1.revision);
    backend.close();
  });

  it("gc deletes sessions older than the limit, with their messages, and frees pages", () => {
    const dbPath = freshPath();
    const backend = new SQLiteBackend({ dbPath });
    for (const k of ["old-1", "old-2", "new-1"]) backend.save(k, makeState(msgs(300, `${k} ${"x".repeat(200)}`)));
    const raw = new Database(dbPath);
    raw.prepare("UPDATE sessions SET saved_at = '2020-01-01T00:00:00.000Z' WHERE key LIKE 'old-%'").run();
    const pagesBefore = raw.pragma("page_count", { simple: true }) as number;
    expect(backend.gc({ olderThanMs: 30 * 86_400_000 })).toEqual({ deleted: 2 });
    expect(backend.listKeys()).toEqual(["new-1"]);
    expect(raw.prepare("SELECT count(*) FROM messages").pluck().get()).toBe(300); // new-1's
    expect(raw.pragma("page_count", { simple: true }) as number).toBeLessThan(pagesBefore);
    expect(backend.gc({ olderThanMs: 0, vacuum: true })).toEqual({ deleted: 1 });
    expect(backend.listKeys()).toEqual([]);
    expect(() => backend.gc({ olderThanMs: Number.NaN })).toThrow(BackendError);
    raw.close();
    backend.close();
  });

  it("compressHistory stores large bodies gzip-compressed and reads any mix exactly", () => {
    const dbPath = freshPath();
    const plain = new SQLiteBackend({ dbPath });
    const small = msgs(3);
    plain.save("mixed", makeState(small));
    plain.close();
    const zipped = new SQLiteBackend({ dbPath, compressHistory: true });
    const big: Message[] = [...small, { role: "tool", tool_call_id: "c", content: "0123456789".repeat(1000) }];
    zipped.save("zipped", makeState(big));
    expect(zipped.load("mixed").history).toEqual(small);
    expect(zipped.load("zipped").history).toEqual(big);
    const raw = new Database(dbPath);
    const types = raw
      .prepare(`SELECT typeof(body) FROM messages WHERE ${rowsOf("zipped")} ORDER BY id`)
      .pluck()
      .all();
    expect(types).toEqual(["text", "text", "text", "blob"]);
    const size = raw
      .prepare(`SELECT length(body) FROM messages WHERE ${rowsOf("zipped")} AND ${SEQ} = 3`)
      .pluck()
      .get();
    expect(size as number).toBeLessThan(1000);
    raw.close();
    zipped.close();
  });
});
