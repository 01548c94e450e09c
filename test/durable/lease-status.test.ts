/**
 * `acquireLease` tells the new holder the run's status as the lease was
 * taken, so `runDurable` reads the run a second time only when it ended
 * meanwhile (or when a journal does not say). On the three journals.
 */
import { describe, expect, it } from "vitest";
import { step } from "../../src/durable/context.js";
import type { Journal, LeaseResult } from "../../src/durable/journal.js";
import { runDurable } from "../../src/durable/run.js";
import { journalStores } from "../fixtures/durable/stores.js";

const token = (l: LeaseResult) => {
  if (!l.acquired) throw new Error("lease refused");
  return l.fencingToken;
};

for (const store of await journalStores()) {
  describe.skipIf(!!store.skip)(
    `${store.name}: the lease's run status${store.skip ? ` (skipped: ${store.skip})` : ""}`,
    () => {
      it("is the run's status when the lease was taken", async () => {
        const { journal: j, destroy } = store.open();
        try {
          await j.createRun({ runId: "r", workflow: "wf", input: null });
          const first = await j.acquireLease("r", "a", 10_000);
          expect(first).toMatchObject({ acquired: true, status: "pending" });
          await j.updateRun(token(first), "r", { status: "running" });
          await j.releaseLease("r", token(first));
          const second = await j.acquireLease("r", "b", 10_000);
          expect(second).toMatchObject({ acquired: true, status: "running" });
          await j.updateRun(token(second), "r", { status: "completed", output: 1 });
          await j.releaseLease("r", token(second));
          expect(await j.acquireLease("r", "c", 10_000)).toMatchObject({ acquired: true, status: "completed" });
        } finally {
          await destroy();
        }
      });

      it("runDurable: a run that ended before the lease returns its outcome; a journal that does not tell is read", async () => {
        const { journal: j, destroy } = store.open();
        try {
          let calls = 0;
          const wf = async () => {
            calls++;
            return step("s", () => 7);
          };
          // the run completes between runDurable's first read and its lease: it is not run again
          await j.createRun({ runId: "ended", workflow: "wf", input: {} });
          let raced = false;
          const racing = new Proxy(j, {
            get(target, p, receiver) {
              if (p !== "acquireLease") return Reflect.get(target, p, receiver);
              return async (runId: string, owner: string, ttl: number) => {
                if (!raced) {
                  raced = true;
                  const other = token(await target.acquireLease(runId, "other", 10_000));
                  await target.updateRun(other, runId, { status: "completed", output: "theirs" });
                  await target.releaseLease(runId, other);
                }
                return target.acquireLease(runId, owner, ttl);
              };
            },
          }) as Journal;
          expect(await runDurable("ended", wf, { journal: racing, input: {} })).toEqual({
            runId: "ended",
            status: "completed",
            output: "theirs",
          });
          expect(calls).toBe(0);
          // a journal whose lease carries no status: the run is read, and runs
          const silent = new Proxy(j, {
            get(target, p, receiver) {
              if (p !== "acquireLease") return Reflect.get(target, p, receiver);
              return async (runId: string, owner: string, ttl: number) => {
                const { status: _status, ...lease } = (await target.acquireLease(runId, owner, ttl)) as LeaseResult & {
                  status?: string;
                };
                return lease;
              };
            },
          }) as Journal;
          expect(await runDurable("plain", wf, { journal: silent, input: {} })).toMatchObject({
            status: "completed",
            output: 7,
          });
          expect(calls).toBe(1);
        } finally {
          await destroy();
        }
      });
    },
  );
}
