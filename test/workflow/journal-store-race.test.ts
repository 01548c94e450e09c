/**
 * Compare-and-set on the journal-backed workflow stores, raced by two stores on one database (two
 * connections, as two processes). Found after the PostgreSQL switch: the store read a workflow's
 * newest checkpoint, then the next seq; a checkpoint another writer committed between the two reads
 * went unseen, and both racing creators of step 0 "succeeded" (about one race in three under load).
 * Now the seq is read first, so a write committed after it takes that seq and the later writer is
 * refused and reads again. The same holds for the start of a side effect.
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { ConflictError } from "../../src/core/errors.js";
import { PostgresColdStore } from "../../src/durable/checkpoints/postgres.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { CheckpointStore, createWorkflowState, IdempotencyGuard } from "../../src/workflow/index.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { tempDir } from "./helpers.js";

const tmp = tempDir("journal-race");
afterAll(() => tmp.cleanup());
const ROUNDS = 40;

async function race(open: () => Promise<CheckpointStore>): Promise<void> {
  const [a, b] = await Promise.all([open(), open()]);
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const id = `race-${round}-${randomUUID()}`;
      const out = await Promise.allSettled([
        a.save(createWorkflowState({ workflowId: id, sharedMemory: { by: "a" } }), { expectedStep: null }),
        b.save(createWorkflowState({ workflowId: id, sharedMemory: { by: "b" } }), { expectedStep: null }),
      ]);
      const won = out.filter((o) => o.status === "fulfilled");
      expect(won, `round ${round}`).toHaveLength(1);
      const lost = out.find((o) => o.status === "rejected") as PromiseRejectedResult;
      expect(lost.reason).toBeInstanceOf(ConflictError);
      expect((await a.history(id)).length, `round ${round}`).toBe(1);
      // Two guards starting one side effect at once: it runs once.
      let runs = 0;
      const effect = async () => {
        runs++;
        await new Promise((r) => setTimeout(r, 5));
        return "done";
      };
      const key = IdempotencyGuard.key(id, 0, 0);
      await Promise.allSettled([
        new IdempotencyGuard({ store: a }).run(key, effect, { workflowId: id, name: "pay" }),
        new IdempotencyGuard({ store: b }).run(key, effect, { workflowId: id, name: "pay" }),
      ]);
      expect(runs, `round ${round}`).toBe(1);
    }
  } finally {
    await a.close();
    await b.close();
  }
}

const pgSkip = await postgresSkipReason();

describe("two stores racing on one database", () => {
  it(`SQLite: ${ROUNDS} races to create a workflow and to start its side effect, one winner each`, async () => {
    const file = path.join(tmp.dir, "race.db");
    await race(() => CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) }));
  });

  it.skipIf(pgSkip)(
    `PostgreSQL: ${ROUNDS} races to create a workflow and to start its side effect, one winner each`,
    async () => {
      const schema = `wf_race_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
      try {
        await race(() =>
          CheckpointStore.open({ cold: new PostgresColdStore({ url: DATABASE_URL, schema, maxConnections: 4 }) }),
        );
      } finally {
        const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await pool.end();
      }
    },
  );
});
