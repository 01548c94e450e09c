/**
 * The built-in workflow stores (`SqliteColdStore`, `PostgresColdStore`: the workflow store over the
 * durable journal of their database) on what an earlier release left behind, and what their
 * migration ledger promises:
 *
 * - a database whose workflow tables were created by 0.1's DDL (no ledger)
 *   opens, reads back and takes new checkpoints; the ledger then lists each
 *   version of `workflow` (whose version 2 moved the old tables into the
 *   journal; SQLite: and of the `journal` component) exactly once, however
 *   often it is opened;
 * - a second SQLite store opens while another connection holds the write lock;
 * - opening a store on a set-up PostgreSQL schema runs no DDL: `init()`
 *   completes while another transaction holds `SHARE ROW EXCLUSIVE` on
 *   `workflow_snapshots` (0.1 re-ran `CREATE INDEX IF NOT EXISTS`, whose
 *   ShareLock waited there — the lock behind `deadlock detected` on open);
 * - racing creators of one workflow: one wins, the other gets a
 *   `ConflictError`; a prune deletes the old snapshots (SQLite: and the blobs
 *   only they held; the journal keeps the blobs, so no reference outside it is
 *   orphaned and none is returned).
 */
import { createHash, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { ConflictError } from "../../src/core/errors.js";
import type { ColdStore, SnapshotWrite } from "../../src/durable/checkpoints/contract.js";
import { workflowJournalMigrations } from "../../src/durable/checkpoints/migrate.js";
import { PostgresColdStore } from "../../src/durable/checkpoints/postgres.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { sqlJournalMigrations } from "../../src/durable/journal-sql-schema.js";
import { CheckpointStore, createWorkflowState } from "../../src/workflow/index.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { tempDir } from "./helpers.js";

const skip = await postgresSkipReason();
const tmp = tempDir("cold-stores");
afterAll(() => tmp.cleanup());

/** 0.1's DDL, statement by statement (`{s}`: the quoted schema on PostgreSQL). */
function legacyDdl(dialect: "sqlite" | "postgres"): string[] {
  const file = path.join(import.meta.dirname, "..", "fixtures", "workflow", `cold-0.1-${dialect}.sql`);
  return readFileSync(file, "utf8")
    .replace(/^--.*$/gm, "")
    .split(";")
    .map((s) => s.trim())
    .filter(Boolean);
}

/** Workflow `legacy-1` with two snapshots, as 0.1 wrote them: statements with `?` placeholders and their values. */
function legacyRows(t: (table: string) => string): [string, unknown[]][] {
  const s0 = createWorkflowState({ workflowId: "legacy-1", sharedMemory: { n: 0 }, now: 1000 });
  const s1 = { ...s0, stepIndex: 1, currentNode: "b", sharedMemory: { n: 1 }, updatedAt: 1001 };
  const snapshot = `INSERT INTO ${t("workflow_snapshots")} (workflow_id, step_index, node_name, state_json, created_at) VALUES (?, ?, ?, ?, ?)`;
  return [
    [
      `INSERT INTO ${t("workflows")} (workflow_id, session_id, status, latest_step, current_node, active_step, parent_workflow_id, created_at, updated_at)
       VALUES (?, ?, 'running', 1, 'b', 1, NULL, 1000, 1001)`,
      ["legacy-1", "legacy-1"],
    ],
    [snapshot, ["legacy-1", 0, "__start__", JSON.stringify(s0), 1000]],
    [snapshot, ["legacy-1", 1, "a", JSON.stringify(s1), 1001]],
  ];
}

/** Opens a store over the adopted tables: the old rows read back and new checkpoints are written. */
async function readsBackAndWrites(cold: ColdStore): Promise<void> {
  const store = await CheckpointStore.open({ cold, blobDir: path.join(tmp.dir, "blobs") });
  try {
    const latest = await store.loadLatest("legacy-1");
    expect(latest?.sharedMemory).toEqual({ n: 1 });
    expect((await store.history("legacy-1")).map((h) => [h.stepIndex, h.nodeName])).toEqual([
      [0, "__start__"],
      [1, "a"],
    ]);
    expect((await store.summary("legacy-1"))?.latestStep).toBe(1);
    const next = { ...latest!, stepIndex: 2, updatedAt: 1002, sharedMemory: { n: 2 } };
    await store.save(next, { expectedStep: 1 });
    await expect(store.save(next, { expectedStep: 1 })).rejects.toBeInstanceOf(ConflictError);
    expect((await store.loadLatest("legacy-1"))?.sharedMemory).toEqual({ n: 2 });
  } finally {
    await store.close();
  }
}

const snapshotRow = (workflowId: string, step: number, blobRefs: string[]): SnapshotWrite => ({
  workflowId,
  sessionId: workflowId,
  stepIndex: step,
  nodeName: `n${step}`,
  stateJson: "{}",
  createdAt: 1000 + step,
  status: "running",
  currentNode: "n",
  parentWorkflowId: null,
  activeStep: step,
  blobRefs,
});

/**
 * Two stores on one database (as two processes): racing creators of a workflow's first checkpoint
 * get one ConflictError, then steps 1..6 and a stale write. `row` makes the checkpoint of a step
 * with its blob names. Returns the workflow's id.
 */
async function race(
  a: ColdStore,
  b: ColdStore,
  row: (workflowId: string, step: number, blobs: string[]) => SnapshotWrite = snapshotRow,
): Promise<string> {
  await Promise.all([a.init(), b.init()]);
  const id = `race-${randomUUID()}`;
  const created = await Promise.allSettled([
    a.write(row(id, 0, ["shared", "r0"]), null),
    b.write(row(id, 0, ["shared", "r0"]), null),
  ]);
  expect(created.filter((r) => r.status === "fulfilled")).toHaveLength(1);
  const lost = created.find((r) => r.status === "rejected") as PromiseRejectedResult;
  expect(lost.reason).toBeInstanceOf(ConflictError);
  for (let step = 1; step <= 6; step++) await a.write(row(id, step, ["shared", `r${step}`]), step - 1);
  await expect(b.write(row(id, 7, []), 5)).rejects.toBeInstanceOf(ConflictError);
  return id;
}

/** Racing creators, then a prune that keeps only the newest checkpoint, and a delete. */
async function raceThenPrune(a: ColdStore, b: ColdStore): Promise<void> {
  const id = await race(a, b);
  const pruned = await b.prune(5000, 1);
  expect(pruned.deletedSnapshots).toBe(6);
  expect(pruned.orphanRefs).toEqual([]); // the journal keeps its blobs: nothing outside it is orphaned
  expect((await a.history(id)).map((s) => s.stepIndex)).toEqual([6]);
  expect((await a.latest(id))?.stepIndex).toBe(6);
  const deleted = await b.deleteWorkflow(id);
  expect(deleted).toMatchObject({ existed: true, orphanRefs: [] });
  expect(await a.latest(id)).toBeUndefined();
}

/** The bytes of a test blob named `name`, and its content-addressed ref. */
const blob = (name: string) => {
  const bytes = new TextEncoder().encode(`"blob ${name}"`);
  return { ref: `sha256:${createHash("sha256").update(bytes).digest("hex")}`, bytes };
};

/** A checkpoint whose blobs the store keeps itself (written with it), as `CheckpointStore.save` writes them. */
const rowWithBlobs = (workflowId: string, step: number, names: string[]): SnapshotWrite => {
  const blobs = names.map(blob);
  return {
    ...snapshotRow(
      workflowId,
      step,
      blobs.map((b) => b.ref),
    ),
    blobs: new Map(blobs.map((b) => [b.ref, b.bytes])),
  };
};

describe("workflow store on SQLite (the file's durable journal)", () => {
  const ledger = (file: string) => {
    const db = new Database(file, { readonly: true });
    try {
      return db
        .prepare(
          "SELECT component, version FROM dumplings_migrations WHERE component IN ('workflow', 'journal') ORDER BY component, version",
        )
        .all();
    } finally {
      db.close();
    }
  };
  const tables = (file: string) => {
    const db = new Database(file, { readonly: true });
    try {
      return db.prepare("SELECT type, name FROM sqlite_master WHERE name GLOB 'workflow*' ORDER BY name").all();
    } finally {
      db.close();
    }
  };
  /** What the ledger lists once a file is the journal: each version of the journal and of the workflow move, once. */
  const versions = (migrations: { version: number }[]) => migrations.map((m) => m.version);
  const adopted = [
    ...versions(sqlJournalMigrations("durable_", { table: (n) => n, bigint: "INTEGER", keyed: "" })).map((version) => ({
      component: "journal",
      version,
    })),
    ...versions(workflowJournalMigrations("durable_").migrations).map((version) => ({
      component: "workflow",
      version,
    })),
  ];

  it("a file created by 0.1 opens, reads back and is adopted: the ledger lists each version of the journal and of the workflow move once", async () => {
    const file = path.join(tmp.dir, "legacy.db");
    const old = new Database(file);
    for (const statement of legacyDdl("sqlite")) old.exec(statement);
    for (const [sql, values] of legacyRows((t) => t)) old.prepare(sql).run(...values);
    old.close();

    await readsBackAndWrites(new SqliteColdStore({ path: file }));
    expect(ledger(file)).toEqual(adopted);
    // The old tables moved into the journal: only the original design's view remains.
    expect(tables(file)).toEqual([{ type: "view", name: "workflow_snapshots" }]);
    const again = new SqliteColdStore({ path: file });
    await again.init();
    expect((await again.latest("legacy-1"))?.stepIndex).toBe(2);
    expect((await again.history("legacy-1")).map((h) => h.stepIndex)).toEqual([0, 1, 2]);
    await again.close();
    expect(ledger(file)).toEqual(adopted);
  });

  it("a second store opens while another connection holds the write lock (it only reads the ledger)", async () => {
    const file = path.join(tmp.dir, "locked.db");
    await new SqliteColdStore({ path: file }).close();
    const other = new Database(file);
    other.exec("BEGIN IMMEDIATE");
    try {
      const cold = new SqliteColdStore({ path: file, busyTimeoutMs: 100 });
      await cold.init();
      expect(await cold.summary("none")).toBeUndefined();
      await cold.close();
    } finally {
      other.exec("ROLLBACK");
      other.close();
    }
  });

  it("racing creators get one ConflictError; a prune deletes the blobs only old checkpoints held", async () => {
    const file = path.join(tmp.dir, "race.db");
    const a = new SqliteColdStore({ path: file, pruneBatchSize: 2 });
    const b = new SqliteColdStore({ path: file, pruneBatchSize: 2 });
    try {
      const id = await race(a, b, rowWithBlobs);
      const held = async (names: string[]) =>
        Promise.all(names.map(async (n) => (await a.readBlob(blob(n).ref)) !== undefined));
      expect(await held(["shared", "r0", "r1", "r6"])).toEqual([true, true, true, true]);
      const pruned = await b.prune(5000, 1);
      expect(pruned.deletedSnapshots).toBe(6);
      // The journal keeps the blobs: it deletes those only the pruned checkpoints held, and nothing
      // outside it is left orphaned.
      expect(pruned.orphanRefs).toEqual([]);
      expect(await held(["r0", "r1", "r2", "r3", "r4", "r5"])).toEqual([false, false, false, false, false, false]);
      expect(await held(["shared", "r6"])).toEqual([true, true]);
      expect(Buffer.from((await a.readBlob(blob("r6").ref)) ?? []).toString()).toBe('"blob r6"');
      expect((await a.history(id)).map((s) => s.stepIndex)).toEqual([6]);
      expect((await a.latest(id))?.stepIndex).toBe(6);
      expect((await b.deleteWorkflow(id)).orphanRefs).toEqual([]);
      expect(await held(["shared", "r6"])).toEqual([false, false]);
    } finally {
      await a.close();
      await b.close();
    }
  });
});

describe.skipIf(!!skip)(
  `workflow store on PostgreSQL (its schema's durable journal)${skip ? ` (skipped: ${skip})` : ""}`,
  () => {
    const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 3 });
    const schemas: string[] = [];
    const freshSchema = () => {
      const schema = `wf_sql_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
      schemas.push(schema);
      return schema;
    };
    afterAll(async () => {
      for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
      await admin.end();
    });
    const ledger = async (schema: string) =>
      (
        await admin.query(
          `SELECT version FROM "${schema}".dumplings_migrations WHERE component = 'workflow' ORDER BY version`,
        )
      ).rows;

    it("a schema created by 0.1 opens, reads back and is moved into the journal: the ledger lists workflow versions 1 and 2 once", async () => {
      const schema = freshSchema();
      await admin.query(`CREATE SCHEMA "${schema}"`);
      for (const statement of legacyDdl("postgres")) await admin.query(statement.replaceAll("{s}", `"${schema}"`));
      for (const [sql, values] of legacyRows((t) => `"${schema}".${t}`)) {
        let n = 0;
        await admin.query(
          sql.replace(/\?/g, () => `$${++n}`),
          values,
        );
      }

      await readsBackAndWrites(new PostgresColdStore({ url: DATABASE_URL, schema }));
      expect(await ledger(schema)).toEqual([{ version: 1 }, { version: 2 }, { version: 3 }]);
      const again = new PostgresColdStore({ url: DATABASE_URL, schema });
      await again.init();
      expect((await again.latest("legacy-1"))?.stepIndex).toBe(2);
      await again.close();
      expect(await ledger(schema)).toEqual([{ version: 1 }, { version: 2 }, { version: 3 }]);
    });

    it("opening a store on a set-up schema runs no DDL: init() completes while another transaction holds SHARE ROW EXCLUSIVE on workflow_snapshots", async () => {
      const schema = freshSchema();
      const first = new PostgresColdStore({ url: DATABASE_URL, schema });
      await first.init();
      await first.close();

      const locker = await admin.connect();
      const second = new PostgresColdStore({ url: DATABASE_URL, schema });
      try {
        await locker.query("BEGIN");
        // Conflicts with the ShareLock of CREATE INDEX (even IF NOT EXISTS on an existing index), not with reads.
        await locker.query(`LOCK TABLE "${schema}".workflow_snapshots IN SHARE ROW EXCLUSIVE MODE`);
        const outcome = await Promise.race([
          second.init().then(() => "opened"),
          new Promise((resolve) => setTimeout(resolve, 3000, "blocked on the lock")),
        ]);
        expect(outcome).toBe("opened");
        expect(await second.latest("none")).toBeUndefined();
      } finally {
        await locker.query("ROLLBACK");
        locker.release();
        await second.close();
      }
    });

    it("the default schema is dumplings (it was public in 0.1)", async () => {
      const cold = new PostgresColdStore({ url: DATABASE_URL });
      expect(cold.schema).toBe("dumplings");
      await cold.close();
    });

    it("racing creators get one ConflictError; a prune deletes the old snapshots (pruneBatchSize is accepted)", async () => {
      const schema = freshSchema();
      const a = new PostgresColdStore({ url: DATABASE_URL, schema, pruneBatchSize: 2 });
      const b = new PostgresColdStore({ url: DATABASE_URL, schema, pruneBatchSize: 2 });
      try {
        await raceThenPrune(a, b);
      } finally {
        await a.close();
        await b.close();
      }
    });
  },
);
