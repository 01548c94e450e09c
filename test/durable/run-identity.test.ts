/**
 * Run identity (case pb-38), on the SQLite, PostgreSQL and Redis journals: a
 * run id names one request. Reusing it with the same input returns the stored
 * result without running anything; with another input it is a typed
 * RunInputMismatchError naming both hashes (never the old output), unless the
 * caller attaches on purpose; resuming an id that does not exist without an
 * input is RunNotFoundError and creates nothing.
 */
import { afterAll, describe, expect, it } from "vitest";
import { step, waitForSignal } from "../../src/durable/context.js";
import { RunInputMismatchError, RunNotFoundError } from "../../src/durable/errors.js";
import { hashInput } from "../../src/durable/journal.js";
import { ensureRun, runDurable } from "../../src/durable/run.js";
import { signal } from "../../src/durable/signals.js";
import { journalStores, type OpenedStore } from "../fixtures/durable/stores.js";

const stores = await journalStores();
const opened: OpenedStore[] = [];
afterAll(async () => {
  for (const o of opened) await o.destroy();
});

for (const store of stores) {
  describe.skipIf(!!store.skip)(`run identity on ${store.name}${store.skip ? ` (skipped: ${store.skip})` : ""}`, () => {
    const open = () => {
      const o = store.open();
      opened.push(o);
      return o.journal;
    };

    it("pb-38: same id + same input is the stored result; another input is a typed conflict, not the old output", async () => {
      const journal = open();
      let charges = 0;
      const charge = async (input: unknown) => {
        const { amount } = input as { amount: number };
        return step(
          "charge",
          () => {
            charges++;
            return { charged: amount };
          },
          { input: { amount } },
        );
      };
      const first = await runDurable("order-38", charge, { journal, input: { amount: 5, currency: "EUR" } });
      expect(first).toEqual({ runId: "order-38", status: "completed", output: { charged: 5 } });

      // same input (keys in another order: the canonical hash is the same): the stored result, nothing re-run
      const again = await runDurable("order-38", charge, { journal, input: { currency: "EUR", amount: 5 } });
      expect(again).toEqual(first);
      expect(charges).toBe(1);

      // another input: a typed conflict naming both hashes; nothing run, nothing recorded
      const eventsBefore = await journal.readEvents("order-38");
      const err = await runDurable("order-38", charge, { journal, input: { amount: 500, currency: "EUR" } }).catch(
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(RunInputMismatchError);
      expect(err).toMatchObject({
        code: "RUN_INPUT_MISMATCH",
        runId: "order-38",
        storedHash: hashInput({ amount: 5, currency: "EUR" }),
        offeredHash: hashInput({ amount: 500, currency: "EUR" }),
      });
      expect((err as Error).message).toContain(hashInput({ amount: 5, currency: "EUR" }).slice(0, 12));
      expect((err as Error).message).toContain("attach: true");
      expect(charges).toBe(1);
      expect(await journal.readEvents("order-38")).toEqual(eventsBefore);
      expect((await journal.getRun("order-38"))?.input).toEqual({ amount: 5, currency: "EUR" });

      // attaching on purpose returns the existing run's outcome (its stored input was used)
      expect(await runDurable("order-38", charge, { journal, input: { amount: 500 }, attach: true })).toEqual(first);
      // without input: the existing run, as it is
      expect(await runDurable("order-38", charge, { journal })).toEqual(first);
      expect(charges).toBe(1);
    });

    it("a paused run resumed with another input is refused; attach resumes it with the stored input", async () => {
      const journal = open();
      const wf = async (input: unknown) => {
        const go = await waitForSignal<number>("go");
        return { input, go } as never;
      };
      expect(await runDurable("paused-38", wf, { journal, input: { v: 1 } })).toMatchObject({ status: "waiting" });
      await signal("paused-38", "go", 7, { journal });
      await expect(runDurable("paused-38", wf, { journal, input: { v: 2 } })).rejects.toBeInstanceOf(
        RunInputMismatchError,
      );
      expect((await journal.getRun("paused-38"))?.status).toBe("waiting");
      expect(await runDurable("paused-38", wf, { journal, input: { v: 2 }, attach: true })).toEqual({
        runId: "paused-38",
        status: "completed",
        output: { input: { v: 1 }, go: 7 },
      });
    });

    it("resuming a run id that does not exist, without input, is RunNotFoundError and creates nothing", async () => {
      const journal = open();
      let ran = 0;
      const wf = async () => {
        ran++;
        return 1;
      };
      const err = await runDurable("ordr-38-typo", wf, { journal }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RunNotFoundError);
      expect(err).toMatchObject({ code: "RUN_NOT_FOUND", runId: "ordr-38-typo" });
      expect((err as Error).message).toContain("pass `input`");
      expect(ran).toBe(0);
      expect(await journal.getRun("ordr-38-typo")).toBeUndefined();
      expect(await journal.listRuns()).toEqual([]);
      // input: null is an input: it starts the run
      expect(await runDurable("ordr-38-typo", wf, { journal, input: null })).toMatchObject({ status: "completed" });
      expect(ran).toBe(1);
    });

    it("ensureRun says whether it created the run, and enforces the same rules", async () => {
      const journal = open();
      const init = { runId: "e-38", workflow: "charge", input: { amount: 5 } };
      expect((await ensureRun(journal, init)).created).toBe(true);
      expect(await ensureRun(journal, init)).toMatchObject({ created: false, run: { input: { amount: 5 } } });
      await expect(ensureRun(journal, { ...init, input: { amount: 6 } })).rejects.toBeInstanceOf(RunInputMismatchError);
      expect(await ensureRun(journal, { ...init, input: { amount: 6 }, attach: true })).toMatchObject({
        created: false,
        run: { input: { amount: 5 } },
      });
      await expect(ensureRun(journal, { runId: "nope", workflow: "charge" })).rejects.toBeInstanceOf(RunNotFoundError);
      expect(await journal.getRun("nope")).toBeUndefined();
    });
  });
}
