/**
 * SQLiteBackend's common save: an append after exactly what this connection
 * last wrote is a header UPDATE (the compare-and-set) plus the message INSERT,
 * and leaves `saved_at` alone when it was set less than a second before.
 * The general path must still take over whenever that shortcut's assumptions
 * do not hold (another connection wrote, the config changed).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { ConflictError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import { makeState } from "../../src/testing/states.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-sqlite-append-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(() => {
  vi.restoreAllMocks();
});
let n = 0;
const freshPath = () => path.join(dir, `a${n++}.db`);
const msgs = (count: number): Message[] =>
  Array.from({ length: count }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `m ${i}` }) as Message);

function savedAt(file: string, key: string): string {
  const db = new Database(file, { readonly: true });
  try {
    return db.prepare<[string], string>("SELECT saved_at FROM sessions WHERE key = ?").pluck().get(key) as string;
  } finally {
    db.close();
  }
}

describe("SQLite appends", () => {
  it("keep saved_at to within a second: unchanged within it, moved after it", async () => {
    const file = freshPath();
    const backend = new SQLiteBackend({ path: file });
    const t0 = Date.parse("2030-01-01T00:00:00.000Z");
    const clock = vi.spyOn(Date, "now").mockReturnValue(t0);
    const h = msgs(3);
    let rev = (await backend.write("k", makeState(h.slice(0, 1)))).revision;
    expect(savedAt(file, "k")).toBe("2030-01-01T00:00:00.000Z");
    clock.mockReturnValue(t0 + 400);
    rev = (await backend.write("k", makeState(h.slice(0, 2)), { expectedRevision: rev, baseLength: 1 })).revision;
    expect(savedAt(file, "k")).toBe("2030-01-01T00:00:00.000Z");
    clock.mockReturnValue(t0 + 1500);
    await backend.write("k", makeState(h), { expectedRevision: rev, baseLength: 2 });
    expect(savedAt(file, "k")).toBe("2030-01-01T00:00:01.500Z");
    expect((await backend.read("k"))?.state.history).toEqual(h);
    backend.close();
  });

  it("a write by another connection in between is a ConflictError for the stale writer, nothing appended", async () => {
    const file = freshPath();
    const a = new SQLiteBackend({ path: file });
    const b = new SQLiteBackend({ path: file });
    const h = msgs(4);
    const r1 = await a.write("k", makeState(h.slice(0, 2)));
    const read = await b.read("k");
    await b.write("k", makeState(h.slice(0, 3)), { expectedRevision: read?.revision, baseLength: 2 });
    await expect(
      a.write("k", makeState([...h.slice(0, 2), { role: "user", content: "lost?" }]), {
        expectedRevision: r1.revision,
        baseLength: 2,
      }),
    ).rejects.toBeInstanceOf(ConflictError);
    expect((await a.read("k"))?.state.history).toEqual(h.slice(0, 3));
    a.close();
    b.close();
  });

  it("an append with a changed config writes the config too", async () => {
    const backend = new SQLiteBackend({ path: freshPath() });
    const h = msgs(2);
    const r1 = await backend.write("k", makeState(h.slice(0, 1)));
    const next = makeState(h);
    next.config = { ...next.config, prompt: "a new prompt" };
    await backend.write("k", next, { expectedRevision: r1.revision, baseLength: 1 });
    const other = new SQLiteBackend({ path: backend.dbPath });
    expect((await other.read("k"))?.state).toEqual(next);
    other.close();
    backend.close();
  });
});
