/**
 * `resume` / `updateState` of a workflow that does not exist are refused with
 * `WorkflowNotFoundError` and leave nothing behind (a new user's trial: `runner.resume("nope")`
 * left a pending run that `dumplings runs` then listed for ever, because the lease created the run
 * before the runner looked for a checkpoint). On a real SQLite file and a real PostgreSQL schema.
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import type { JournalColdStore } from "../../src/durable/checkpoints/journal-store.js";
import {
  CheckpointStore,
  type ColdStore,
  END,
  PostgresColdStore,
  ResumableGraphRunner,
  SqliteColdStore,
  WorkflowNotFoundError,
} from "../../src/workflow/index.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { tempDir } from "./helpers.js";

const tmp = tempDir("runner-missing");
const schemas: string[] = [];
afterAll(async () => {
  tmp.cleanup();
  if (schemas.length === 0) return;
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
  for (const s of schemas) await pool.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
  await pool.end();
});

const backends: { name: string; skip: string | undefined; cold: () => ColdStore }[] = [
  {
    name: "SQLite",
    skip: undefined,
    cold: () => new SqliteColdStore({ path: path.join(tmp.dir, `${randomUUID()}.db`) }),
  },
  {
    name: "PostgreSQL",
    skip: await postgresSkipReason(),
    cold: () => {
      const schema = `wf_missing_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
      schemas.push(schema);
      return new PostgresColdStore({ url: DATABASE_URL, schema, maxConnections: 2 });
    },
  },
];

for (const backend of backends) {
  describe.skipIf(backend.skip)(`a missing workflow leaves nothing behind: ${backend.name}`, () => {
    it("resume and updateState refuse it, typed, and create no run; runOrResume then starts it normally", async () => {
      const store = await CheckpointStore.open({ cold: backend.cold() });
      try {
        const { journal } = store.cold as JournalColdStore;
        const runner = new ResumableGraphRunner({
          store,
          nodes: { only: async () => ({ next: END, updates: { done: true } }) },
        });
        await expect(runner.resume("nope", { ok: true })).rejects.toBeInstanceOf(WorkflowNotFoundError);
        await expect(runner.updateState("nope", { updates: { x: 1 } })).rejects.toBeInstanceOf(WorkflowNotFoundError);
        expect(await journal.getRun("nope")).toBeUndefined();
        expect(await journal.listRuns()).toEqual([]);
        // The runner is free: starting the workflow works, with the first fencing token.
        expect(await runner.runOrResume("nope")).toMatchObject({ status: "finished" });
        expect(await journal.getRun("nope")).toMatchObject({ status: "completed", fencingToken: 1 });
      } finally {
        await store.close();
      }
    });
  });
}
