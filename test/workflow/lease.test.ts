/**
 * One worker at a time per workflow (the new user's trial: two workers
 * resuming one workflow at once charged a card twice), on a real SQLite file
 * and a real PostgreSQL schema: the trial's in-process repro; a second worker
 * failing fast with the holder and the expiry while the holder renews its
 * lease; resume, updateState and resumeFrom refused meanwhile; a worker taken
 * over mid-node whose side effect and checkpoint are refused by the store;
 * and, with real child processes, two workers started at the same instant, a
 * SIGKILLed holder whose lease expires and is taken over (its started charge
 * goes to reconcile), and a worker paused with SIGSTOP past its lease whose
 * late side effect and checkpoint are refused.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import path from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import pg from "pg";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { InvalidOptionError } from "../../src/core/errors.js";
import {
  CheckpointStore,
  type ColdStore,
  END,
  type GraphNode,
  PostgresColdStore,
  ResumableGraphRunner,
  SqliteColdStore,
  WorkflowLeaseHeldError,
  WorkflowLeaseLostError,
} from "../../src/workflow/index.js";
import { payGraph } from "../fixtures/workflow/lease-graph.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { tempDir } from "./helpers.js";

const CHILD = fileURLToPath(new URL("../fixtures/workflow/lease-child.ts", import.meta.url));
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A worker in a child process, its output read line by line. */
class Worker {
  readonly lines: string[] = [];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>;
  private readonly proc: ChildProcess;
  private waiters: { match: (line: string) => boolean; resolve: (line: string) => void }[] = [];

  constructor(env: Record<string, string>) {
    this.proc = spawn(process.execPath, ["--import", "tsx", CHILD], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stderr = "";
    let buffer = "";
    this.proc.stderr!.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    this.proc.stdout!.on("data", (d: Buffer) => {
      buffer += d.toString();
      for (let nl = buffer.indexOf("\n"); nl >= 0; nl = buffer.indexOf("\n")) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        this.lines.push(line);
        for (const w of this.waiters.filter((x) => x.match(line))) w.resolve(line);
        this.waiters = this.waiters.filter((x) => !x.match(line));
      }
    });
    this.exited = new Promise((resolve, reject) => {
      this.proc.once("error", reject);
      this.proc.once("exit", (code, signal) => resolve({ code, signal, stderr }));
    });
  }

  /** Resolves with the first line starting with `prefix` (already printed or to come). */
  waitFor(prefix: string, timeoutMs = 30_000): Promise<string> {
    const seen = this.lines.find((l) => l.startsWith(prefix));
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no "${prefix}" line within ${timeoutMs} ms; got ${JSON.stringify(this.lines)}`)),
        timeoutMs,
      );
      this.waiters.push({
        match: (l) => l.startsWith(prefix),
        resolve: (l) => {
          clearTimeout(timer);
          resolve(l);
        },
      });
      // A worker that exits without the line says why at once (its stderr), instead of a bare timeout.
      this.exited.then(
        ({ code, signal, stderr }) => {
          if (this.lines.some((l) => l.startsWith(prefix))) return;
          clearTimeout(timer);
          reject(
            new Error(
              `the worker exited (${signal ?? code}) before a "${prefix}" line; got ${JSON.stringify(this.lines)}; stderr: ${stderr}`,
            ),
          );
        },
        () => undefined,
      );
    });
  }

  /** The worker's final `result` or `error` line, parsed. */
  async outcome(): Promise<{ kind: "result" | "error"; value: Record<string, unknown> }> {
    const exit = await this.exited;
    expect(exit.code, exit.stderr).toBe(0);
    const last = this.lines.find((l) => l.startsWith("result ") || l.startsWith("error "));
    if (last === undefined) throw new Error(`no outcome; got ${JSON.stringify(this.lines)}; ${exit.stderr}`);
    const space = last.indexOf(" ");
    return { kind: last.slice(0, space) as "result" | "error", value: JSON.parse(last.slice(space + 1)) };
  }

  send(line: string): void {
    this.proc.stdin!.write(`${line}\n`);
  }

  signal(signal: NodeJS.Signals): void {
    this.proc.kill(signal);
  }
}

/** One backend of the tests: a fresh SQLite file or PostgreSQL schema per test. */
interface Backend {
  name: string;
  skip: string | undefined;
  /** Sets up a fresh store location; returns its child-process environment. */
  setup(dir: string): Promise<Record<string, string>>;
  cold(): ColdStore;
  /** The stored lease of a workflow (read below the contract). */
  lease(workflowId: string): Promise<{ owner: string | null; fencingToken: number } | undefined>;
  /** Takes the lease over for `thief` in one statement, as another worker's acquisition after an expiry would. */
  takeOver(workflowId: string, thief: string): Promise<void>;
  teardown(): Promise<void>;
}

function sqliteBackend(): Backend {
  let file = "";
  let db: Database.Database | undefined;
  const conn = () => {
    db ??= new Database(file);
    db.pragma("busy_timeout = 5000");
    return db;
  };
  return {
    name: "SQLite",
    skip: undefined,
    async setup(dir) {
      file = path.join(dir, "workflows.db");
      return { LEASE_COLD: "sqlite", LEASE_SQLITE_PATH: file };
    },
    cold: () => new SqliteColdStore({ path: file }),
    // A workflow is a run of the file's journal: its lease is the run's (durable_runs).
    async lease(id) {
      const row = conn().prepare("SELECT lease_owner, fencing_token FROM durable_runs WHERE run_id = ?").get(id) as
        | { lease_owner: string | null; fencing_token: number }
        | undefined;
      return row && { owner: row.lease_owner, fencingToken: Number(row.fencing_token) };
    },
    async takeOver(id, thief) {
      conn()
        .prepare(
          "UPDATE durable_runs SET lease_owner = ?, fencing_token = fencing_token + 1, lease_expires_at = ? WHERE run_id = ?",
        )
        .run(thief, Date.now() + 60_000, id);
    },
    async teardown() {
      db?.close();
      db = undefined;
    },
  };
}

function postgresBackend(skip: string | undefined): Backend {
  let schema = "";
  let pool: pg.Pool | undefined;
  // The store is a journal: a workflow's lease is its run's (durable_runs: lease_owner, fencing_token).
  const t = () => `"${schema}".durable_runs`;
  return {
    name: "PostgreSQL",
    skip,
    async setup() {
      schema = `wf_lease_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
      pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
      return { LEASE_COLD: "postgres", LEASE_PG_URL: DATABASE_URL, LEASE_PG_SCHEMA: schema };
    },
    cold: () => new PostgresColdStore({ url: DATABASE_URL, schema, maxConnections: 4 }),
    async lease(id) {
      const r = await pool!.query(`SELECT lease_owner AS owner, fencing_token FROM ${t()} WHERE run_id = $1`, [id]);
      const row = r.rows[0];
      return row && { owner: row.owner, fencingToken: Number(row.fencing_token) };
    },
    async takeOver(id, thief) {
      await pool!.query(
        `UPDATE ${t()} SET lease_owner = $1, fencing_token = fencing_token + 1, lease_expires_at = $2 WHERE run_id = $3`,
        [thief, Date.now() + 60_000, id],
      );
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
  describe.skipIf(backend.skip)(`workflow leases: ${backend.name}`, () => {
    let tmp: ReturnType<typeof tempDir>;
    let env: Record<string, string>;
    const stores: CheckpointStore[] = [];
    const closers: (() => void)[] = [];
    /** A checkpoint store of its own (its own connection or pool), as another process would have. */
    const open = async () => {
      const store = await CheckpointStore.open({ cold: backend.cold(), blobDir: path.join(tmp.dir, "blobs") });
      stores.push(store);
      return store;
    };
    /** The payment graph for an in-process worker. */
    const graph = (options: Parameters<typeof payGraph>[1]) => {
      const g = payGraph(path.join(tmp.dir, "effects.db"), options);
      closers.push(g.close);
      return g;
    };
    const child = (extra: Record<string, string>) =>
      new Worker({
        ...env,
        LEASE_BLOB_DIR: path.join(tmp.dir, "blobs"),
        LEASE_EFFECTS_DB: path.join(tmp.dir, "effects.db"),
        ...extra,
      });

    beforeEach(async () => {
      tmp = tempDir("lease", { memory: true });
      env = await backend.setup(tmp.dir);
    });
    afterEach(async () => {
      for (const store of stores.splice(0)) await store.close();
      for (const close of closers.splice(0)) close();
      await backend.teardown();
      tmp.cleanup();
    });

    it("the trial's repro: two workers resuming one workflow at once charge once; the other fails fast, typed", async () => {
      let crashFirst = true;
      let entered = 0;
      const charges: string[] = [];
      const payments = {
        charge: async (k: string) => {
          await sleep(200);
          charges.push(k);
          return "ch_1";
        },
        find: async (k: string) => charges.includes(k),
      };
      const mk = async () =>
        new ResumableGraphRunner({
          store: await open(),
          leaseWaitMs: 0, // the other fails fast (the default waits, as runDurable)
          nodes: {
            pay: async (_s, ctx) => {
              entered++;
              if (crashFirst) {
                crashFirst = false;
                throw new Error("worker died");
              }
              const receipt = await ctx.sideEffect("charge", (key) => payments.charge(key), {
                reconcile: async (e) =>
                  (await payments.find(e.key)) ? { outcome: "happened", result: "ch_1" } : { outcome: "not-happened" },
              });
              return { next: END, updates: { receipt } };
            },
          },
        });
      const [w0, w1, w2] = [await mk(), await mk(), await mk()];
      await w0.runOrResume("order-7").catch(() => {});
      const results = await Promise.allSettled([w1.runOrResume("order-7"), w2.runOrResume("order-7")]);
      expect(charges).toEqual(["order-7:0:0"]);
      const won = results.filter((r) => r.status === "fulfilled");
      const lost = results.filter((r) => r.status === "rejected");
      expect(won).toHaveLength(1);
      expect((won[0] as PromiseFulfilledResult<{ state: { sharedMemory: unknown } }>).value.state.sharedMemory).toEqual(
        { receipt: "ch_1" },
      );
      const err = (lost[0] as PromiseRejectedResult).reason;
      expect(err).toBeInstanceOf(WorkflowLeaseHeldError);
      expect(err).toMatchObject({ code: "LEASE_HELD", workflowId: "order-7", fencingToken: 2 });
      expect((err as WorkflowLeaseHeldError).owner).toMatch(/^.+:\d+:[0-9a-f]{8}$/);
      expect((err as WorkflowLeaseHeldError).expiresAt).toBeGreaterThan(Date.now() - 5000);
      expect(entered).toBe(2); // the crashed run and the winner: the loser ran no node
      expect(await backend.lease("order-7")).toEqual({ owner: null, fencingToken: 2 }); // released
    });

    it("the holder renews its lease past its TTL; meanwhile runOrResume, resume, updateState and a fork onto it are refused", async () => {
      const store = await open();
      const other = await open();
      let entered = 0;
      let release!: () => void;
      const gate = new Promise<void>((r) => {
        release = r;
      });
      const nodes: Record<string, GraphNode> = {
        slow: async () => {
          entered++;
          await gate;
          return { next: END, updates: { done: true } };
        },
      };
      const holder = new ResumableGraphRunner({ store, nodes, leaseTtlMs: 300 });
      const running = holder.runOrResume("held");
      while (entered === 0) await sleep(5);
      await sleep(700); // more than two lease durations: only renewals keep it
      const second = new ResumableGraphRunner({ store: other, nodes, leaseWaitMs: 0 });
      const held = await second.runOrResume("held").catch((e: unknown) => e);
      expect(held).toBeInstanceOf(WorkflowLeaseHeldError);
      expect(held).toMatchObject({ workflowId: "held", fencingToken: 1 });
      expect((held as WorkflowLeaseHeldError).expiresAt).toBeGreaterThan(Date.now());
      expect((held as Error).message).toMatch(/nothing was run here/);
      await expect(second.updateState("held", { updates: { x: 1 } })).rejects.toBeInstanceOf(WorkflowLeaseHeldError);
      await expect(second.resume("held", "yes")).rejects.toBeInstanceOf(WorkflowLeaseHeldError);
      await expect(second.resumeFrom("held", 0, { newWorkflowId: "held", run: false })).rejects.toBeInstanceOf(
        WorkflowLeaseHeldError,
      );
      // The same runner asked twice (an explicit owner would let the store in again): refused too.
      await expect(holder.runOrResume("held")).rejects.toBeInstanceOf(WorkflowLeaseHeldError);
      expect(entered).toBe(1);
      expect((await store.history("held")).map((h) => h.stepIndex)).toEqual([0]);
      release();
      expect((await running).status).toBe("finished");
      // Released when it stopped: the next caller gets in at once.
      expect((await second.runOrResume("held")).status).toBe("finished");
      expect(await second.updateState("held", { updates: { x: 1 } })).toMatchObject({ stepIndex: 2 });
    });

    it("a worker taken over mid-node: the store refuses its side-effect start and its checkpoint; a renewal aborts its signal", async () => {
      for (const variant of ["charge", "return", "signal"] as const) {
        const id = `taken-${variant}`;
        // `return`: the node returns at once after the takeover, so the checkpoint is its only late write.
        const g = graph({ worker: "A", ...(variant === "return" ? { after: "return" as const } : {}) });
        let release!: () => void;
        const gate = new Promise<void>((r) => {
          release = r;
        });
        let signal: AbortSignal | undefined;
        const runner = new ResumableGraphRunner({
          store: await open(),
          // A long lease (no renewal before the takeover): the store's fence alone refuses the writes.
          leaseTtlMs: variant === "signal" ? 300 : 30_000,
          nodes: {
            pay: async (s, ctx) => {
              signal = ctx.abortSignal;
              await gate;
              return g.nodes.pay!(s, ctx);
            },
          },
        });
        const running = runner.runOrResume(id).catch((e: unknown) => e);
        // Taken over once the node runs (its first checkpoint written), however slow the machine.
        while (signal === undefined || !(await backend.lease(id))?.owner) await sleep(5);
        await sleep(20);
        await backend.takeOver(id, "B");
        if (variant === "signal") {
          for (let i = 0; i < 200 && !signal?.aborted; i++) await sleep(10);
          expect(signal?.aborted, variant).toBe(true);
          expect(signal?.reason).toBeInstanceOf(WorkflowLeaseLostError);
        }
        release();
        const err = await running;
        expect(err, variant).toBeInstanceOf(WorkflowLeaseLostError);
        expect(err).toMatchObject({ code: "STALE_FENCING_TOKEN", fencingToken: 1, currentToken: 2, owner: "B" });
        expect(g.charges(), variant).toEqual([]); // nothing charged by the worker taken over
        const store = await open();
        expect((await store.loadLatest(id))?.stepIndex, variant).toBe(0); // its checkpoint was refused
        expect(await store.errors(id), variant).toEqual([]); // and nothing recorded as a node failure
        expect((await store.summary(id))?.status).toBe("running");
      }
    });

    it("two child processes resuming one workflow at the same instant: one charge, the other a typed lease error", async () => {
      const id = "order-race";
      const a = child({ LEASE_ID: id, LEASE_OWNER: "worker-a", LEASE_CHARGE_MS: "1500", LEASE_GO: "1" });
      const b = child({ LEASE_ID: id, LEASE_OWNER: "worker-b", LEASE_CHARGE_MS: "1500", LEASE_GO: "1" });
      await Promise.all([a.waitFor("ready"), b.waitFor("ready")]);
      a.send("go");
      b.send("go");
      const outcomes = await Promise.all([a.outcome(), b.outcome()]);
      const results = outcomes.filter((o) => o.kind === "result");
      const errors = outcomes.filter((o) => o.kind === "error");
      expect(results, JSON.stringify(outcomes)).toHaveLength(1);
      expect(errors).toHaveLength(1);
      const winner = outcomes[0]!.kind === "result" ? "worker-a" : "worker-b";
      expect(results[0]!.value).toEqual({ status: "finished", receipt: `ch_${winner}` });
      expect(errors[0]!.value).toMatchObject({ name: "WorkflowLeaseHeldError", code: "LEASE_HELD", owner: winner });
      expect(errors[0]!.value.expiresAt).toBeGreaterThan(Date.now() - 60_000);
      const loser = winner === "worker-a" ? b : a;
      expect(loser.lines).not.toContain("in-node"); // it ran no node
      const g = graph({ worker: "reader" });
      expect(g.charges()).toEqual([{ key: `${id}:0:0`, worker: winner }]);
      expect(g.reconciles()).toEqual([]);
    }, 60_000);

    it("a SIGKILLed holder: its lease holds until it expires, then the next worker takes it over with a higher token; its started charge goes to reconcile, once", async () => {
      for (const landed of [true, false]) {
        const id = `order-killed-${landed ? "landed" : "in-flight"}`;
        const a = child({
          LEASE_ID: id,
          LEASE_OWNER: "worker-a",
          LEASE_TTL_MS: "2000",
          LEASE_CHARGE_MS: "60000",
          ...(landed ? { LEASE_LAND_FIRST: "1" } : {}),
        });
        // Killed after the charge landed but before its result was recorded, or while it is in flight.
        await a.waitFor(landed ? "charged" : "charging");
        a.signal("SIGKILL");
        expect((await a.exited).signal).toBe("SIGKILL");
        const g = graph({ worker: "worker-b" });
        const store = await open();
        // The dead holder's lease is live until it expires: fail fast, nothing run, nothing reconciled.
        const early = await new ResumableGraphRunner({ store, nodes: g.nodes, owner: "worker-b", leaseWaitMs: 0 })
          .runOrResume(id)
          .catch((e: unknown) => e);
        expect(early, id).toBeInstanceOf(WorkflowLeaseHeldError);
        expect(early).toMatchObject({ owner: "worker-a", fencingToken: 1 });
        expect(g.reconciles().filter((r) => r.key.startsWith(id))).toEqual([]);
        // Waiting: taken over after the expiry; the started charge is reconciled, never re-run blindly.
        const t0 = Date.now();
        const out = await new ResumableGraphRunner({
          store,
          nodes: g.nodes,
          owner: "worker-b",
          leaseWaitMs: 10_000,
        }).runOrResume(id);
        expect(Date.now() - t0).toBeGreaterThan(100);
        expect(out.status).toBe("finished");
        expect(out.state.sharedMemory.receipt).toBe(landed ? "ch_reconciled" : "ch_worker-b");
        expect(g.reconciles().filter((r) => r.key.startsWith(id))).toEqual([
          { key: `${id}:0:0`, worker: "worker-b", outcome: landed ? "happened" : "not-happened" },
        ]);
        expect(g.charges().filter((c) => c.key.startsWith(id))).toEqual([
          { key: `${id}:0:0`, worker: landed ? "worker-a" : "worker-b" },
        ]);
        expect(await backend.lease(id)).toEqual({ owner: null, fencingToken: 2 });
      }
    }, 90_000);

    it("a worker paused (SIGSTOP) past its lease: the one that took over finishes; the paused one's late charge and late checkpoint are refused", async () => {
      for (const after of ["charge", "return"] as const) {
        const id = `order-paused-${after}`;
        const a = child({
          LEASE_ID: id,
          LEASE_OWNER: "worker-a",
          LEASE_TTL_MS: "500",
          LEASE_PAUSE_MS: "1500",
          LEASE_AFTER: after,
        });
        await a.waitFor("in-node");
        a.signal("SIGSTOP");
        try {
          await sleep(1000); // its lease expires meanwhile (nobody renews it)
          const g = graph({ worker: "worker-b" });
          const out = await new ResumableGraphRunner({
            store: await open(),
            nodes: g.nodes,
            owner: "worker-b",
            leaseWaitMs: 10_000,
          }).runOrResume(id);
          expect(out.state.sharedMemory.receipt).toBe("ch_worker-b");
        } finally {
          a.signal("SIGCONT");
        }
        const outcome = await a.outcome();
        expect(outcome.kind, JSON.stringify(outcome)).toBe("error");
        expect(outcome.value).toMatchObject({
          name: "WorkflowLeaseLostError",
          code: "STALE_FENCING_TOKEN",
          fencingToken: 1,
          currentToken: 2,
        });
        expect(a.lines).not.toContain("charging"); // the late side effect never started
        const g = graph({ worker: "reader" });
        expect(g.charges().filter((c) => c.key.startsWith(id))).toEqual([{ key: `${id}:0:0`, worker: "worker-b" }]);
        const store = await open();
        const history = await store.history(id);
        expect(history.map((h) => h.nodeName)).toEqual(["__start__", "pay"]);
        expect(history[1]?.state.sharedMemory).toEqual({ receipt: "ch_worker-b" }); // not the paused worker's
        expect(await store.errors(id)).toEqual([]);
      }
    }, 90_000);
  });
}

describe("lease options", () => {
  let tmp: ReturnType<typeof tempDir>;
  let store: CheckpointStore;
  beforeEach(async () => {
    tmp = tempDir("lease-options");
    store = await CheckpointStore.open({
      cold: new SqliteColdStore({ path: path.join(tmp.dir, "wf.db") }),
      blobDir: path.join(tmp.dir, "blobs"),
    });
  });
  afterEach(async () => {
    await store.close();
    tmp.cleanup();
  });
  const nodes = { only: () => ({ next: END }) };

  it("checks leaseTtlMs, leaseWaitMs, owner and lease", () => {
    for (const bad of [
      { leaseTtlMs: 0 },
      { leaseTtlMs: 50 },
      { leaseTtlMs: 1e10 },
      { leaseWaitMs: 1e12 },
      { leaseTtlMs: "30s" },
      { leaseWaitMs: -1 },
      { owner: "" },
      { lease: "yes" },
    ]) {
      expect(() => new ResumableGraphRunner({ store, nodes, ...(bad as object) }), JSON.stringify(bad)).toThrow(
        InvalidOptionError,
      );
    }
  });

  it("a cold store without leases is refused unless lease: false says one worker per workflow is guaranteed", async () => {
    const real = store.cold;
    // A user's own cold store: every method of the contract, none of the optional lease methods.
    const own: ColdStore = {
      name: "own",
      init: () => real.init(),
      write: (row, expected) => real.write(row, expected),
      read: (id, step) => real.read(id, step),
      latest: (id) => real.latest(id),
      summary: (id) => real.summary(id),
      history: (id) => real.history(id),
      list: (q) => real.list(q),
      explainList: (status) => real.explainList(status),
      deleteWorkflow: (id) => real.deleteWorkflow(id),
      prune: (cutoff, keepLast, o) => real.prune(cutoff, keepLast, o),
      recordError: (r) => real.recordError(r),
      errors: (id) => real.errors(id),
      idempotencyBegin: (key, info) => real.idempotencyBegin(key, info),
      idempotencyFinish: (key, json, now) => real.idempotencyFinish(key, json, now),
      idempotencyAbandon: (key) => real.idempotencyAbandon(key),
      close: async () => undefined,
    };
    const ownStore = await CheckpointStore.open({ cold: own, blobDir: path.join(tmp.dir, "blobs") });
    expect(() => new ResumableGraphRunner({ store: ownStore, nodes })).toThrow(/keeps no leases/);
    const out = await new ResumableGraphRunner({ store: ownStore, nodes, lease: false }).runOrResume("own");
    expect(out.status).toBe("finished");
  });
});
