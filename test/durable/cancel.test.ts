/**
 * Cancellation, on the SQLite, PostgreSQL and Redis journals: `cancel()`
 * aborts the running step's `currentStep().signal` with a RunCancelledError
 * (the executor learns it from its status check, or when its lease renewal is refused), `runDurable`
 * returns `{ status: "cancelled" }`, a step started after the cancellation
 * throws and its body never runs, a cancelled run never runs again, and a
 * waiting run is released.
 */
import { setTimeout as wait } from "node:timers/promises";
import { afterAll, describe, expect, it } from "vitest";
import { InvalidOptionError } from "../../src/core/errors.js";
import { currentStep, step, waitForSignal } from "../../src/durable/context.js";
import { RunCancelledError } from "../../src/durable/errors.js";
import { cancel, runDurable } from "../../src/durable/run.js";
import { journalFromEnv, journalStores, type OpenedStore } from "../fixtures/durable/stores.js";

const stores = await journalStores();
const opened: OpenedStore[] = [];
afterAll(async () => {
  for (const o of opened) await o.destroy();
});

for (const store of stores) {
  describe.skipIf(!!store.skip)(`cancellation on ${store.name}${store.skip ? ` (skipped: ${store.skip})` : ""}`, () => {
    const open = () => {
      const o = store.open();
      opened.push(o);
      return o.journal;
    };

    it("cancel() aborts the running step's signal; runDurable returns cancelled; no later step runs", async () => {
      const journal = open();
      const ran: string[] = [];
      let seen: unknown;
      const wf = async () => {
        await step("first", () => ran.push("first"));
        await step("long", async () => {
          ran.push("long");
          const signal = currentStep()?.signal;
          try {
            await wait(20_000, undefined, { signal }); // a cancellable call that honours the signal
          } catch (e) {
            seen = signal?.reason;
            throw e;
          }
          return "finished";
        });
        await step("after", () => ran.push("after"));
        return "done";
      };
      const started = Date.now();
      const running = runDurable("c-run", wf, { journal, input: null, leaseTtlMs: 600 });
      for (let i = 0; i < 400; i++) {
        if ((await journal.readSteps("c-run"))[1]?.status === "started") break;
        await wait(10);
      }
      const cancelled = await cancel(journal, "c-run", { by: "alice", reason: "customer withdrew the request" });
      expect(cancelled.status).toBe("cancelled");
      expect(await running).toEqual({ runId: "c-run", status: "cancelled" });
      expect(Date.now() - started, "aborted within a lease renewal, not after the 20 s call").toBeLessThan(5000);
      expect(ran).toEqual(["first", "long"]);
      expect(seen).toBeInstanceOf(RunCancelledError);
      expect(seen).toMatchObject({ code: "RUN_CANCELLED", by: "alice", reason: "customer withdrew the request" });

      expect(await journal.getRun("c-run")).toMatchObject({ status: "cancelled" });
      expect((await journal.readSteps("c-run")).map((s) => [s.name, s.status])).toEqual([
        ["first", "completed"],
        ["long", "started"],
      ]);
      const events = await journal.readEvents("c-run");
      expect(events.filter((e) => e.type === "run_cancelled")).toMatchObject([
        { by: "alice", detail: "customer withdrew the request" },
      ]);
      const leases = events.filter((e) => e.type === "lease_acquired").length;

      // a cancelled run never runs again
      let calls = 0;
      expect(
        await runDurable(
          "c-run",
          async () => {
            calls++;
            return wf();
          },
          { journal },
        ),
      ).toEqual({ runId: "c-run", status: "cancelled" });
      expect(calls).toBe(0);
      expect((await journal.readEvents("c-run")).filter((e) => e.type === "lease_acquired")).toHaveLength(leases);
    });

    it("a cancel from another journal instance aborts a running step long before the lease's renewal", async () => {
      const o = store.open();
      opened.push(o);
      const journal = o.journal;
      const operator = journalFromEnv(o.env); // another connection to the same journal: as the CLI in another process
      let seen: unknown;
      const wf = async () =>
        step("long", async () => {
          const signal = currentStep()?.signal;
          try {
            await wait(60_000, undefined, { signal });
          } catch (e) {
            seen = signal?.reason;
            throw e;
          }
          return "finished";
        });
      // the default lease (30 s, renewed every 10 s): only the status check can notice within the bound below
      const running = runDurable("c-check", wf, { journal, input: null, cancelCheckMs: 200 });
      for (let i = 0; i < 400; i++) {
        if ((await journal.readSteps("c-check"))[0]?.status === "started") break;
        await wait(10);
      }
      const cancelledAt = Date.now();
      await cancel(operator, "c-check", { by: "bob" });
      expect(await running).toEqual({ runId: "c-check", status: "cancelled" });
      expect(Date.now() - cancelledAt, "noticed by the status check, not at the renewal 10 s later").toBeLessThan(5000);
      expect(seen).toMatchObject({ code: "RUN_CANCELLED", by: "bob" });
      await operator.close();
    });

    it("a step started after the cancellation throws RunCancelledError and its body never runs", async () => {
      const journal = open();
      const ran: string[] = [];
      const thrown: unknown[] = [];
      const wf = async () => {
        try {
          // the operator cancels while this body runs; the executor has not noticed yet (30 s lease)
          await step("a", async () => {
            ran.push("a");
            await cancel(journal, "c-late", { by: "bob" });
            return 1;
          });
        } catch (e) {
          thrown.push(e);
        }
        try {
          await step("b", () => ran.push("b"));
        } catch (e) {
          thrown.push(e);
        }
        return "workflow swallowed the errors";
      };
      expect(await runDurable("c-late", wf, { journal, input: null })).toEqual({
        runId: "c-late",
        status: "cancelled",
      });
      expect(ran).toEqual(["a"]);
      expect(thrown).toHaveLength(2);
      for (const e of thrown) {
        expect(e).toBeInstanceOf(RunCancelledError);
        expect(e).toMatchObject({ runId: "c-late", by: "bob" });
      }
      // step a's completion was refused: the journal never says it completed
      expect((await journal.readSteps("c-late")).map((s) => [s.name, s.status])).toEqual([["a", "started"]]);
      expect((await journal.getRun("c-late"))?.status).toBe("cancelled");
    });

    it("a waiting run is released by cancel(): resuming it runs nothing; an ended run stays as it was", async () => {
      const journal = open();
      let resumed = 0;
      const wf = async () => {
        await waitForSignal("approval");
        resumed++;
        return "approved";
      };
      expect(await runDurable("c-wait", wf, { journal, input: null })).toMatchObject({ status: "waiting" });
      const run = await cancel(journal, "c-wait", { reason: "no longer needed" });
      expect(run).toMatchObject({ status: "cancelled" });
      expect(run.waitingFor).toBeUndefined();
      const [event] = (await journal.readEvents("c-wait")).filter((e) => e.type === "run_cancelled");
      expect(event?.by).toMatch(/.+@.+/); // default: <user>@<host>
      expect(await runDurable("c-wait", wf, { journal })).toEqual({ runId: "c-wait", status: "cancelled" });
      expect(resumed).toBe(0);

      expect(await runDurable("c-done", async () => "ok", { journal, input: null })).toMatchObject({
        status: "completed",
      });
      expect(await cancel(journal, "c-done", { by: "carol" })).toMatchObject({ status: "completed", output: "ok" });
      // The form approve/signal use: cancel(runId, { journal }); without a journal, a typed error.
      expect(await runDurable("c-form", wf, { journal, input: null })).toMatchObject({ status: "waiting" });
      expect(await cancel("c-form", { journal, by: "dave" })).toMatchObject({ status: "cancelled" });
      expect(() => cancel("c-form", {} as never)).toThrow(InvalidOptionError);
      expect(() => cancel("c-form" as never, "c-form" as never)).toThrow(InvalidOptionError);
      expect(() => cancel(journal, "c-form", { journal } as never)).toThrow(InvalidOptionError);
      expect(await runDurable("c-done", async () => "ok", { journal })).toMatchObject({
        status: "completed",
        output: "ok",
      });
    });
  });
}
