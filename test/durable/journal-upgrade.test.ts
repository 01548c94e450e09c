/**
 * A journal written before migrations 4–6 (the DDL of versions 1–3, as released, copied below) opened by
 * this build: the migrations run, the old rows read back, and every new feature works on them.
 */
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SqliteDriver } from "../../src/drivers/sqlite.js";
import { runCursor } from "../../src/durable/journal.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";

/** The journal's migrations 1–3 as released before issue 22 (SQLite spelling, prefix `durable_`). */
const RELEASED_V3 = [
  {
    version: 1,
    name: "runs, steps, signals and events",
    up: [
      `CREATE TABLE IF NOT EXISTS "durable_runs" (
        run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, status TEXT NOT NULL, input_json TEXT NOT NULL,
        output_json TEXT, error_json TEXT, waiting_for TEXT, wake_at INTEGER,
        fencing_token INTEGER NOT NULL DEFAULT 0, lease_owner TEXT, lease_expires_at INTEGER,
        created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL)`,
      `CREATE INDEX IF NOT EXISTS durable_runs_status ON "durable_runs" (status, created_at)`,
      `CREATE TABLE IF NOT EXISTS "durable_steps" (
        run_id TEXT NOT NULL, seq INTEGER NOT NULL, name TEXT NOT NULL, input_hash TEXT NOT NULL,
        status TEXT NOT NULL, output_json TEXT, error_json TEXT, attempt INTEGER NOT NULL,
        started_at INTEGER NOT NULL, finished_at INTEGER, fencing_token INTEGER NOT NULL,
        PRIMARY KEY (run_id, seq)) WITHOUT ROWID`,
      `CREATE TABLE IF NOT EXISTS "durable_signals" (
        run_id TEXT NOT NULL, name TEXT NOT NULL, value_json TEXT NOT NULL, sent_at INTEGER NOT NULL,
        PRIMARY KEY (run_id, name)) WITHOUT ROWID`,
      `CREATE TABLE IF NOT EXISTS "durable_events" (
        run_id TEXT NOT NULL, idx INTEGER NOT NULL, type TEXT NOT NULL, at INTEGER NOT NULL,
        seq INTEGER, name TEXT, attempt INTEGER, fencing_token INTEGER,
        PRIMARY KEY (run_id, idx)) WITHOUT ROWID`,
    ],
  },
  {
    version: 2,
    name: "per-run event counter",
    up: [
      `ALTER TABLE "durable_runs" ADD COLUMN event_count INTEGER NOT NULL DEFAULT 0`,
      `UPDATE "durable_runs" SET event_count =
        (SELECT COALESCE(MAX(e.idx) + 1, 0) FROM "durable_events" e WHERE e.run_id = "durable_runs".run_id)`,
    ],
  },
  {
    version: 3,
    name: "event author and detail",
    up: [`ALTER TABLE "durable_events" ADD COLUMN by_name TEXT`, `ALTER TABLE "durable_events" ADD COLUMN detail TEXT`],
  },
];

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-journal-upgrade-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("SqliteJournal on a file of the previous release (migrations 1–3)", () => {
  it("migrates to this build's tables; old runs list, page, take snapshot steps, blobs and prunes", async () => {
    const file = path.join(dir, "v3.db");
    const old = new SqliteDriver(
      "sqlite",
      { path: file },
      { component: "journal", migrations: RELEASED_V3 },
      { incrementalVacuum: true },
    );
    const tablesBefore = (
      old.db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]
    ).map((t) => t.name);
    for (const [i, id] of ["a", "b", "c"].entries()) {
      old.db
        .prepare(
          `INSERT INTO durable_runs (run_id, workflow, status, input_json, fencing_token, created_at, updated_at, event_count)
           VALUES (?, 'graph', 'pending', 'null', 1, ?, ?, 0)`,
        )
        .run(id, 1000 + i, 2000 - i);
    }
    for (let seq = 0; seq < 3; seq++) {
      old.db
        .prepare(
          `INSERT INTO durable_steps (run_id, seq, name, input_hash, status, output_json, attempt, started_at, finished_at, fencing_token)
           VALUES ('a', ?, ?, 'h', 'completed', ?, 1, 1, 1, 1)`,
        )
        .run(seq, `checkpoint:${seq}`, JSON.stringify({ seq }));
    }
    await old.close();

    const journal = new SqliteJournal({ path: file });
    try {
      const tablesAfter = (
        journal.db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]
      ).map((t) => t.name);
      expect(tablesAfter.filter((t) => !tablesBefore.includes(t)).sort()).toEqual([
        "durable_blob_refs",
        "durable_blobs",
      ]);
      // listed by updated_at (a: 2000, b: 1999, c: 1998), in pages
      const first = await journal.listRuns({ limit: 2 });
      expect(first.map((r) => r.runId)).toEqual(["a", "b"]);
      expect((await journal.listRuns({ after: runCursor(first[1]!) })).map((r) => r.runId)).toEqual(["c"]);
      expect((await journal.readSteps("a", { namePrefix: "checkpoint:", last: 1 })).map((s) => s.seq)).toEqual([2]);
      // a snapshot step with a blob on the old run, then a prune
      const l = await journal.acquireLease("a", "w", 10_000);
      if (!l.acquired) throw new Error("lease");
      const bytes = new Uint8Array([1, 2, 3]);
      const ref = createHash("sha256").update(bytes).digest("hex");
      await journal.writeStep(
        l.fencingToken,
        {
          runId: "a",
          seq: 3,
          name: "checkpoint:3",
          inputHash: "h",
          status: "completed",
          output: { ref },
          attempt: 1,
          startedAt: 1,
          finishedAt: 1,
          fencingToken: l.fencingToken,
        },
        { snapshot: true, blobs: new Map([[ref, bytes]]), blobRefs: [ref] },
      );
      expect(await journal.readBlob(ref)).toEqual(bytes);
      expect(await journal.pruneRuns({ olderThanMs: 0 })).toEqual({ deletedSteps: 3, deletedBlobs: 0 });
      expect((await journal.readSteps("a")).map((s) => [s.seq, s.snapshot])).toEqual([[3, true]]);
    } finally {
      await journal.close();
    }
  });
});
