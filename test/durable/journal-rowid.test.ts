/**
 * Journal migration 8 on SQLite: `steps` and `signals` are ordinary rowid tables, not `WITHOUT ROWID`
 * ones. In a `WITHOUT ROWID` table a row lives in its key's b-tree and SQLite reads a row that overflows
 * its page whole at each key comparison, so with 100 KB checkpoints every insert and every newest-step
 * probe read megabytes. A file at version 7 (written by the previous release, with a workflow's
 * checkpoints, the `workflow_snapshots` view and a signal) is rebuilt on open: the rows read back
 * equal, the view still answers the original design's query, and the workflow goes on.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { SqliteDriver } from "../../src/drivers/sqlite.js";
import { workflowJournalMigrations } from "../../src/durable/checkpoints/migrate.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { sqlJournalMigrations } from "../../src/durable/journal-sql-schema.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { CheckpointStore, createWorkflowState } from "../../src/workflow/index.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-journal-rowid-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const SQLITE = { table: (n: string) => `"${n}"`, bigint: "INTEGER", keyed: " WITHOUT ROWID" };
const big = Array.from({ length: 250 }, (_, i) => `message ${i} ${"x".repeat(400)}`); // ~100 KB: overflow pages

/** `CREATE TABLE` text of each journal table of a file. */
function tableSql(file: string): Record<string, string> {
  const db = new Database(file, { readonly: true });
  try {
    const rows = db.prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table'").all() as {
      name: string;
      sql: string;
    }[];
    return Object.fromEntries(rows.map((r) => [r.name, r.sql]));
  } finally {
    db.close();
  }
}

const NEWEST = "SELECT state_json FROM workflow_snapshots WHERE workflow_id = ? ORDER BY step_index DESC LIMIT 1";

describe("journal migration 8 (SQLite): steps and signals in rowid tables", () => {
  it("a new file's steps and signals tables are rowid tables", async () => {
    const file = path.join(dir, "fresh.db");
    const journal = new SqliteJournal({ path: file });
    await journal.listRuns({ limit: 1 });
    await journal.close();
    const sql = tableSql(file);
    for (const t of ["durable_steps", "durable_signals"]) {
      expect(sql[t], t).toBeDefined();
      expect(sql[t], t).not.toMatch(/WITHOUT ROWID/i);
    }
    // the small keyed tables stay as they were
    expect(sql.durable_events).toMatch(/WITHOUT ROWID/i);
  });

  it("a file at version 7 is rebuilt on open: rows equal, the view answers, the workflow goes on", async () => {
    // The rows, as this build writes them: two checkpoints of a ~100 KB state and a signal.
    const source = path.join(dir, "source.db");
    const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: source }) });
    let state = createWorkflowState({ workflowId: "w", sharedMemory: { big } as never, now: 1 });
    state = await store.save(state, { expectedStep: null });
    state = await store.save({ ...state, stepIndex: 1, currentNode: "b" }, { expectedStep: 0 });
    await store.close();
    const signals = new SqliteJournal({ path: source });
    await signals.sendSignal("w", "go", { ok: true });
    const stepsBefore = await signals.readSteps("w");
    await signals.close();

    // A file of the previous release: the journal's migrations 1–7 (WITHOUT ROWID steps and signals),
    // the workflow component (its view), and the same rows.
    const old = path.join(dir, "v7.db");
    const driver = new SqliteDriver(
      "sqlite",
      { path: old },
      [
        { component: "journal", migrations: sqlJournalMigrations("durable_", SQLITE).filter((m) => m.version <= 7) },
        workflowJournalMigrations("durable_"),
      ],
      { incrementalVacuum: true },
    );
    driver.db.exec(`ATTACH DATABASE '${source.replaceAll("'", "''")}' AS src`);
    for (const t of ["durable_runs", "durable_steps", "durable_signals", "durable_events"]) {
      driver.db.exec(`INSERT INTO main."${t}" SELECT * FROM src."${t}"`);
    }
    driver.db.exec("DETACH DATABASE src");
    await driver.close();
    const before = tableSql(old);
    expect(before.durable_steps).toMatch(/WITHOUT ROWID/i);
    expect(before.durable_signals).toMatch(/WITHOUT ROWID/i);
    const newestBefore = new Database(old, { readonly: true }).prepare(NEWEST).get("w") as { state_json: string };
    expect(JSON.parse(newestBefore.state_json).stepIndex).toBe(1);

    // Opened by this build: rebuilt once, the rows and the view as they were.
    const reopened = await CheckpointStore.open({ cold: new SqliteColdStore({ path: old }) });
    try {
      const after = tableSql(old);
      expect(after.durable_steps).not.toMatch(/WITHOUT ROWID/i);
      expect(after.durable_signals).not.toMatch(/WITHOUT ROWID/i);
      expect(Object.keys(after).filter((t) => t.endsWith("_rowid"))).toEqual([]);
      const latest = await reopened.loadLatest("w");
      if (latest === undefined) throw new Error("no checkpoint after the migration");
      expect(latest.stepIndex).toBe(1);
      expect((latest.sharedMemory as { big: string[] }).big).toEqual(big);
      // the workflow goes on from its newest checkpoint
      await reopened.save({ ...latest, stepIndex: 2, currentNode: "c" }, { expectedStep: 1 });
    } finally {
      await reopened.close();
    }
    const db = new Database(old, { readonly: true });
    try {
      expect(JSON.parse((db.prepare(NEWEST).get("w") as { state_json: string }).state_json).stepIndex).toBe(2);
      const ledger = db
        .prepare("SELECT MAX(version) AS v FROM dumplings_migrations WHERE component = 'journal'")
        .get() as { v: number };
      expect(ledger.v).toBe(8);
      const indexes = (
        db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'durable_steps'").all() as {
          name: string;
        }[]
      ).map((r) => r.name);
      expect(indexes).toContain("durable_steps_snapshot");
      expect(db.prepare("PRAGMA integrity_check").pluck().get()).toBe("ok");
    } finally {
      db.close();
    }
    const journal = new SqliteJournal({ path: old });
    try {
      expect((await journal.readSteps("w")).slice(0, stepsBefore.length)).toEqual(stepsBefore);
      expect((await journal.getSignal("w", "go"))?.value).toEqual({ ok: true });
    } finally {
      await journal.close();
    }
  });
});
