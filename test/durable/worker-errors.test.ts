/**
 * A worker reports what it retries (issue 25 item 6: under PostgreSQL terminations a worker retried
 * 82 storage errors through BullMQ without any reaching its output, a callback or the journal's
 * events). Every error a job meets reaches `onError` with its code and attempt, and the run's events
 * as `run_error`; the run then completes on a later attempt, each step once. A real SQLite journal
 * whose step writes fail twice (the database's own error, as a terminated connection gives), a real
 * BullMQ worker on Redis.
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BackendError } from "../../src/core/errors.js";
import { step } from "../../src/durable/context.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { DurableQueue, DurableWorker, type DurableWorkerOptions } from "../../src/durable/worker.js";
import { renderNotes } from "../../src/ops/runs.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { tempDir } from "../workflow/helpers.js";

const skip = await redisSkipReason();
const tmp = tempDir("worker-errors");
afterAll(() => tmp.cleanup());

type ErrorEvent = Parameters<NonNullable<DurableWorkerOptions["onError"]>>[0];

describe.skipIf(skip)("a worker reports the storage errors it retries", () => {
  it("each failed attempt reaches onError (code, attempt, willRetry) and the run's events; the run completes once", async () => {
    const journal = new SqliteJournal({ path: path.join(tmp.dir, "runs.db") });
    const queueName = `werr-${randomUUID().slice(0, 8)}`;
    let failures = 2;
    const write = journal.writeStep.bind(journal);
    journal.writeStep = async (...args) => {
      if (failures > 0) {
        failures--;
        throw new BackendError("sqlite", "cannot write step: database is locked (injected)");
      }
      return write(...args);
    };
    let calls = 0;
    const seen: ErrorEvent[] = [];
    let done!: () => void;
    const finished = new Promise<void>((r) => {
      done = r;
    });
    const worker = new DurableWorker({
      journal,
      url: REDIS_URL,
      queueName,
      owner: "w1",
      workflows: {
        charge: async () => {
          const receipt = await step("charge", async () => {
            calls++;
            return "ch_1";
          });
          return { receipt };
        },
      },
      onError: (e) => seen.push(e),
      onResult: (r) => {
        if (r.status === "completed") done();
      },
    });
    const queue = new DurableQueue({ journal, url: REDIS_URL, queueName });
    try {
      await worker.start();
      await queue.enqueue({ runId: "r1", workflow: "charge", input: null });
      await finished;
      expect(seen.map(({ runId, code, attempt, willRetry }) => ({ runId, code, attempt, willRetry }))).toEqual([
        { runId: "r1", code: "BACKEND_ERROR", attempt: 1, willRetry: true },
        { runId: "r1", code: "BACKEND_ERROR", attempt: 2, willRetry: true },
      ]);
      expect(seen[0]!.error).toBeInstanceOf(BackendError);
      expect(await journal.getRun("r1")).toMatchObject({ status: "completed", output: { receipt: "ch_1" } });
      expect(calls).toBe(1); // a refused start record runs nothing
      const events = (await journal.readEvents("r1")).filter((e) => e.type === "run_error");
      expect(events.map((e) => e.attempt)).toEqual([1, 2]);
      expect(events[0]!.detail).toMatch(/^BACKEND_ERROR: .*database is locked/);
      // `dumplings runs r1` prints them among its notes.
      expect(renderNotes(events).join("\n")).toMatch(/worker error .*job attempt 1.*BACKEND_ERROR/);
    } finally {
      await worker.close();
      await queue.obliterate().catch(() => undefined);
      await queue.close();
      await journal.close();
    }
  }, 60_000);
});
