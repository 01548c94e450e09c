/**
 * The SQL journal beyond the conformance suite: journals written by the
 * previous release (no migration ledger, no event counter) are adopted and
 * continue, and two journal instances on one SQLite file or one PostgreSQL
 * schema (two processes, in effect: two connections) interleave their writes
 * without losing or duplicating anything.
 */
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { BackendError, InvalidOptionError } from "../../src/core/errors.js";
import { RunNotFoundError, SignalConflictError, StaleFencingTokenError } from "../../src/durable/errors.js";
import type { Journal, StepRecord } from "../../src/durable/journal.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { sqlJournalMigrations } from "../../src/durable/journal-sql-schema.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const pgSkip = await postgresSkipReason();
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
const tempDir = () => {
  const d = mkdtempSync(path.join(tmpdir(), "dumplings-journal-sql-"));
  dirs.push(d);
  return d;
};
const schemaName = () => `djs_${randomUUID().replaceAll("-", "").slice(0, 16)}`;

const started = { inputHash: "h".repeat(64), status: "started", attempt: 1 } as const;
/** Step `seq` of `runId` (named `s<seq>`), written with `token`: a first attempt just started, unless `patch` says otherwise. */
const rec = (runId: string, seq: number, token: number, patch: Partial<StepRecord> = {}): StepRecord => ({
  ...started,
  ...{ runId, seq, name: `s${seq}`, startedAt: Date.now(), fencingToken: token },
  ...patch,
});

// ---- the previous release's DDL (dumplings-ai 0.1), verbatim but for the names ----

const legacySqlite = (p: string) => `
  CREATE TABLE IF NOT EXISTS ${p}runs (
    run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, status TEXT NOT NULL, input_json TEXT NOT NULL,
    output_json TEXT, error_json TEXT, waiting_for TEXT, wake_at INTEGER,
    fencing_token INTEGER NOT NULL DEFAULT 0, lease_owner TEXT, lease_expires_at INTEGER,
    created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
  CREATE INDEX IF NOT EXISTS ${p}runs_status ON ${p}runs (status, created_at);
  CREATE TABLE IF NOT EXISTS ${p}steps (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, name TEXT NOT NULL, input_hash TEXT NOT NULL,
    status TEXT NOT NULL, output_json TEXT, error_json TEXT, attempt INTEGER NOT NULL,
    started_at INTEGER NOT NULL, finished_at INTEGER, fencing_token INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS ${p}signals (
    run_id TEXT NOT NULL, name TEXT NOT NULL, value_json TEXT NOT NULL, sent_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, name)) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS ${p}events (
    run_id TEXT NOT NULL, idx INTEGER NOT NULL, type TEXT NOT NULL, at INTEGER NOT NULL,
    seq INTEGER, name TEXT, attempt INTEGER, fencing_token INTEGER,
    PRIMARY KEY (run_id, idx)) WITHOUT ROWID;`;

const legacyPostgres = (s: string) => {
  const t = (n: string) => `"${s}"."${n}"`;
  return `
  CREATE SCHEMA IF NOT EXISTS "${s}";
  CREATE TABLE IF NOT EXISTS ${t("durable_runs")} (
    run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, status TEXT NOT NULL, input_json TEXT NOT NULL,
    output_json TEXT, error_json TEXT, waiting_for TEXT, wake_at BIGINT,
    fencing_token BIGINT NOT NULL DEFAULT 0, lease_owner TEXT, lease_expires_at BIGINT,
    created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL);
  CREATE INDEX IF NOT EXISTS durable_runs_status ON ${t("durable_runs")} (status, created_at);
  CREATE TABLE IF NOT EXISTS ${t("durable_steps")} (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, name TEXT NOT NULL, input_hash TEXT NOT NULL,
    status TEXT NOT NULL, output_json TEXT, error_json TEXT, attempt INTEGER NOT NULL,
    started_at BIGINT NOT NULL, finished_at BIGINT, fencing_token BIGINT NOT NULL,
    PRIMARY KEY (run_id, seq));
  CREATE TABLE IF NOT EXISTS ${t("durable_signals")} (
    run_id TEXT NOT NULL, name TEXT NOT NULL, value_json TEXT NOT NULL, sent_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, name));
  CREATE TABLE IF NOT EXISTS ${t("durable_events")} (
    run_id TEXT NOT NULL, idx INTEGER NOT NULL, type TEXT NOT NULL, at BIGINT NOT NULL,
    seq INTEGER, name TEXT, attempt INTEGER, fencing_token BIGINT,
    PRIMARY KEY (run_id, idx));`;
};

/** A run as the previous release left it: leased with token 1, one completed step, a signal and four events. */
const legacyRows = (t: (n: string) => string, runId: string) => {
  const now = 1_700_000_000_000;
  return [
    `INSERT INTO ${t("runs")} VALUES ('${runId}', 'wf', 'running', '{"q":"héllo"}', NULL, NULL, NULL, NULL, 1, 'old-worker', ${now + 60_000}, ${now}, ${now})`,
    `INSERT INTO ${t("steps")} VALUES ('${runId}', 0, 'llm', '${"h".repeat(64)}', 'completed', '{"text":"hi"}', NULL, 1, ${now}, ${now + 5}, 1)`,
    `INSERT INTO ${t("signals")} VALUES ('${runId}', 'early', '[1,"two"]', ${now + 1})`,
    `INSERT INTO ${t("events")} VALUES ('${runId}', 0, 'run_created', ${now}, NULL, 'wf', NULL, NULL)`,
    `INSERT INTO ${t("events")} VALUES ('${runId}', 1, 'lease_acquired', ${now}, NULL, 'old-worker', NULL, 1)`,
    `INSERT INTO ${t("events")} VALUES ('${runId}', 2, 'step_started', ${now}, 0, 'llm', 1, 1)`,
    `INSERT INTO ${t("events")} VALUES ('${runId}', 3, 'step_completed', ${now + 5}, 0, 'llm', 1, 1)`,
  ];
};

/** Opens a migrated legacy journal and checks that the run reads back and that its audit log continues. */
async function continuesLegacyRun(journal: Journal, runId: string, otherRunId: string): Promise<void> {
  const run = await journal.getRun(runId);
  expect(run).toMatchObject({ runId, workflow: "wf", status: "running", input: { q: "héllo" }, fencingToken: 1 });
  expect(run?.leaseOwner).toBe("old-worker");
  expect((await journal.readSteps(runId)).map((s) => [s.seq, s.name, s.status, s.output])).toEqual([
    [0, "llm", "completed", { text: "hi" }],
  ]);
  expect((await journal.getSignal(runId, "early"))?.value).toEqual([1, "two"]);
  await journal.writeStep(1, rec(runId, 1, 1));
  const lease = await journal.acquireLease(runId, "old-worker", 10_000);
  expect(lease).toMatchObject({ acquired: true, fencingToken: 2 });
  await journal.sendSignal(runId, "go", true);
  const events = await journal.readEvents(runId);
  expect(events.map((e) => [e.index, e.type])).toEqual([
    [0, "run_created"],
    [1, "lease_acquired"],
    [2, "step_started"],
    [3, "step_completed"],
    [4, "step_started"],
    [5, "lease_acquired"],
    [6, "signal_received"],
  ]);
  // a run of the old release without any event (none can exist, but the backfill must not care) starts at 0
  expect((await journal.readEvents(otherRunId)).map((e) => e.index)).toEqual([]);
  await journal.createRun({ runId: `${runId}-new`, workflow: "wf", input: null });
  expect((await journal.readEvents(`${runId}-new`)).map((e) => [e.index, e.type])).toEqual([[0, "run_created"]]);
  // migration 3: the old events read back without author or detail; an operator's event keeps both
  for (const e of await journal.readEvents(runId)) expect([e.by, e.detail]).toEqual([undefined, undefined]);
  await journal.cancelRun(runId, "ops@host", "moved to the new cluster");
  expect((await journal.readEvents(runId)).at(-1)).toMatchObject({
    index: 7,
    type: "run_cancelled",
    by: "ops@host",
    detail: "moved to the new cluster",
    fencingToken: 3,
  });
  await expect(journal.writeStep(2, rec(runId, 2, 2))).rejects.toBeInstanceOf(StaleFencingTokenError);
}

/**
 * Two journals on one store interleave writes on the same runs: leases, steps and
 * signals from both, in parallel. Nothing is lost or duplicated; audit indexes stay 0..n-1.
 */
async function interleave(a: Journal, b: Journal): Promise<void> {
  const ids = Array.from({ length: 6 }, () => `run-${randomUUID()}`);
  // both create every run at once: each run is created exactly once
  const creates = await Promise.all(
    ids.flatMap((id) => [a, b].map((j) => j.createRun({ runId: id, workflow: "wf", input: { id } }))),
  );
  expect(creates.filter((c) => c.created)).toHaveLength(ids.length);
  // 8 lease takers per run, alternating journals: exactly one wins, token 1
  const leases = await Promise.all(
    ids.map(async (id) => {
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) => (i % 2 ? a : b).acquireLease(id, `owner-${i}`, 30_000)),
      );
      const won = results.filter((r) => r.acquired);
      expect(won).toHaveLength(1);
      return won[0]!.fencingToken;
    }),
  );
  expect(leases).toEqual(ids.map(() => 1));
  // steps written alternately by the two journals, runs in parallel; signals raced from both
  await Promise.all(
    ids.map(async (id) => {
      for (let seq = 0; seq < 6; seq++) {
        const j = seq % 2 ? a : b;
        await j.writeStep(1, rec(id, seq, 1));
        await (seq % 2 ? b : a).writeStep(1, rec(id, seq, 1, { status: "completed", output: { seq } }));
      }
      const signals = await Promise.allSettled([a.sendSignal(id, "go", 1), b.sendSignal(id, "go", 2)]);
      expect(signals.filter((s) => s.status === "fulfilled")).toHaveLength(1);
      for (const s of signals) if (s.status === "rejected") expect(s.reason).toBeInstanceOf(SignalConflictError);
    }),
  );
  // another owner takes over through the other journal: the old token is fenced out on both
  const id = ids[0]!;
  await a.releaseLease(id, 1);
  const taken = await b.acquireLease(id, "late", 30_000);
  expect(taken).toMatchObject({ acquired: true, fencingToken: 2 });
  await expect(a.writeStep(1, rec(id, 6, 1))).rejects.toBeInstanceOf(StaleFencingTokenError);
  for (const runId of ids) {
    for (const j of [a, b]) {
      const steps = await j.readSteps(runId);
      expect(steps.map((s) => [s.seq, s.status])).toEqual(Array.from({ length: 6 }, (_, i) => [i, "completed"]));
      const events = await j.readEvents(runId);
      // run_created + 1 lease + 12 step events + 1 signal (+ the takeover's lease on the first run)
      expect(events).toHaveLength(runId === id ? 16 : 15);
      expect(events.map((e) => e.index)).toEqual(events.map((_, i) => i));
    }
  }
  await b.deleteRun(id);
  expect(await a.getRun(id)).toBeUndefined();
  await expect(a.acquireLease(id, "x", 10)).rejects.toBeInstanceOf(RunNotFoundError);
}

/** The ledger of a journal migrated by this build: every version of the journal's migrations. */
const LEDGER = sqlJournalMigrations("durable_", { table: (n) => n, bigint: "INTEGER", keyed: "" }).map((m) => ({
  component: "journal",
  version: m.version,
}));

describe("SqliteJournal", () => {
  it("adopts a journal file written by the previous release: the run reads back, new events continue its index", async () => {
    const file = path.join(tempDir(), "old.db");
    const old = new Database(file);
    old.pragma("journal_mode = WAL");
    old.exec(legacySqlite("durable_"));
    for (const sql of legacyRows((n) => `durable_${n}`, "legacy-1")) old.exec(sql);
    old.exec(
      `INSERT INTO durable_runs VALUES ('legacy-2', 'wf', 'pending', 'null', NULL, NULL, NULL, NULL, 0, NULL, NULL, 1, 1)`,
    );
    old.close();

    const journal = new SqliteJournal({ path: file });
    try {
      await continuesLegacyRun(journal, "legacy-1", "legacy-2");
      const ledger = journal.db
        .prepare("SELECT component, version FROM dumplings_migrations ORDER BY version")
        .all() as { component: string; version: number }[];
      expect(ledger).toEqual(LEDGER);
    } finally {
      await journal.close();
    }
    // a second open runs nothing again and reads the same
    const again = new SqliteJournal({ path: file });
    expect((await again.readEvents("legacy-1")).length).toBe(8);
    await again.close();
  });

  it("adopts a legacy journal with a custom table prefix under its own ledger entry", async () => {
    const file = path.join(tempDir(), "prefixed.db");
    const old = new Database(file);
    old.exec(legacySqlite("app_"));
    for (const sql of legacyRows((n) => `app_${n}`, "legacy-1")) old.exec(sql);
    old.close();
    const journal = new SqliteJournal({ path: file, tablePrefix: "app_" });
    const plain = new SqliteJournal({ path: file });
    try {
      await continuesLegacyRun(journal, "legacy-1", "none");
      expect(await plain.getRun("legacy-1")).toBeUndefined();
      const components = journal.db.prepare("SELECT DISTINCT component FROM dumplings_migrations ORDER BY 1").all();
      expect(components).toEqual([{ component: "journal" }, { component: "journal:app_" }]);
    } finally {
      await journal.close();
      await plain.close();
    }
  });

  it("keeps numbering events when a writer of the previous release appends one during a rolling upgrade", async () => {
    const journal = new SqliteJournal({ path: path.join(tempDir(), "mixed.db") });
    try {
      await journal.createRun({ runId: "r", workflow: "wf", input: null });
      // the old release numbers an event by counting the run's events, and leaves event_count alone
      journal.db
        .prepare(
          "INSERT INTO durable_events (run_id, idx, type, at) SELECT 'r', COUNT(*), 'signal_received', 1 FROM durable_events WHERE run_id = 'r'",
        )
        .run();
      await journal.acquireLease("r", "new", 1000);
      await journal.sendSignal("r", "x", 1);
      const events = await journal.readEvents("r");
      expect(events.map((e) => [e.index, e.type])).toEqual([
        [0, "run_created"],
        [1, "signal_received"],
        [2, "lease_acquired"],
        [3, "signal_received"],
      ]);
    } finally {
      await journal.close();
    }
  });

  it("two journals on one file interleave writes correctly", async () => {
    const file = path.join(tempDir(), "shared.db");
    const a = new SqliteJournal({ path: file });
    const b = new SqliteJournal({ path: file });
    // two more on other tables of the same file, as another component of this process would be
    const c = new SqliteJournal({ path: file, tablePrefix: "other_" });
    const d = new SqliteJournal({ path: file, tablePrefix: "other_" });
    try {
      await Promise.all([interleave(a, b), interleave(c, d)]);
    } finally {
      for (const j of [a, b, c, d]) await j.close();
    }
  });

  it("creates the file's directory; a bad table prefix is an InvalidOptionError; an injected database stays open", async () => {
    const file = path.join(tempDir(), "a", "b", "j.db");
    const journal = new SqliteJournal({ path: file });
    await journal.createRun({ runId: "r", workflow: "wf", input: 1 });
    await journal.close();
    expect(existsSync(file)).toBe(true);
    expect(() => new SqliteJournal({ path: file, tablePrefix: "bad-prefix" })).toThrow(InvalidOptionError);
    const db = new Database(file);
    const injected = new SqliteJournal({ database: db });
    expect((await injected.getRun("r"))?.input).toBe(1);
    await injected.close();
    expect(db.open).toBe(true);
    db.close();
    await expect(injected.getRun("r")).rejects.toBeInstanceOf(BackendError);
  });
});

describe.skipIf(!!pgSkip)(`PostgresJournal${pgSkip ? ` (skipped: ${pgSkip})` : ""}`, () => {
  const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  const schemas: string[] = [];
  afterAll(async () => {
    for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await admin.end();
  });
  /** A test with journals on a fresh schema (no connection is made before the first call), closed afterwards. */
  const onFreshSchema =
    (fn: (journals: PostgresJournal[], schema: string) => Promise<void>, count = 1) =>
    async () => {
      const schema = schemaName();
      schemas.push(schema);
      const journals = Array.from(
        { length: count },
        (_, i) => new PostgresJournal({ url: DATABASE_URL, schema, ...(i ? { max: 4 } : { maxConnections: 4 }) }),
      );
      try {
        await fn(journals, schema);
      } finally {
        for (const j of journals) await j.close();
      }
    };

  it(
    "adopts a schema written by the previous release: the run reads back, new events continue its index",
    onFreshSchema(async ([journal], schema) => {
      await admin.query(legacyPostgres(schema));
      for (const sql of legacyRows((n) => `"${schema}"."durable_${n}"`, "legacy-1")) await admin.query(sql);
      await admin.query(
        `INSERT INTO "${schema}".durable_runs VALUES ('legacy-2', 'wf', 'pending', 'null', NULL, NULL, NULL, NULL, 0, NULL, NULL, 1, 1)`,
      );
      await continuesLegacyRun(journal!, "legacy-1", "legacy-2");
      const ledger = await admin.query(`SELECT component, version FROM "${schema}".dumplings_migrations ORDER BY 2`);
      expect(ledger.rows).toEqual(LEDGER);
    }),
  );

  it(
    "keeps numbering events when a writer of the previous release appends one during a rolling upgrade",
    onFreshSchema(async ([journal], schema) => {
      await journal!.createRun({ runId: "r", workflow: "wf", input: null });
      await admin.query(
        `INSERT INTO "${schema}".durable_events (run_id, idx, type, at)
         SELECT 'r', COALESCE(MAX(idx) + 1, 0), 'signal_received', 1 FROM "${schema}".durable_events WHERE run_id = 'r'`,
      );
      await journal!.acquireLease("r", "new", 1000);
      await journal!.sendSignal("r", "x", 1);
      expect((await journal!.readEvents("r")).map((e) => e.index)).toEqual([0, 1, 2, 3]);
    }),
  );

  it(
    "two journals on one schema, first used at the same time, interleave writes correctly",
    onFreshSchema(([a, b]) => interleave(a!, b!), 2),
  );

  it(
    "dropSchema forgets the migrations: the next call creates the tables again",
    onFreshSchema(async ([journal]) => {
      await journal!.createRun({ runId: "r", workflow: "wf", input: null });
      await journal!.dropSchema();
      expect(await journal!.getRun("r")).toBeUndefined();
      expect((await journal!.createRun({ runId: "r", workflow: "wf", input: null })).created).toBe(true);
    }),
  );

  it("a bad schema name is an InvalidOptionError from the constructor", () => {
    expect(() => new PostgresJournal({ url: DATABASE_URL, schema: "bad-schema" })).toThrow(InvalidOptionError);
  });
});
