/**
 * A workflow's fencing token never goes back, whatever is deleted or pruned (a new user's trial,
 * on SQLite and PostgreSQL: after `store.delete` + `prune` the id's next lease started again at
 * token 1, and a worker paused while holding token 1 passed the fence of the new worker's lease,
 * renewed it and committed into the new run). On a real SQLite file and a real PostgreSQL schema:
 * the trial's repro, a lease row really pruned (the floor), a delete that ends a live lease, and
 * a SQLite file of the previous lease-table version whose floor starts above its stored tokens.
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  CheckpointStore,
  type ColdStore,
  createWorkflowState,
  PostgresColdStore,
  SqliteColdStore,
  WorkflowLeaseLostError,
} from "../../src/workflow/index.js";
import type { LeasingColdStore } from "../../src/workflow/lease.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { tempDir } from "./helpers.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Backend {
  name: string;
  skip: string | undefined;
  setup(dir: string): Promise<void>;
  cold(): ColdStore;
  /** The lease rows of a workflow as stored (0 or 1). */
  leaseRows(id: string): Promise<number>;
  /** Tokens are the journal run's, per workflow: a new id starts at 1 (no floor shared by every id). */
  perRunTokens?: boolean;
  teardown(): Promise<void>;
}

function sqliteBackend(): Backend {
  let file = "";
  return {
    name: "SQLite",
    skip: undefined,
    async setup(dir) {
      file = path.join(dir, "wf.db");
    },
    cold: () => new SqliteColdStore({ path: file }),
    async leaseRows(id) {
      const db = new Database(file, { readonly: true });
      try {
        return (db.prepare("SELECT COUNT(*) AS n FROM workflow_leases WHERE workflow_id = ?").get(id) as { n: number })
          .n;
      } finally {
        db.close();
      }
    },
    async teardown() {},
  };
}

function postgresBackend(skip: string | undefined): Backend {
  let schema = "";
  let pool: pg.Pool | undefined;
  return {
    name: "PostgreSQL",
    skip,
    async setup() {
      schema = `wf_floor_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
      pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    },
    cold: () => new PostgresColdStore({ url: DATABASE_URL, schema, maxConnections: 4 }),
    // The store is a journal: a workflow's lease is its run's, never deleted (a delete resets the run and
    // raises its token), so "a lease row" is a held lease and tokens count on per run (no floor needed).
    perRunTokens: true,
    async leaseRows(id) {
      const r = await pool!.query(
        `SELECT COUNT(*)::int AS n FROM "${schema}".durable_runs WHERE run_id = $1 AND lease_owner IS NOT NULL`,
        [id],
      );
      return r.rows[0].n as number;
    },
    async teardown() {
      await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool?.end();
      pool = undefined;
    },
  };
}

const backends = [sqliteBackend(), postgresBackend(await postgresSkipReason())];

for (const backend of backends) {
  describe.skipIf(backend.skip)(`workflow lease tokens never go back: ${backend.name}`, () => {
    let tmp: ReturnType<typeof tempDir>;
    let store: CheckpointStore;
    let cold: LeasingColdStore;

    beforeEach(async () => {
      tmp = tempDir("lease-floor", { memory: true });
      await backend.setup(tmp.dir);
      store = await CheckpointStore.open({ cold: backend.cold(), blobDir: path.join(tmp.dir, "blobs") });
      cold = store.cold as ColdStore & LeasingColdStore;
    });
    afterEach(async () => {
      await store.close();
      await backend.teardown();
      tmp.cleanup();
    });

    it("the trial's repro: after delete + prune, the paused worker's stale save and renewal are refused", async () => {
      const a = await cold.acquireLease("w", "worker-A", 100);
      if (!a.acquired) throw new Error("not acquired");
      await store.save(createWorkflowState({ workflowId: "w" }), { expectedStep: null, fencingToken: a.fencingToken });
      await sleep(300);
      await store.delete("w");
      await store.prune({ olderThan: 100 });
      const b = await cold.acquireLease("w", "worker-B", 30_000);
      if (!b.acquired) throw new Error("not acquired");
      expect(b.fencingToken).toBeGreaterThan(a.fencingToken);
      const stale = await store
        .save(createWorkflowState({ workflowId: "w", sharedMemory: { by: "A (stale)" } }), {
          expectedStep: null,
          fencingToken: a.fencingToken,
        })
        .catch((e: unknown) => e);
      expect(stale).toBeInstanceOf(WorkflowLeaseLostError);
      expect(stale).toMatchObject({ code: "STALE_FENCING_TOKEN", currentToken: b.fencingToken, owner: "worker-B" });
      expect(await store.loadLatest("w")).toBeUndefined();
      await expect(cold.renewLease("w", a.fencingToken, 30_000)).rejects.toBeInstanceOf(WorkflowLeaseLostError);
      // B's lease is untouched: still B's, and B writes.
      expect(await cold.acquireLease("w", "worker-C", 30_000)).toMatchObject({ acquired: false, owner: "worker-B" });
      await store.save(createWorkflowState({ workflowId: "w", sharedMemory: { by: "B" } }), {
        expectedStep: null,
        fencingToken: b.fencingToken,
      });
      expect((await store.loadLatest("w"))?.sharedMemory).toEqual({ by: "B" });
    });

    it("a lease row really pruned: the id's next lease starts above every token it had (the floor)", async () => {
      const id = "pruned";
      let last = 0;
      for (let i = 0; i < 3; i++) {
        const l = await cold.acquireLease(id, `w${i}`, 30_000);
        if (!l.acquired) throw new Error("not acquired");
        last = l.fencingToken;
        if (i === 0)
          await store.save(createWorkflowState({ workflowId: id }), { expectedStep: null, fencingToken: last });
        await cold.releaseLease(id, last);
      }
      await store.delete(id);
      await sleep(150);
      await store.prune({ olderThan: 50 });
      expect(await backend.leaseRows(id)).toBe(0); // the row went: only the floor remembers its tokens
      const next = await cold.acquireLease(id, "new", 30_000);
      if (!next.acquired) throw new Error("not acquired");
      expect(next.fencingToken).toBeGreaterThan(last + 1); // the delete raised it once more
      for (let token = 1; token < next.fencingToken; token++) {
        await expect(
          store.save(createWorkflowState({ workflowId: id }), { expectedStep: null, fencingToken: token }),
        ).rejects.toBeInstanceOf(WorkflowLeaseLostError);
        await expect(cold.renewLease(id, token, 30_000)).rejects.toBeInstanceOf(WorkflowLeaseLostError);
      }
      // Another id, new after the prune, also starts above the floor; one never pruned counts on.
      const other = await cold.acquireLease("fresh", "x", 30_000);
      expect(other).toMatchObject({ acquired: true });
      if (backend.perRunTokens) expect((other as { fencingToken: number }).fencingToken).toBe(1);
      else expect((other as { fencingToken: number }).fencingToken).toBeGreaterThan(next.fencingToken - 1);
    });

    it("a delete ends a live lease: the holder's next save, side-effect start and renewal are refused; the next worker takes over at once", async () => {
      const a = await cold.acquireLease("live", "worker-A", 30_000);
      if (!a.acquired) throw new Error("not acquired");
      await store.save(createWorkflowState({ workflowId: "live" }), {
        expectedStep: null,
        fencingToken: a.fencingToken,
      });
      await store.delete("live");
      // Nobody took it over: still, a token from before the delete passes no fence.
      await expect(
        store.save(createWorkflowState({ workflowId: "live" }), { expectedStep: null, fencingToken: a.fencingToken }),
      ).rejects.toMatchObject({ code: "STALE_FENCING_TOKEN", owner: null });
      await expect(
        store.cold.idempotencyBegin("live:0:0", {
          workflowId: "live",
          stepIndex: 0,
          name: "charge",
          now: Date.now(),
          fencingToken: a.fencingToken,
        }),
      ).rejects.toBeInstanceOf(WorkflowLeaseLostError);
      await expect(cold.renewLease("live", a.fencingToken, 30_000)).rejects.toBeInstanceOf(WorkflowLeaseLostError);
      expect(await store.loadLatest("live")).toBeUndefined();
      const b = await cold.acquireLease("live", "worker-B", 30_000);
      expect(b).toMatchObject({ acquired: true });
      expect((b as { fencingToken: number }).fencingToken).toBeGreaterThan(a.fencingToken + 1);
    });
  });
}

describe("workflow lease tokens: a SQLite file of lease-table version 1", () => {
  it("gets a floor above every token it stores, so ids pruned before the upgrade do not restart at 1", async () => {
    const tmp = tempDir("lease-floor-v1");
    const file = path.join(tmp.dir, "wf.db");
    try {
      let store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
      let cold = store.cold as ColdStore & LeasingColdStore;
      for (let i = 0; i < 5; i++) await cold.acquireLease("busy", "w", 30_000); // tokens 1..5
      await store.close();
      // Back to version 1 of the component: no floor table, no ledger entry for version 2.
      const db = new Database(file);
      db.exec("DROP TABLE workflow_lease_floor");
      db.prepare("DELETE FROM dumplings_migrations WHERE component = 'workflow-lease' AND version = 2").run();
      db.close();
      store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
      cold = store.cold as ColdStore & LeasingColdStore;
      expect(await cold.acquireLease("pruned-before-upgrade", "w", 30_000)).toMatchObject({
        acquired: true,
        fencingToken: 6,
      });
      await store.close();
    } finally {
      tmp.cleanup();
    }
  });
});
