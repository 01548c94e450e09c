/**
 * `dumplings signal --queue` and `dumplings ui --queue` answering a workflow's interrupt (a new user's
 * trial: the answer was recorded and a BullMQ job enqueued that no DurableWorker can run, since a
 * graph's nodes live in its program). Now a workflow run is answered and never queued, and the line
 * printed says how it continues; a durable run is still queued. Real SQLite file, real Redis (BullMQ).
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import { Queue } from "bullmq";
import { afterAll, describe, expect, it } from "vitest";
import { waitForSignal } from "../../src/durable/context.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { sendDecision } from "../../src/ops/runs.js";
import {
  CheckpointStore,
  END,
  type GraphNode,
  ResumableGraphRunner,
  SqliteColdStore,
} from "../../src/workflow/index.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { tempDir } from "../workflow/helpers.js";

const tmp = tempDir("signal-queue");
const skip = await redisSkipReason();
const queueName = `wf-queue-${randomUUID().slice(0, 8)}`;
const queue = skip ? undefined : new Queue(queueName, { connection: { url: REDIS_URL } });
afterAll(async () => {
  await queue?.obliterate({ force: true }).catch(() => undefined);
  await queue?.close();
  tmp.cleanup();
});
const waitingJobs = async () => {
  const counts = await queue!.getJobCounts("wait", "delayed", "active", "prioritized");
  return Object.values(counts).reduce((a, b) => a + b, 0);
};

describe.skipIf(skip)("answering with a queue", () => {
  it("a waiting workflow is answered and not queued; a durable run waiting for a signal is queued", async () => {
    const file = path.join(tmp.dir, "wf.db");
    const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
    const journal = new SqliteJournal({ path: file });
    try {
      const ask: GraphNode = async (_s, ctx) => ({
        next: END,
        updates: { ok: await ctx.interrupt<boolean>({ reason: "ship?" }) },
      });
      const runner = new ResumableGraphRunner({ store, nodes: { ask } });
      const waiting = await runner.runOrResume("w1");
      const name = `interrupt:${waiting.interrupt!.id}`;
      const answered = await sendDecision(journal, "w1", name, true, queueName);
      expect(answered).toMatchObject({ wakes: true, queued: false });
      expect(await waitingJobs()).toBe(0);
      expect(await runner.runOrResume("w1")).toMatchObject({
        status: "finished",
        state: { sharedMemory: { ok: true } },
      });

      // The sibling: a durable run waiting for a signal is put back on the queue, as before.
      const run = await runDurable("r1", async () => waitForSignal<string>("go"), { journal, input: null });
      expect(run.status).toBe("waiting");
      expect(await sendDecision(journal, "r1", "go", "now", queueName)).toMatchObject({ wakes: true, queued: true });
      expect(await waitingJobs()).toBe(1);
    } finally {
      await journal.close();
      await store.close();
    }
  });
});
