/**
 * SQLiteBackend specifics beyond the conformance suite: schema and WAL, the
 * seed-schema migration, corrupt rows, driver errors, busy handling (pb-15),
 * retention (gc), compressed bodies, delete leaving no rows (pb-26), and
 * O(new messages) writes.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend, SQLiteBusyError } from "../../src/backends/sqlite.js";
import { BackendError, ConflictError, FormatError, StateNotFoundError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import { loadSampleConversations } from "../../src/testing/samples.js";
import { makeState } from "../../src/testing/states.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-sqlite-schema-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const freshPath = () => path.join(dir, `s${n++}.db`);

const msgs = (count: number, seed = "m"): Message[] =>
  Array.from({ length: count }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `${seed} ${i}` }) as Message);

describe("SQLiteBackend schema and connections", () => {
  it("creates the documented schema in WAL mode, on every connection (pb-15)", () => {
    const dbPath = freshPath();
    const backend = new SQLiteBackend({ dbPath });
    backend.save("a", makeState(msgs(3)));
    const raw = new Database(dbPath);
    expect(raw.pragma("journal_mode", { simple: true })).toBe("wal");
    expect(raw.pragma("user_version", { simple: true })).toBe(1);
    const tables = raw.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").pluck().all();
    expect(tables).toEqual(["dumplings_meta", "dumplings_migrations", "messages", "sessions"]);
    const ledger = raw.prepare("SELECT component, version FROM dumplings_migrations").all();
    expect(ledger).toEqual([{ component: "sessions", version: 1 }]);
    const row = raw
      .prepare("SELECT history, revision, message_count, saved_at FROM sessions WHERE key = 'a'")
      .get() as {
      history: unknown;
      revision: number;
      message_count: number;
      saved_at: string;
    };
    expect(row).toMatchObject({ history: null, revision: 1, message_count: 3 });
    expect(new Date(row.saved_at).toISOString()).toBe(row.saved_at);
    expect(raw.prepare("SELECT seq, body FROM messages WHERE session_key = 'a' ORDER BY seq").raw().all()).toEqual([
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
    const rowids = () => raw.prepare("SELECT rowid FROM messages WHERE session_key = 'k' ORDER BY seq").pluck().all();
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
    expect(raw.pragma("user_version", { simple: true })).toBe(1);
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
    const first = new SQLiteBackend({ dbPath });
    first.save("old", makeState(msgs(4)));
    first.close();
    // What 0.1 left: the same tables, user_version 1, no ledger.
    const raw = new Database(dbPath);
    raw.exec("DROP TABLE dumplings_migrations");
    raw.close();
    const backend = new SQLiteBackend({ dbPath });
    expect(backend.load("old").history).toEqual(msgs(4));
    const check = new Database(dbPath);
    expect(check.prepare("SELECT component, version, name FROM dumplings_migrations").all()).toEqual([
      { component: "sessions", version: 1, name: "sessions and messages (adopted)" },
    ]);
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
    raw.prepare("UPDATE messages SET body = '{\"role\":' WHERE session_key = 'body' AND seq = 2").run();
    raw.prepare("DELETE FROM messages WHERE session_key = 'missing' AND seq = 1").run();
    raw.prepare("UPDATE messages SET body = x'1f8b0800' WHERE session_key = 'gzip' AND seq = 0").run();
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
    expect(raw.prepare("SELECT count(*) FROM messages WHERE session_key = 't26'").pluck().get()).toBe(0);
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
    expect(raw.prepare("SELECT count(*) FROM messages WHERE session_key LIKE 'old-%'").pluck().get()).toBe(0);
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
      .prepare("SELECT typeof(body) FROM messages WHERE session_key = 'zipped' ORDER BY seq")
      .pluck()
      .all();
    expect(types).toEqual(["text", "text", "text", "blob"]);
    const size = raw
      .prepare("SELECT length(body) FROM messages WHERE session_key = 'zipped' AND seq = 3")
      .pluck()
      .get();
    expect(size as number).toBeLessThan(1000);
    raw.close();
    zipped.close();
  });

  it("iterHistory refuses to mix two versions when the session changes mid-iteration", async () => {
    const backend = new SQLiteBackend({ dbPath: freshPath() });
    const r1 = await backend.write("k", makeState(msgs(1500)));
    const it = backend.iterHistory("k")[Symbol.asyncIterator]();
    expect((await it.next()).value).toEqual(msgs(1)[0]);
    await backend.write("k", makeState(msgs(1501)), { expectedRevision: r1.revision, baseLength: 1500 });
    let error: unknown;
    try {
      for (let i = 0; i < 1500; i++) await it.next();
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConflictError);
    backend.close();
  });
});
