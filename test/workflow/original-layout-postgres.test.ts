/**
 * Snapshot rows in the original design's layout (snake_case state, no summary
 * row) in a PostgreSQL archive: moved into the journal when a store first
 * opens the schema, resumed from, adopted by the first write (two processes
 * racing to adopt: one wins, the other gets `ConflictError`), and never
 * rewritten (the original design's `workflow_snapshots`, now a view over the
 * journal's checkpoints, reads them back unchanged).
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConflictError } from "../../src/core/errors.js";
import { PostgresColdStore } from "../../src/durable/checkpoints/postgres.js";
import { CheckpointStore, END, ResumableGraphRunner, START } from "../../src/workflow/index.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const skip = await postgresSkipReason();

describe.skipIf(skip)("a PostgreSQL archive holding rows in the original layout", () => {
  const schema = `wf_orig_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
  const dir = mkdtempSync(path.join(os.tmpdir(), "dumplings-wf-orig-pg-"));
  let pool: pg.Pool;
  const stores: CheckpointStore[] = [];
  const open = async () => {
    const store = await CheckpointStore.open({
      cold: new PostgresColdStore({ url: DATABASE_URL, schema }),
      blobDir: path.join(dir, "blobs"),
    });
    stores.push(store);
    return store;
  };
  beforeAll(() => {
    pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  });
  afterAll(async () => {
    for (const s of stores) await s.close();
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
    rmSync(dir, { recursive: true, force: true });
  });

  it("two writers resuming the same original workflow: one adopts and advances it, the other gets ConflictError", async () => {
    // The original rows, in the table 0.1 created (before any store of this release opened the schema).
    await pool.query(`CREATE SCHEMA "${schema}"`);
    await pool.query(`CREATE TABLE "${schema}".workflow_snapshots (
      id BIGSERIAL PRIMARY KEY, workflow_id TEXT NOT NULL, step_index INTEGER NOT NULL, node_name TEXT NOT NULL,
      state_json TEXT NOT NULL, created_at BIGINT NOT NULL, UNIQUE (workflow_id, step_index))`);
    const state = (step: number, node: string) =>
      JSON.stringify({
        workflow_id: "pg-orig",
        session_id: "s",
        current_node: node,
        step_index: step,
        shared_memory: { step },
        history_records: [],
        is_finished: false,
        updated_at: 1741944413 + step,
      });
    for (const [step, node, current] of [
      [0, "START", "START"],
      [1, "plan", "write"],
    ] as const) {
      await pool.query(
        `INSERT INTO "${schema}".workflow_snapshots (workflow_id, step_index, node_name, state_json, created_at)
         VALUES ($1, $2, $3, $4, $5)`,
        ["pg-orig", step, node, state(step, current), 1741944413 + step],
      );
    }
    const seed = `SELECT step_index, node_name, state_json FROM "${schema}".workflow_snapshots
      WHERE workflow_id = 'pg-orig' AND step_index < 2 ORDER BY step_index`;
    const before = (await pool.query(seed)).rows;
    const first = await open();
    const second = await open();
    let runs = 0;
    const nodes = {
      plan: async () => ({ next: "write" }),
      write: async () => {
        runs++;
        await new Promise((r) => setTimeout(r, 50));
        return { next: END, updates: { written: true } };
      },
    };
    // Without leases (which would let only one of them run): the compare-and-set of the adoption decides.
    const results = await Promise.allSettled([
      new ResumableGraphRunner({ store: first, nodes, lease: false }).runOrResume("pg-orig"),
      new ResumableGraphRunner({ store: second, nodes, lease: false }).runOrResume("pg-orig"),
    ]);
    const won = results.filter((r) => r.status === "fulfilled");
    const lost = results.filter((r) => r.status === "rejected");
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(1);
    expect((lost[0] as PromiseRejectedResult).reason).toBeInstanceOf(ConflictError);
    expect(runs).toBe(2); // both ran the node; only one checkpoint of it exists
    const history = await first.history("pg-orig");
    expect(history.map((h) => [h.stepIndex, h.nodeName, h.createdAt])).toEqual([
      [0, START, 1741944413000],
      [1, "plan", 1741944414000],
      [2, "write", history[2]?.createdAt],
    ]);
    expect(history[2]?.state.sharedMemory).toEqual({ step: 1, written: true });
    expect(await first.summary("pg-orig")).toMatchObject({ latestStep: 2, status: "finished" });
    // The original rows read back through the original table's name unchanged (now a view over the journal).
    expect((await pool.query(seed)).rows).toEqual(before);
  });
});
