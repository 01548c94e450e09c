/**
 * A run's lease belongs to one execution, not to a worker's owner id: a
 * second execution of a live run in the same process, under the same owner
 * (another `runDurable` call, another concurrency slot of one
 * `DurableWorker`), waits for the first or fails with `LeaseHeldError`; it
 * never takes the lease back and runs a step whose first execution is still
 * in progress. Counted by entries into the step's body: at most one inside at
 * a time, one in all. On SQLite, PostgreSQL and Redis; the worker on BullMQ
 * over the real Redis.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { LeaseHeldError } from "../../src/core/errors.js";
import { step } from "../../src/durable/context.js";
import { RedisJournal } from "../../src/durable/journal-redis.js";
import { type RunResult, runDurable } from "../../src/durable/run.js";
import { DurableWorker } from "../../src/durable/worker.js";
import { journalStores } from "../fixtures/durable/stores.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A workflow of one step whose body stays inside until `open()`; counts entries and the most inside at once. */
function gatedCharge() {
  const seen = { calls: 0, inside: 0, most: 0 };
  let open!: () => void;
  const gate = new Promise<void>((r) => {
    open = r;
  });
  let entered!: () => void;
  const started = new Promise<void>((r) => {
    entered = r;
  });
  const workflow = async () =>
    step("charge", async () => {
      seen.calls++;
      seen.inside++;
      seen.most = Math.max(seen.most, seen.inside);
      entered();
      await gate;
      seen.inside--;
      return "charged";
    });
  return { seen, workflow, started, open };
}

async function until(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

for (const store of await journalStores()) {
  describe.skipIf(!!store.skip)(
    `${store.name}: one execution per lease${store.skip ? ` (skipped: ${store.skip})` : ""}`,
    () => {
      it("two runDurable calls of one run under one owner: the second waits, the step body runs once", async () => {
        const { journal, destroy } = store.open();
        const g = gatedCharge();
        try {
          const options = { journal, input: { order: 7 }, owner: "web-1", leaseTtlMs: 1500 };
          const first = runDurable("dup", g.workflow, options);
          first.catch(() => undefined); // (awaited below; on the old code it is fenced off after the test failed)
          await g.started;
          const second = runDurable("dup", g.workflow, options);
          second.catch(() => undefined);
          // on the old code the second took the lease back at once (same owner) and entered the step
          await sleep(400);
          expect(g.seen).toMatchObject({ calls: 1, inside: 1 });
          const held = await journal.getRun("dup");
          expect(held).toMatchObject({ leaseOwner: "web-1", fencingToken: 1 });
          g.open();
          const results = await Promise.all([first, second]);
          const done: RunResult = { runId: "dup", status: "completed", output: "charged" };
          expect(results).toEqual([done, done]);
          expect(g.seen).toEqual({ calls: 1, inside: 0, most: 1 });
          const steps = await journal.readSteps("dup");
          expect(steps.map((s) => [s.name, s.status, s.attempt, s.fencingToken])).toEqual([
            ["charge", "completed", 1, 1],
          ]);
        } finally {
          g.open();
          await destroy();
        }
      });

      it("with leaseWaitMs: 0 the second call fails with LeaseHeldError naming the owner, and runs nothing", async () => {
        const { journal, destroy } = store.open();
        const g = gatedCharge();
        try {
          const first = runDurable("dup0", g.workflow, { journal, input: null, owner: "web-1" });
          first.catch(() => undefined);
          await g.started;
          const second = runDurable("dup0", g.workflow, { journal, input: null, owner: "web-1", leaseWaitMs: 0 });
          // on the old code the second took the lease back and waits in the step with the first
          const error = await Promise.race([second.catch((e: unknown) => e), sleep(3000).then(() => "still running")]);
          expect(error).toBeInstanceOf(LeaseHeldError);
          expect(error).toMatchObject({ code: "LEASE_HELD", runId: "dup0", owner: "web-1" });
          expect(g.seen).toMatchObject({ calls: 1, inside: 1 });
          g.open();
          expect(await first).toEqual({ runId: "dup0", status: "completed", output: "charged" });
          expect(g.seen).toEqual({ calls: 1, inside: 0, most: 1 });
          // the lease is the execution's: once released, the same owner takes it again (a new token)
          const lease = await journal.acquireLease("dup0", "web-1", 1000, { reentrant: false });
          expect(lease).toMatchObject({ acquired: true, fencingToken: 2 });
        } finally {
          g.open();
          await destroy();
        }
      });
    },
  );
}

const redisSkip = await redisSkipReason();

describe.skipIf(!!redisSkip)(
  `DurableWorker with concurrency 2 given a duplicate job mid-step${redisSkip ? ` (skipped: ${redisSkip})` : ""}`,
  () => {
    it("the step body runs once; the duplicate waits (delayed) and then finds the run completed", async () => {
      const id = randomUUID().slice(0, 8);
      const journal = new RedisJournal({ url: REDIS_URL, keyPrefix: `test:lease-exec:${id}:` });
      const g = gatedCharge();
      const results: string[] = [];
      const worker = new DurableWorker({
        journal,
        url: REDIS_URL,
        queueName: `lease-exec-${id}`,
        workflows: { charge: g.workflow },
        concurrency: 2,
        leaseTtlMs: 1500,
        onResult: (r) => results.push(r.status),
      });
      try {
        await worker.start();
        await worker.enqueue({ runId: "order-1", workflow: "charge", input: { amount: 5 } });
        await g.started;
        await worker.wake("order-1"); // the duplicate job: the second slot is free to take it
        // long enough for the free slot to take the job (and, on the old code, the lease and the step)
        await until("the duplicate job to be taken", async () => {
          const counts = await worker.jobCounts();
          return (counts.waiting ?? 0) === 0;
        });
        await sleep(500);
        expect(g.seen).toMatchObject({ calls: 1, inside: 1 });
        expect(await journal.getRun("order-1")).toMatchObject({ status: "running", fencingToken: 1 });
        g.open();
        await until("both jobs to complete", async () => (await worker.jobCounts()).completed === 2);
        expect(g.seen).toEqual({ calls: 1, inside: 0, most: 1 });
        expect(await journal.getRun("order-1")).toMatchObject({ status: "completed", output: "charged" });
        // the duplicate reports the outcome when it was retried in runDurable, not when the run had ended before
        expect(results.length).toBeGreaterThanOrEqual(1);
        expect(new Set(results)).toEqual(new Set(["completed"]));
        const steps = await journal.readSteps("order-1");
        expect(steps.map((s) => [s.name, s.status, s.attempt])).toEqual([["charge", "completed", 1]]);
      } finally {
        g.open();
        await worker.obliterate().catch(() => undefined);
        await worker.close();
        await journal.clear();
        await journal.close();
      }
    }, 30_000);
  },
);
