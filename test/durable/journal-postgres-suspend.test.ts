/**
 * PostgresJournal's suspension on a signal (`updateRun` to `waiting` with
 * `waitingFor`): one transaction of two statements, the run's row locked by
 * the first, so the second sees every signal committed before the lock.
 * Raced against `sendSignal` from other connections, a wake-up is never lost:
 * either the suspension hands the signal back, or the sender finds the run
 * waiting for it (and wakes it).
 */
import { randomUUID } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { RunNotFoundError, StaleFencingTokenError } from "../../src/durable/errors.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const pgSkip = await postgresSkipReason();
const schema = `djs_${randomUUID().replaceAll("-", "").slice(0, 16)}`;

describe.skipIf(!!pgSkip)(`PostgresJournal: suspension on a signal${pgSkip ? ` (skipped: ${pgSkip})` : ""}`, () => {
  const waiter = new PostgresJournal({ url: DATABASE_URL, schema, maxConnections: 2 });
  const sender = new PostgresJournal({ url: DATABASE_URL, schema, maxConnections: 2 });
  afterAll(async () => {
    await waiter.dropSchema();
    await waiter.close();
    await sender.close();
  });

  it("raced with the signal from another connection, never loses the wake-up", async () => {
    let handedBack = 0;
    let woken = 0;
    for (let i = 0; i < 60; i++) {
      const id = `race-${i}-${randomUUID()}`;
      await waiter.createRun({ runId: id, workflow: "wf", input: null });
      const lease = await waiter.acquireLease(id, "w", 30_000);
      if (!lease.acquired) throw new Error("lease refused");
      const [suspended, sent] = await Promise.all([
        waiter.updateRun(lease.fencingToken, id, { status: "waiting", waitingFor: "go" }),
        sender.sendSignal(id, "go", { i }),
      ]);
      if (suspended.ok) {
        // suspended: the signal came after, and its sender saw the run waiting for it
        expect(sent).toMatchObject({ status: "waiting", waitingFor: "go" });
        woken++;
      } else {
        expect(suspended.signal).toMatchObject({ runId: id, name: "go", value: { i } });
        expect(typeof suspended.signal.sentAt).toBe("number");
        expect((await waiter.getRun(id))?.status).not.toBe("waiting");
        handedBack++;
      }
      const events = (await waiter.readEvents(id)).map((e) => e.type);
      expect(events.filter((t) => t === "run_waiting")).toHaveLength(suspended.ok ? 1 : 0);
      expect(events.map((_, k) => k)).toEqual((await waiter.readEvents(id)).map((e) => e.index));
    }
    expect(handedBack + woken).toBe(60);
  });

  it("refuses a stale token and an unknown run, changing nothing", async () => {
    const id = `stale-${randomUUID()}`;
    await waiter.createRun({ runId: id, workflow: "wf", input: null });
    const lease = await waiter.acquireLease(id, "w", 30_000);
    if (!lease.acquired) throw new Error("lease refused");
    await expect(
      waiter.updateRun(lease.fencingToken + 1, id, { status: "waiting", waitingFor: "go" }),
    ).rejects.toBeInstanceOf(StaleFencingTokenError);
    await expect(waiter.updateRun(1, `${id}-none`, { status: "waiting", waitingFor: "go" })).rejects.toBeInstanceOf(
      RunNotFoundError,
    );
    expect((await waiter.getRun(id))?.status).toBe("pending");
    expect((await waiter.readEvents(id)).map((e) => e.type)).toEqual(["run_created", "lease_acquired"]);
  });
});
