/**
 * Shared helpers of the workflow tests: temporary directories and stores on
 * real SQLite files.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { gunzipSync } from "node:zlib";
import Database from "better-sqlite3";
import type { RedisHotTier } from "../../src/durable/checkpoints/hot-redis.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { CheckpointStore, type CheckpointStoreOptions } from "../../src/workflow/store.js";
import type { ColdStoreFixture } from "./cold-store-suite.js";

/**
 * A fresh temporary directory and its cleanup. `memory: true` puts it on tmpfs (/dev/shm)
 * when available: a SIGKILL test does not depend on fsync reaching the disk (the page cache
 * survives the death of a process), and skipping the disk keeps crash tests fast on busy CI.
 */
export function tempDir(label: string, options: { memory?: boolean } = {}): { dir: string; cleanup: () => void } {
  const base = options.memory && existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir();
  const dir = mkdtempSync(path.join(base, `dumplings-wf-${label}-`));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * Writes the gunzipped bytes of `test/fixtures/workflow/<name>` (a `.gz` fixture) to `file`,
 * creating its directory; returns `file`.
 */
export function unzipFixture(name: string, file: string): string {
  const gz = path.join(import.meta.dirname, "..", "fixtures", "workflow", name);
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, gunzipSync(readFileSync(gz)));
  return file;
}

/** A checkpoint store on a fresh SQLite file in `dir`. */
export async function sqliteStore(
  dir: string,
  extra: Partial<CheckpointStoreOptions> = {},
  file = "checkpoints.db",
): Promise<CheckpointStore> {
  return CheckpointStore.open({
    cold: new SqliteColdStore({ path: path.join(dir, file) }),
    blobDir: path.join(dir, "blobs"),
    ...extra,
  });
}

/**
 * A cold store conformance fixture on a fresh SQLite file, with the hooks that age and count
 * records (they reach the journal's tables through a second connection of their own, as another
 * process would), optionally behind a hot tier.
 */
export function sqliteColdFixture(hot?: RedisHotTier): ColdStoreFixture<SqliteColdStore> {
  const tmp = tempDir("sqlite-conformance");
  const file = path.join(tmp.dir, "cold.db");
  const cold = new SqliteColdStore({ path: file });
  let connection: Database.Database | undefined;
  /** A second connection to the store's file, opened on first use (after the store created its tables). */
  const db = () => {
    connection ??= new Database(file);
    connection.pragma("busy_timeout = 5000");
    return connection;
  };
  return {
    cold,
    hot,
    async destroy() {
      connection?.close();
      await hot?.close();
      await cold.close();
      tmp.cleanup();
    },
    // A workflow is run W of the file's journal: its checkpoints and side-effect records are steps
    // `checkpoint:<k>:<N>` and `effect:<s>:<i>:<name>` in durable_steps.
    async ageSnapshots(workflowId, createdAt) {
      db()
        .prepare(
          "UPDATE durable_steps SET started_at = ?, finished_at = ? WHERE run_id = ? AND (name GLOB 'checkpoint:*' OR name GLOB 'effect:*')",
        )
        .run(createdAt, createdAt, workflowId);
    },
    async countIdempotencyRecords(workflowId) {
      const row = db()
        .prepare("SELECT COUNT(*) AS n FROM durable_steps WHERE run_id = ? AND name GLOB 'effect:*'")
        .get(workflowId);
      return (row as { n: number }).n;
    },
    // The list is the journal's keyset query on the runs' index (explainList returns its plan), then one
    // read of each listed run's newest checkpoint: served by the index, in order, no sort of its own.
    listPlan: {
      mustMatch: /USING (COVERING )?INDEX durable_runs_workflow_(status_)?created\b/,
      mustNotMatch: /TEMP B-TREE|SCAN durable_runs(?! USING)/,
    },
    async bulkInsertSummaries(count) {
      await bulkInsertJournalWorkflows(count, async (statements) => {
        const conn = db();
        conn.exec("BEGIN IMMEDIATE");
        try {
          await statements(async (sql, values) => conn.prepare(sql).run(...values));
          conn.exec("COMMIT");
        } catch (e) {
          conn.exec("ROLLBACK");
          throw e;
        }
        conn.exec("ANALYZE");
      });
    },
  };
}

/**
 * The `bulkInsertSummaries` hook of a journal-backed fixture: `count` workflows `bulk-<i>` written
 * straight into the journal's tables in one transaction (a run of workflow `graph` with one
 * checkpoint each; statuses cycling running, waiting, finished, failed; times spread over a few
 * hours). `tx` runs the statements (`?` placeholders) in one transaction.
 */
export async function bulkInsertJournalWorkflows(
  count: number,
  tx: (statements: (run: (sql: string, values: unknown[]) => Promise<unknown>) => Promise<void>) => Promise<void>,
  table: (name: string) => string = (n) => `"${n}"`,
): Promise<void> {
  const statuses = ["running", "waiting", "completed", "failed"];
  const batch = 500;
  await tx(async (run) => {
    for (let from = 0; from < count; from += batch) {
      const runs: unknown[] = [];
      const steps: unknown[] = [];
      const rowsR: string[] = [];
      const rowsS: string[] = [];
      for (let i = from; i < Math.min(count, from + batch); i++) {
        const t = 1_700_000_000_000 + (i % 9973) * 1000;
        const id = `bulk-${i}`;
        const state = JSON.stringify({ workflowId: id, sessionId: `s-${i}`, currentNode: "n", stepIndex: 0 });
        runs.push(id, statuses[i % 4], t, t);
        rowsR.push("(?, 'graph', ?, 'null', 0, ?, ?)");
        steps.push(id, state, t, t);
        rowsS.push("(?, 0, 'checkpoint:0:n', '-', 'completed', ?, 1, ?, ?, 0, 1)");
      }
      await run(
        `INSERT INTO ${table("durable_runs")} (run_id, workflow, status, input_json, fencing_token, created_at, updated_at) VALUES ${rowsR.join(", ")}`,
        runs,
      );
      await run(
        `INSERT INTO ${table("durable_steps")} (run_id, seq, name, input_hash, status, output_json, attempt, started_at, finished_at, fencing_token, snapshot) VALUES ${rowsS.join(", ")}`,
        steps,
      );
    }
  });
}
