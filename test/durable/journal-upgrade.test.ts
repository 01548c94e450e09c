/**
 * A journal written before migrations 4–7 (the DDL of versions 1–3, as released, copied below) opened by
 * this build: the migrations run, the old rows read back, and every new feature works on them. And a
 * journal of the previous release (versions 1–6, on SQLite and PostgreSQL) gets version 7, the indexes
 * of the listing by creation: its runs list newest created first, each once while they change.
 */
import { createHash, randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { InvalidOptionError } from "../../src/core/errors.js";
import { PostgresDriver } from "../../src/drivers/postgres.js";
import { SqliteDriver } from "../../src/drivers/sqlite.js";
import { runCursor } from "../../src/durable/journal.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { sqlJournalMigrations } from "../../src/durable/journal-sql-schema.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const pgSkip = await postgresSkipReason();

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
      // listed newest created first (c: 1002, b: 1001, a: 1000; their updated_at run the other way), in pages
      const first = await journal.listRuns({ limit: 2 });
      expect(first.map((r) => r.runId)).toEqual(["c", "b"]);
      expect((await journal.listRuns({ after: runCursor(first[1]!) })).map((r) => r.runId)).toEqual(["a"]);
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

/** The journal's migrations 1–6: the tables of the previous release (a released version is never edited). */
const previous = (dialect: Parameters<typeof sqlJournalMigrations>[1]) =>
  sqlJournalMigrations("durable_", dialect).filter((m) => m.version <= 6);

const LISTING_INDEXES = [
  "durable_runs_created",
  "durable_runs_status_created",
  "durable_runs_workflow_created",
  "durable_runs_workflow_status_created",
];
const UPDATED_INDEXES = ["durable_runs_updated", "durable_runs_status_updated", "durable_runs_workflow_updated"];

/** Five runs r0…r4 of workflow `graph`, created at 1000 + i, updated in the other order (5000 - i). */
const OLD_RUNS = [0, 1, 2, 3, 4].map((i) => [`r${i}`, 1000 + i, 5000 - i] as const);
const INSERT_RUN = `INSERT INTO durable_runs (run_id, workflow, status, input_json, fencing_token, created_at, updated_at, event_count)
  VALUES ($1, 'graph', 'waiting', 'null', 0, $2, $3, 0)`;

/** Checks the listing of {@link OLD_RUNS} on a journal migrated to 7: by creation, each once while runs change. */
async function listsOldRunsByCreation(journal: SqliteJournal | PostgresJournal): Promise<void> {
  expect((await journal.listRuns()).map((r) => r.runId)).toEqual(["r4", "r3", "r2", "r1", "r0"]);
  const seen: string[] = [];
  let after: string | undefined;
  for (let n = 0; n < 10; n++) {
    const page = await journal.listRuns({
      workflow: "graph",
      status: "waiting",
      limit: 2,
      ...(after ? { after } : {}),
    });
    if (page.length === 0) break;
    seen.push(...page.map((r) => r.runId));
    after = runCursor(page.at(-1)!);
    // the oldest run, not listed yet, is leased: its updated_at becomes the newest
    if (!seen.includes("r0")) await journal.acquireLease("r0", "w", 10_000);
  }
  expect(seen).toEqual(["r4", "r3", "r2", "r1", "r0"]);
  // a cursor of the previous release ([updatedAt, runId]) is refused with a typed error that says what to do
  const old = Buffer.from(JSON.stringify([4996, "r4"]), "utf8").toString("base64url");
  const refused = await journal.listRuns({ after: old }).catch((e: unknown) => e);
  expect(refused).toBeInstanceOf(InvalidOptionError);
  expect((refused as Error).message).toMatch(/earlier release.*first page/);
}

describe("a journal of the previous release (migrations 1–6) gets the listing's indexes (7)", () => {
  it("SQLite: the indexes by creation replace those by update; the listing uses them", async () => {
    const file = path.join(dir, "v6.db");
    const old = new SqliteDriver(
      "sqlite",
      { path: file },
      {
        component: "journal",
        migrations: previous({ table: (n) => `"${n}"`, bigint: "INTEGER", keyed: " WITHOUT ROWID" }),
      },
      { incrementalVacuum: true },
    );
    const indexes = (db: SqliteDriver["db"]) =>
      (db.prepare("SELECT name FROM sqlite_master WHERE type = 'index'").all() as { name: string }[]).map(
        (r) => r.name,
      );
    expect(indexes(old.db)).toEqual(expect.arrayContaining(UPDATED_INDEXES));
    for (const [id, created, updated] of OLD_RUNS)
      old.db.prepare(INSERT_RUN.replace(/\$\d/g, "?")).run(id, created, updated);
    await old.close();

    const journal = new SqliteJournal({ path: file });
    try {
      const now = indexes(journal.db);
      expect(now).toEqual(expect.arrayContaining(LISTING_INDEXES));
      for (const gone of UPDATED_INDEXES) expect(now).not.toContain(gone);
      // each filter's query is served by its index, in order (no sort of its own)
      for (const [filter, index] of [
        [{}, "durable_runs_created"],
        [{ status: "waiting" }, "durable_runs_status_created"],
        [{ workflow: "graph" }, "durable_runs_workflow_created"],
        [{ workflow: "graph", status: "waiting" }, "durable_runs_workflow_status_created"],
      ] as const) {
        const plan = await journal.explainListRuns({
          ...filter,
          limit: 3,
          after: runCursor({ createdAt: 1003, runId: "r3" }),
        });
        expect(plan, JSON.stringify(filter)).toMatch(new RegExp(`USING (COVERING )?INDEX ${index}\\b`));
        expect(plan, JSON.stringify(filter)).not.toMatch(/TEMP B-TREE/);
      }
      await listsOldRunsByCreation(journal);
    } finally {
      await journal.close();
    }
  });

  it.skipIf(pgSkip)("PostgreSQL: the indexes by creation replace those by update", async () => {
    const schema = `dju_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    try {
      const old = new PostgresDriver(
        "postgres",
        { pool, schema },
        { component: "journal", migrations: previous({ table: (n) => `{s}."${n}"`, bigint: "BIGINT", keyed: "" }) },
      );
      await old.query("seed", undefined, `SELECT 1`, []);
      const indexes = async () =>
        (await pool.query("SELECT indexname FROM pg_indexes WHERE schemaname = $1", [schema])).rows.map(
          (r: { indexname: string }) => r.indexname,
        );
      expect(await indexes()).toEqual(expect.arrayContaining(UPDATED_INDEXES));
      for (const [id, created, updated] of OLD_RUNS) {
        await pool.query(INSERT_RUN.replace("durable_runs", `"${schema}".durable_runs`), [id, created, updated]);
      }
      await old.close();
      const journal = new PostgresJournal({ pool, schema });
      try {
        await journal.listRuns({ limit: 1 }); // the first call migrates
        const now = await indexes();
        expect(now).toEqual(expect.arrayContaining(LISTING_INDEXES));
        for (const gone of UPDATED_INDEXES) expect(now).not.toContain(gone);
        await listsOldRunsByCreation(journal);
      } finally {
        await journal.close();
      }
    } finally {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    }
  });
});
