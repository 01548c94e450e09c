/**
 * A workflow's fencing token never goes back, whatever is deleted or pruned (a new user's trial,
 * on SQLite and PostgreSQL: after `store.delete` + `prune` the id's next lease started again at
 * token 1, and a worker paused while holding token 1 passed the fence of the new worker's lease,
 * renewed it and committed into the new run). On a real SQLite file and a real PostgreSQL schema:
 * the trial's repro, a deleted id really pruned, a delete that ends a live lease, and SQLite files
 * of the previous release (lease-table version 1, and version 2 with its floor) whose tokens move
 * into the journal without going back.
 *
 * Both stores keep their workflows in the durable journal: the lease is the run's, and a deleted
 * workflow is a reset run whose token is raised and whose row stays, so an id's token never goes
 * back without a separate floor.
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
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { tempDir, unzipFixture } from "./helpers.js";

/** The deprecated lease methods of a cold store (kept for one minor version). */
type LeasingColdStore = Required<Pick<ColdStore, "acquireLease" | "renewLease" | "releaseLease">>;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Backend {
  name: string;
  skip: string | undefined;
  setup(dir: string): Promise<void>;
  cold(): ColdStore;
  /**
   * Checks, below the contract, what remembers the tokens of an id deleted and pruned after its
   * lease reached token `last`: the run row, kept with a higher token and no holder (SQLite's
   * journal), or the floor alone once the lease row went (PostgreSQL).
   */
  expectPrunedLease(id: string, last: number): Promise<void>;
  /** Whether a new id's first lease starts above every token of the ids pruned before (a store-wide floor). */
  storeWideFloor: boolean;
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
    async expectPrunedLease(id, last) {
      const db = new Database(file, { readonly: true });
      try {
        // The run stays (a deleted workflow is a reset run): its row keeps the token, raised by the delete.
        const run = db.prepare("SELECT lease_owner, fencing_token FROM durable_runs WHERE run_id = ?").get(id) as
          | { lease_owner: string | null; fencing_token: number }
          | undefined;
        expect(run).toBeDefined();
        expect(run?.lease_owner).toBeNull();
        expect(Number(run?.fencing_token)).toBeGreaterThan(last);
        const steps = db.prepare("SELECT COUNT(*) AS n FROM durable_steps WHERE run_id = ?").get(id) as { n: number };
        expect(steps.n).toBe(0); // the workflow's records went
      } finally {
        db.close();
      }
    },
    storeWideFloor: false,
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
    async expectPrunedLease(id, last) {
      // The run stays (a deleted workflow is a reset run): its row keeps the token, raised by the delete.
      const run = await pool!.query(
        `SELECT lease_owner, fencing_token FROM "${schema}".durable_runs WHERE run_id = $1`,
        [id],
      );
      expect(run.rows).toHaveLength(1);
      expect(run.rows[0].lease_owner).toBeNull();
      expect(Number(run.rows[0].fencing_token)).toBeGreaterThan(last);
      const steps = await pool!.query(`SELECT COUNT(*)::int AS n FROM "${schema}".durable_steps WHERE run_id = $1`, [
        id,
      ]);
      expect(steps.rows[0].n as number).toBe(0); // the workflow's records went
    },
    storeWideFloor: false,
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

    it("a deleted id really pruned: its next lease starts above every token it had", async () => {
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
      await backend.expectPrunedLease(id, last);
      const next = await cold.acquireLease(id, "new", 30_000);
      if (!next.acquired) throw new Error("not acquired");
      expect(next.fencingToken).toBeGreaterThan(last + 1); // the delete raised it once more
      for (let token = 1; token < next.fencingToken; token++) {
        await expect(
          store.save(createWorkflowState({ workflowId: id }), { expectedStep: null, fencingToken: token }),
        ).rejects.toBeInstanceOf(WorkflowLeaseLostError);
        await expect(cold.renewLease(id, token, 30_000)).rejects.toBeInstanceOf(WorkflowLeaseLostError);
      }
      // With a store-wide floor, another id, new after the prune, also starts above it (its tokens
      // cannot be told from a pruned id's); a journal keeps every run's row, so a new id's are its own.
      const other = await cold.acquireLease("fresh", "x", 30_000);
      expect(other).toMatchObject({ acquired: true });
      const otherToken = (other as { fencingToken: number }).fencingToken;
      if (backend.storeWideFloor) expect(otherToken).toBeGreaterThan(next.fencingToken - 1);
      else expect(otherToken).toBe(1);
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

/**
 * The files of the previous release are fixtures (test/fixtures/workflow/prev-lease-v1.db.gz,
 * prev-lease-v2.db.gz), written at commit ab998f93 by that release's SQL cold store
 * (`SqlColdStore` on SQLite with the migrations `workflow` 1, `workflow-lease` 1–2,
 * `workflow-blobs`, since deleted) running the steps described in each test, then gzipped.
 */
describe("workflow lease tokens: SQLite files of the previous release move into the journal", () => {
  /** Tokens of the previous release's lease table, by id, and its floor (undefined: no floor table). */
  const leasesOf = (file: string) => {
    const db = new Database(file, { readonly: true });
    try {
      const rows = db.prepare("SELECT workflow_id, fencing_token FROM workflow_leases").all() as {
        workflow_id: string;
        fencing_token: number;
      }[];
      const hasFloor = db.prepare("SELECT 1 FROM sqlite_master WHERE name = 'workflow_lease_floor'").get();
      const floor = hasFloor
        ? Number(
            (db.prepare("SELECT fencing_token FROM workflow_lease_floor").get() as { fencing_token: number })
              .fencing_token,
          )
        : undefined;
      return { tokens: new Map(rows.map((r) => [r.workflow_id, Number(r.fencing_token)])), floor };
    } finally {
      db.close();
    }
  };

  it("lease-table version 1 (no floor): every id's next lease is above the tokens it had", async () => {
    const tmp = tempDir("lease-floor-v1");
    const file = path.join(tmp.dir, "wf.db");
    try {
      // "quiet": a checkpoint written with token 1; "busy": leased 5 times, held (tokens 1..5). Then
      // back to version 1 of the lease table: floor table dropped, its ledger entry deleted.
      unzipFixture("prev-lease-v1.db.gz", file);
      expect(leasesOf(file)).toEqual({
        tokens: new Map([
          ["busy", 5],
          ["quiet", 1],
        ]),
        floor: undefined,
      });

      const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
      const cold = store.cold as ColdStore & LeasingColdStore;
      try {
        // The previous holder's lease is gone with its table: the next worker takes the run at once.
        expect(await cold.acquireLease("busy", "w2", 30_000)).toMatchObject({ acquired: true, fencingToken: 6 });
        const next = await cold.acquireLease("quiet", "w2", 30_000);
        expect(next).toMatchObject({ acquired: true, fencingToken: 2 });
        // The token it wrote with before the move passes no fence any more; the new one writes.
        await expect(
          store.save(createWorkflowState({ workflowId: "quiet" }), { expectedStep: 0, fencingToken: 1 }),
        ).rejects.toBeInstanceOf(WorkflowLeaseLostError);
        await store.save({ ...(await store.loadLatest("quiet"))!, stepIndex: 1 }, { expectedStep: 0, fencingToken: 2 });
      } finally {
        await store.close();
        tmp.cleanup();
      }
    } catch (e) {
      tmp.cleanup();
      throw e;
    }
  });

  it("lease-table version 2 with a floor: the ids it moves start above the floor (above a pruned id's tokens)", async () => {
    const tmp = tempDir("lease-floor-v2");
    const file = path.join(tmp.dir, "wf.db");
    try {
      // "quiet": a checkpoint and a token of its own (1), below the floor; "gone": leased 7 times
      // (last token 7), deleted and pruned: its row went, the floor keeps its tokens.
      unzipFixture("prev-lease-v2.db.gz", file);
      const last = 7;
      const before = leasesOf(file);
      expect(before.tokens.has("gone")).toBe(false);
      expect(before.floor).toBeGreaterThan(last);
      const floor = before.floor ?? Number.NaN;
      expect(before.tokens.get("quiet")).toBe(1); // below the floor

      const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
      const cold = store.cold as ColdStore & LeasingColdStore;
      try {
        const next = await cold.acquireLease("quiet", "w2", 30_000);
        if (!next.acquired) throw new Error("not acquired");
        expect(next.fencingToken).toBeGreaterThan(floor);
        for (let token = 1; token < next.fencingToken; token++) {
          await expect(cold.renewLease("quiet", token, 30_000)).rejects.toBeInstanceOf(WorkflowLeaseLostError);
        }
        expect((await store.loadLatest("quiet"))?.workflowId).toBe("quiet");
      } finally {
        await store.close();
        tmp.cleanup();
      }
    } catch (e) {
      tmp.cleanup();
      throw e;
    }
  });
});
