/**
 * Sessions, a durable journal and workflow checkpoints sharing one SQLite file
 * in one process. The journal's and the cold store's transactions hold the
 * file's write lock across awaits; a session write on another connection used
 * to wait in SQLite's busy handler, which blocks the whole thread, so the lock
 * holder could never finish (a 5 s freeze, then SQLiteBusyError). On one
 * injected connection, a session write joined another component's open
 * transaction and was rolled back with it although reported saved.
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend, SQLiteBusyError } from "../../src/backends/sqlite.js";
import { SqliteDriver } from "../../src/drivers/sqlite.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { JournalIntegrityError } from "../../src/durable/errors.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { makeState } from "../../src/testing/states.js";
import { createWorkflowState } from "../../src/workflow/state.js";
import { CheckpointStore } from "../../src/workflow/store.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-shared-file-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const msg = (i: number) => ({ role: "user" as const, content: `m${i}` });

/** Longest gap between timer ticks while `work` runs (an event-loop freeze shows as a long gap). */
async function longestStall(work: () => Promise<void>): Promise<number> {
  let last = Date.now();
  let worst = 0;
  const tick = setInterval(() => {
    const now = Date.now();
    worst = Math.max(worst, now - last);
    last = now;
  }, 10);
  try {
    await work();
  } finally {
    clearInterval(tick);
  }
  return worst;
}

describe("one SQLite file, three components, one process", () => {
  it("sessions, journal and checkpoints write concurrently without errors or a frozen event loop (also through a symlinked path)", async () => {
    mkdirSync(path.join(dir, "real"));
    symlinkSync(path.join(dir, "real"), path.join(dir, "link"));
    const sessions = new SQLiteBackend({ path: path.join(dir, "real", "all.db") });
    const journal = new SqliteJournal({ path: path.join(dir, "link", "all.db") });
    const store = await CheckpointStore.open({
      cold: new SqliteColdStore({ path: path.join(dir, "real", "all.db") }),
      blobDir: path.join(dir, "blobs"),
    });
    const counts = { sessions: 0, runs: 0, checkpoints: 0 };
    const until = Date.now() + 1500;
    const stall = await longestStall(async () => {
      await Promise.all([
        (async () => {
          let revision: number | null = null;
          for (let i = 0; Date.now() < until; i++) {
            const history = Array.from({ length: i + 1 }, (_, k) => msg(k));
            ({ revision } = await sessions.write("chat", makeState(history), {
              expectedRevision: revision,
              baseLength: i,
            }));
            counts.sessions++;
          }
        })(),
        (async () => {
          for (let i = 0; Date.now() < until; i++) {
            await journal.createRun({ runId: `r${i}`, workflow: "w", input: null });
            await journal.acquireLease(`r${i}`, "me", 10_000);
            counts.runs++;
          }
        })(),
        (async () => {
          for (let i = 0; Date.now() < until; i++) {
            await store.save(createWorkflowState({ workflowId: `wf${i}` }));
            counts.checkpoints++;
          }
        })(),
      ]);
    });
    expect(stall, "the event loop froze").toBeLessThan(1000);
    expect(Math.min(counts.sessions, counts.runs, counts.checkpoints)).toBeGreaterThan(10);
    expect((await sessions.read("chat"))?.state.history).toHaveLength(counts.sessions);
    await store.close();
    await journal.close();
    sessions.close();
  });

  it("a synchronous session call while another component's transaction holds the file fails at once, typed", async () => {
    const file = path.join(dir, "sync.db");
    const sessions = new SQLiteBackend({ path: file });
    const journal = new SqliteJournal({ path: file });
    // Hold a journal transaction open across an await (as every journal operation does).
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    // Another component's driver on the same file (the journal's and the cold store's are this class).
    const other = new SqliteDriver("test", { path: file }, { component: "test", migrations: [] });
    const inTx = other.transaction("hold", undefined, () => held);
    await new Promise((r) => setTimeout(r, 20));
    const started = Date.now();
    expect(() => sessions.save("k", makeState([msg(0)]))).toThrow(SQLiteBusyError);
    expect(Date.now() - started).toBeLessThan(500);
    // The async path waits for the transaction instead.
    const write = sessions.write("k", makeState([msg(0)]), { expectedRevision: null });
    release();
    await inTx;
    expect((await write).revision).toBe(1);
    await other.close();
    await journal.close();
    sessions.close();
  });

  it("on one injected connection, a session save reported successful is never rolled back with another component's transaction", async () => {
    const db = new Database(path.join(dir, "shared-conn.db"));
    const sessions = new SQLiteBackend({ database: db });
    const journal = new SqliteJournal({ database: db });
    const { run } = await journal.createRun({ runId: "r", workflow: "w", input: null });
    const lease = await journal.acquireLease(run.runId, "me", 60_000);
    const token = lease.acquired ? lease.fencingToken : -1;
    const saved: string[] = [];
    await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        // A refused step write (a gap in the sequence) rolls its transaction back…
        await expect(
          journal.writeStep(token, {
            runId: "r",
            seq: 5,
            name: "x",
            inputHash: "h",
            status: "started",
            attempt: 1,
            startedAt: 0,
            fencingToken: token,
          }),
        ).rejects.toBeInstanceOf(JournalIntegrityError);
        // …and a session write issued meanwhile must not be part of it.
        await sessions.write(`k${i}`, makeState([msg(i)]), { expectedRevision: null });
        saved.push(`k${i}`);
      }),
    );
    expect((await sessions.listKeys()).sort()).toEqual(saved.sort());
    await journal.close();
    sessions.close();
    expect(db.open).toBe(true);
    db.close();
  });
});
