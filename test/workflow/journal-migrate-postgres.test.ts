/**
 * The one-time move of an earlier release's workflow tables into the durable journal of the same
 * PostgreSQL schema (`postgresWorkflowJournalMigrations`, a migration function of the PostgreSQL
 * driver): a schema in dumplings-ai 0.1's layout (test/fixtures/workflow/cold-0.1-postgres.sql;
 * checkpoints, a waiting interrupt, a started side effect, a node failure, a blob in 0.1's blob
 * directory) and one holding the original design's rows open as a journal, resume and finish; the
 * ledger lists `workflow` version 2; the old tables are gone and the original design's query reads
 * the newest checkpoint from the `workflow_snapshots` view; a durable run of a workflow's id is left
 * alone; a process SIGKILLed mid-move leaves the schema as it was.
 */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { StoreNotFoundError } from "../../src/drivers/sql.js";
import type { ColdStore } from "../../src/durable/checkpoints/contract.js";
import { JournalColdStore } from "../../src/durable/checkpoints/journal-store.js";
import { postgresWorkflowJournalMigrations } from "../../src/durable/checkpoints/migrate.js";
import { hashInput } from "../../src/durable/journal.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { DEFAULT_JOURNAL_TABLE_PREFIX } from "../../src/durable/journal-sql-schema.js";
import { signal } from "../../src/durable/signals.js";
import {
  CheckpointStore,
  createWorkflowState,
  END,
  type GraphNode,
  IdempotencyGuard,
  ResumableGraphRunner,
  UnknownSideEffectError,
} from "../../src/workflow/index.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { tempDir } from "./helpers.js";

const skip = await postgresSkipReason();
const tmp = tempDir("journal-migrate-pg");
const MOVE_CHILD = fileURLToPath(new URL("../fixtures/workflow/move-child.ts", import.meta.url));
const ROOT = fileURLToPath(new URL("../../", import.meta.url));

/** The original design's query, as its users run it (the schema on the search path). */
const SEED_QUERY = "SELECT state_json FROM workflow_snapshots WHERE workflow_id = $1 ORDER BY step_index DESC LIMIT 1";
const OLD_TABLE = /^workflow(s|_snapshots|_step_errors|_idempotency|_blob_refs|_blobs|_leases|_lease_floor)$/;

describe.skipIf(skip)("PostgreSQL: workflow tables of an earlier release move into the journal", () => {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
  const schemas: string[] = [];
  const closers: (() => Promise<unknown>)[] = [];
  const newSchema = (label: string) => {
    const schema = `wf_move_${label}_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
    schemas.push(schema);
    return schema;
  };
  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => undefined);
    for (const s of schemas) await pool.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await pool.end();
    tmp.cleanup();
  });

  /** The journal of a schema, with the workflow tables of an earlier release moved into it. */
  const journalOf = (schema: string, options: { create?: boolean; url?: string } = {}) => {
    const journal = new PostgresJournal({ url: options.url ?? DATABASE_URL, schema, ...options }, [
      postgresWorkflowJournalMigrations(DEFAULT_JOURNAL_TABLE_PREFIX),
    ]);
    closers.push(() => journal.close());
    return journal;
  };
  const tablesOf = async (schema: string) =>
    (await pool.query("SELECT tablename FROM pg_tables WHERE schemaname = $1", [schema])).rows.map((r) =>
      String(r.tablename),
    );
  const viewsOf = async (schema: string) =>
    (await pool.query("SELECT viewname FROM pg_views WHERE schemaname = $1", [schema])).rows.map((r) =>
      String(r.viewname),
    );
  const ledgerOf = async (schema: string) =>
    (
      await pool.query(
        `SELECT component, version FROM "${schema}".dumplings_migrations WHERE component IN ('journal', 'workflow') ORDER BY component, version`,
      )
    ).rows.map((r) => `${r.component}:${r.version}`);
  /** The seed's query on a connection whose search path is the schema. */
  const seedQuery = async (schema: string, workflowId: string) => {
    const client = new pg.Client({ connectionString: DATABASE_URL, options: `-c search_path=${schema}` });
    await client.connect();
    try {
      return (await client.query(SEED_QUERY, [workflowId])).rows as { state_json: string }[];
    } finally {
      await client.end();
    }
  };

  /** dumplings-ai 0.1's workflow tables (its DDL, no ledger), empty, in the schema (created when missing). */
  const create01 = async (schema: string) => {
    await pool.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
    const ddl = readFileSync(
      path.join(import.meta.dirname, "..", "fixtures", "workflow", "cold-0.1-postgres.sql"),
      "utf8",
    )
      .replace(/^--.*$/gm, "")
      .replaceAll("{s}", `"${schema}"`)
      .split(";")
      .map((s) => s.trim())
      .filter(Boolean);
    for (const statement of ddl) await pool.query(statement);
  };

  /** Writes workflow `id` as 0.1 held it (snapshot rows, its summary row, errors, blob refs), read from a store that ran it. */
  const copyInto01 = async (schema: string, from: ColdStore, id: string) => {
    const t = (name: string) => `"${schema}".${name}`;
    for (const h of await from.history(id)) {
      await pool.query(
        `INSERT INTO ${t("workflow_snapshots")} (workflow_id, step_index, node_name, state_json, created_at) VALUES ($1, $2, $3, $4, $5)`,
        [id, h.stepIndex, h.nodeName, h.stateJson, h.createdAt],
      );
      const memory = (JSON.parse(h.stateJson) as { sharedMemory: Record<string, { $dumplings_blob?: string }> })
        .sharedMemory;
      for (const v of Object.values(memory)) {
        if (typeof v?.$dumplings_blob !== "string") continue;
        await pool.query(`INSERT INTO ${t("workflow_blob_refs")} (workflow_id, step_index, ref) VALUES ($1, $2, $3)`, [
          id,
          h.stepIndex,
          v.$dumplings_blob,
        ]);
      }
    }
    const s = await from.summary(id);
    if (!s) throw new Error(`no summary of ${id}`);
    await pool.query(
      `INSERT INTO ${t("workflows")} (workflow_id, session_id, status, latest_step, current_node, active_step, parent_workflow_id, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $4, $6, $7, $8)`,
      [id, s.sessionId, s.status, s.latestStep, s.currentNode, s.parentWorkflowId, s.createdAt, s.updatedAt],
    );
    for (const e of await from.errors(id)) {
      await pool.query(
        `INSERT INTO ${t("workflow_step_errors")} (workflow_id, step_index, node_name, error_json, created_at) VALUES ($1, $2, $3, $4, $5)`,
        [id, e.stepIndex, e.nodeName, JSON.stringify(e.error), e.createdAt],
      );
    }
  };

  /** A store that runs graphs the way 0.1 kept them (blobs in a directory), in a scratch schema. */
  const scratchStore = async (blobDir: string) => {
    const journal = new PostgresJournal({ url: DATABASE_URL, schema: newSchema("scratch") });
    const store = await CheckpointStore.open({ cold: new JournalColdStore({ journal }), blobDir });
    closers.push(() => store.close());
    return store;
  };

  it("a 0.1 schema: checkpoints, a waiting interrupt, a started side effect, a node failure and a blob move; the workflow resumes and finishes", async () => {
    const schema = newSchema("v01");
    const blobDir = path.join(tmp.dir, "blobs-v01");
    let charged = 0;
    const nodes: Record<string, GraphNode> = {
      draft: () => ({ next: "approve", updates: { draft: "hello" } }),
      approve: async (_s, ctx) => {
        const answer = await ctx.interrupt<{ ok: boolean }>({ reason: "approve?" });
        await ctx.sideEffect("charge", () => {
          charged++;
          return "ch_1";
        });
        return { next: END, updates: { approved: answer.ok } };
      },
    };
    const source = await scratchStore(blobDir);
    expect((await new ResumableGraphRunner({ store: source, nodes }).runOrResume("waits")).status).toBe("waiting");
    const failing = new ResumableGraphRunner({
      store: source,
      nodes: {
        a: () => ({ next: "b", updates: { n: 1 } }),
        b: () => {
          throw new Error("boom");
        },
      },
    });
    await expect(failing.runOrResume("fails")).rejects.toThrow(/boom/);
    // A value over the blob threshold (256 KB): 0.1 kept it in its blob directory.
    const big = "b".repeat(300_000);
    await source.save(createWorkflowState({ workflowId: "big", sharedMemory: { big, n: 1 } }), { expectedStep: null });

    await create01(schema);
    for (const id of ["waits", "fails", "big"]) await copyInto01(schema, source.cold, id);
    // A side effect started and never finished (its process died).
    await pool.query(
      `INSERT INTO "${schema}".workflow_idempotency (idem_key, workflow_id, step_index, name, status, result_json, started_at, finished_at)
       VALUES ('effects:0:0', 'effects', 0, 'mail', 'started', NULL, 1234, NULL)`,
    );
    const oldHistory = (await source.history("waits")).map((h) => [h.stepIndex, h.nodeName, h.createdAt]);

    // Two processes open the schema at once: it is moved once.
    const journal = journalOf(schema);
    const other = journalOf(schema);
    await Promise.all([journal.now(), other.now()]);
    await other.close();
    const store = await CheckpointStore.open({
      cold: new JournalColdStore({ journal, closeJournal: false }),
      legacyBlobDirs: [blobDir],
    });
    closers.push(() => store.close());

    expect(await ledgerOf(schema)).toEqual([
      "journal:1",
      "journal:2",
      "journal:3",
      "journal:4",
      "journal:5",
      "journal:6",
      "journal:7",
      "journal:8",
      "workflow:1",
      "workflow:2",
      "workflow:3",
    ]);
    expect((await tablesOf(schema)).filter((t) => OLD_TABLE.test(t))).toEqual([]);
    expect(await viewsOf(schema)).toEqual(["workflow_snapshots"]);
    expect((await store.history("waits")).map((h) => [h.stepIndex, h.nodeName, h.createdAt])).toEqual(oldHistory);
    expect((await store.summary("waits"))?.status).toBe("waiting");
    // The waiting interrupt is a run waiting for its signal.
    const waiting = await journal.getRun("waits");
    expect(waiting).toMatchObject({ workflow: "graph", status: "waiting" });
    expect(waiting?.waitingFor).toBe(`interrupt:${(await store.loadLatest("waits"))?.pendingInterrupt?.id}`);
    expect(await store.summary("fails")).toMatchObject({ status: "failed", latestStep: 1 });
    expect(await journal.getRun("fails")).toMatchObject({
      status: "failed",
      error: { message: expect.stringMatching(/boom/) },
    });
    expect(await store.errors("fails")).toMatchObject([
      { nodeName: "b", error: { message: expect.stringMatching(/boom/) } },
    ]);
    // The blob 0.1 kept in its directory is read from there.
    expect((await store.loadLatest("big"))?.sharedMemory).toEqual({ big, n: 1 });
    // The started side effect goes to reconcile, never a blind re-run.
    const unknown = await new IdempotencyGuard({ store })
      .run("effects:0:0", () => "again", { name: "mail" })
      .catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(UnknownSideEffectError);
    expect(unknown).toMatchObject({ startedAt: 1234 });
    // The waiting workflow is answered and finishes; its side effect runs once.
    await signal("waits", waiting?.waitingFor as string, { ok: true }, { journal });
    const done = await new ResumableGraphRunner({ store, nodes }).runOrResume("waits");
    expect(done.status).toBe("finished");
    expect(done.state.sharedMemory).toMatchObject({ draft: "hello", approved: true });
    expect(charged).toBe(1);
    // The original design's query reads the newest checkpoint from the view.
    const [row] = await seedQuery(schema, "waits");
    expect(JSON.parse(row?.state_json as string)).toMatchObject({ workflowId: "waits", isFinished: true });
    expect(JSON.parse(row?.state_json as string).stepIndex).toBe((await store.loadLatest("waits"))?.stepIndex);
    await store.close();
    await journal.close();

    // Opened again: nothing moves twice, the ledger is unchanged.
    const again = journalOf(schema);
    expect((await again.listRuns({ workflow: "graph" })).map((r) => r.runId).sort()).toEqual([
      "big",
      "effects",
      "fails",
      "waits",
    ]);
    expect((await again.readSteps("waits")).filter((s) => s.name.startsWith("effect:"))).toHaveLength(1);
    expect(await ledgerOf(schema)).toContain("workflow:2");
  });

  it("the original design's rows (snake_case states, times in seconds, no summary row): moved, resumed, read by the original query", async () => {
    const schema = newSchema("orig");
    await create01(schema);
    const state = (step: number, node: string) =>
      JSON.stringify({
        workflow_id: "tea",
        session_id: "s",
        current_node: node,
        step_index: step,
        shared_memory: { topic: "tea", step },
        history_records: [],
        is_finished: false,
        updated_at: 1741944413.25 + step,
      });
    for (const [step, node, current] of [
      [0, "START", "plan"],
      [1, "plan", "write"],
    ] as const) {
      await pool.query(
        `INSERT INTO "${schema}".workflow_snapshots (workflow_id, step_index, node_name, state_json, created_at) VALUES ($1, $2, $3, $4, $5)`,
        ["tea", step, node, state(step, current), 1741944413 + step],
      );
    }
    // Only the snapshot table, as the original design had: the others of 0.1 are absent.
    for (const t of ["workflows", "workflow_step_errors", "workflow_idempotency", "workflow_blob_refs"]) {
      await pool.query(`DROP TABLE "${schema}".${t}`);
    }

    // A reader that must not create a store opens it: the old table is this component's.
    const journal = journalOf(schema, { create: false });
    const store = await CheckpointStore.open({ cold: new JournalColdStore({ journal, closeJournal: false }) });
    closers.push(() => store.close());
    expect(await ledgerOf(schema)).toContain("workflow:2");
    expect((await store.history("tea")).map((h) => [h.stepIndex, h.nodeName, h.createdAt])).toEqual([
      [0, "__start__", 1741944413000],
      [1, "plan", 1741944414000],
    ]);
    expect(await journal.getRun("tea")).toMatchObject({ status: "running", createdAt: 1741944413000 });
    const out = await new ResumableGraphRunner({
      store,
      nodes: { write: () => ({ next: END, updates: { written: true } }) },
    }).runOrResume("tea");
    expect(out.status).toBe("finished");
    expect(out.state.sharedMemory).toMatchObject({ topic: "tea", step: 1, written: true });
    const [row] = await seedQuery(schema, "tea");
    expect(JSON.parse(row?.state_json as string)).toMatchObject({ stepIndex: 2, isFinished: true });
    expect((await tablesOf(schema)).filter((t) => OLD_TABLE.test(t))).toEqual([]);
  });

  it("a durable run of a workflow's id is left alone; the other workflows move", async () => {
    const schema = newSchema("dup");
    // A journal in the schema first, with a durable run "dup" half done.
    const durable = new PostgresJournal({ url: DATABASE_URL, schema });
    closers.push(() => durable.close());
    await durable.createRun({ runId: "dup", workflow: "orders", input: { order: 7 } });
    const lease = await durable.acquireLease("dup", "w1", 30_000);
    if (!lease.acquired) throw new Error("no lease");
    await durable.writeStep(lease.fencingToken, {
      runId: "dup",
      seq: 0,
      name: "charge",
      inputHash: hashInput({ order: 7 }),
      status: "completed",
      output: { receipt: "r7" },
      attempt: 1,
      startedAt: 1,
      finishedAt: 2,
      fencingToken: lease.fencingToken,
    });
    await durable.releaseLease("dup", lease.fencingToken);
    const before = { run: await durable.getRun("dup"), steps: await durable.readSteps("dup") };
    await durable.close();

    // Then 0.1's tables beside it, holding a workflow of the same id (and a side effect of its key) and another.
    await create01(schema);
    const source = await scratchStore(path.join(tmp.dir, "blobs-dup"));
    for (const id of ["dup", "other"]) {
      await new ResumableGraphRunner({
        store: source,
        nodes: { a: () => ({ next: END, updates: { id } }) },
      }).runOrResume(id);
      await copyInto01(schema, source.cold, id);
    }
    await pool.query(
      `INSERT INTO "${schema}".workflow_idempotency (idem_key, workflow_id, step_index, name, status, result_json, started_at, finished_at)
       VALUES ('dup:0:0', 'dup', 0, 'mail', 'finished', '{"v":1}', 10, 11)`,
    );

    const journal = journalOf(schema);
    expect(await journal.getRun("dup")).toEqual(before.run);
    expect(await journal.readSteps("dup")).toEqual(before.steps);
    expect(await journal.getRun("other")).toMatchObject({ workflow: "graph", status: "completed" });
    expect((await tablesOf(schema)).filter((t) => OLD_TABLE.test(t))).toEqual([]);
    expect(await ledgerOf(schema)).toContain("workflow:2");
  });

  it("a fresh schema: no workflow tables, the view over the journal's checkpoints; create: false refuses an empty schema", async () => {
    const schema = newSchema("fresh");
    await expect(journalOf(schema, { create: false }).now()).rejects.toBeInstanceOf(StoreNotFoundError);
    expect((await pool.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema])).rows).toEqual([]);
    const journal = journalOf(schema);
    const store = await CheckpointStore.open({ cold: new JournalColdStore({ journal, closeJournal: false }) });
    closers.push(() => store.close());
    await new ResumableGraphRunner({
      store,
      nodes: { a: () => ({ next: "b", updates: { x: 1 } }), b: () => ({ next: END, updates: { x: 2 } }) },
    }).runOrResume("fresh");
    expect((await tablesOf(schema)).filter((t) => t.startsWith("workflow"))).toEqual([]);
    const [row] = await seedQuery(schema, "fresh");
    expect(JSON.parse(row?.state_json as string)).toMatchObject({ stepIndex: 2, sharedMemory: { x: 2 } });
  });

  it("a process SIGKILLed mid-move leaves the schema as it was; the next open moves it", async () => {
    const schema = newSchema("crash");
    await create01(schema);
    // Enough workflows that the move takes a while: 1,500 workflows of 3 checkpoints each.
    const state = (id: string, step: number) =>
      JSON.stringify(
        createWorkflowState({ workflowId: id, sharedMemory: { step, pad: "p".repeat(200) }, now: 1000 + step }),
      );
    await pool.query(
      `INSERT INTO "${schema}".workflow_snapshots (workflow_id, step_index, node_name, state_json, created_at)
       SELECT 'w' || i, s, 'n', replace(replace($1, '"W"', '"w' || i || '"'), '"stepIndex":0', '"stepIndex":' || s), 1000 + s
       FROM generate_series(1, 1500) AS i, generate_series(0, 2) AS s`,
      [state("W", 0)],
    );
    const count = async () =>
      Number((await pool.query(`SELECT count(*) AS n FROM "${schema}".workflow_snapshots`)).rows[0]?.n);
    expect(await count()).toBe(4500);
    const app = `dumplings-move-${randomUUID().slice(0, 8)}`;
    const url = `${DATABASE_URL}${DATABASE_URL.includes("?") ? "&" : "?"}application_name=${app}`;
    const child = spawn(process.execPath, ["--import", "tsx", MOVE_CHILD], {
      cwd: ROOT,
      env: { ...process.env, WF_PG_URL: url, WF_PG_SCHEMA: schema },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once("exit", (_c, s) => resolve(s)));
    // Killed once its transaction has written into the journal's tables (mid-move).
    const started = Date.now();
    let seen = false;
    while (!seen && Date.now() - started < 30_000 && child.exitCode === null) {
      const r = await pool.query(
        `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND xact_start IS NOT NULL AND query LIKE 'INSERT INTO%durable_%'`,
        [app],
      );
      seen = r.rows.length > 0;
      if (!seen) await new Promise((r) => setTimeout(r, 5));
    }
    expect(seen, `the child never reached the move (it printed ${JSON.stringify(out)})`).toBe(true);
    child.kill("SIGKILL");
    expect(await exited).toBe("SIGKILL");
    // The server ends the dead client's session, rolling its transaction back.
    for (let i = 0; i < 500; i++) {
      const r = await pool.query("SELECT 1 FROM pg_stat_activity WHERE application_name = $1", [app]);
      if (r.rows.length === 0) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(await count()).toBe(4500);
    const tables = await tablesOf(schema);
    expect(tables.filter((t) => t.startsWith("durable_") || t === "dumplings_migrations")).toEqual([]);
    expect(await viewsOf(schema)).toEqual([]);

    const journal = journalOf(schema);
    expect((await journal.listRuns({ workflow: "graph", limit: 2000 })).length).toBe(1500);
    expect((await journal.readSteps("w42")).map((s) => s.name)).toEqual([
      "checkpoint:0:n",
      "checkpoint:1:n",
      "checkpoint:2:n",
    ]);
    const [row] = await seedQuery(schema, "w42");
    expect(JSON.parse(row?.state_json as string)).toMatchObject({ workflowId: "w42", stepIndex: 2 });
    // Moved checkpoints are snapshot steps: retention keeps each workflow's newest only.
    expect((await journal.pruneRuns({ olderThanMs: 0, keepLast: 1 })).deletedSteps).toBe(3000);
    expect((await journal.readSteps("w42")).map((s) => s.name)).toEqual(["checkpoint:2:n"]);
  }, 60_000);
});
