/** The journal conformance suite on Redis (a unique key prefix per test, deleted afterwards). */
import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";
import * as vitest from "vitest";
import { RedisJournal } from "../../src/durable/journal-redis.js";
import { runJournalConformance } from "../../src/testing/index.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

runJournalConformance("redis", () => new RedisJournal({ url: REDIS_URL, prefix: `test:dj:${randomUUID()}:` }), {
  test: vitest,
  skip: await redisSkipReason(),
  destroy: async (journal) => {
    await journal.clear();
    await journal.close();
  },
});

vitest.describe.skipIf(await redisSkipReason())("RedisJournal: data of an earlier release", () => {
  vitest.it(
    "lists runs without the updated_at index (written before it existed) by creation, and reads steps without step_max",
    async () => {
      const journal = new RedisJournal({ url: REDIS_URL, keyPrefix: `test:dj:${randomUUID()}:` });
      try {
        const prefix = (journal as unknown as { prefix: string }).prefix;
        for (const id of ["a", "b", "c"]) await journal.createRun({ runId: id, workflow: "wf", input: null });
        await new Promise((r) => setTimeout(r, 5)); // b's lease changes it after the others were created
        const l = await journal.acquireLease("b", "w", 10_000);
        if (!l.acquired) throw new Error("lease");
        for (let seq = 0; seq < 3; seq++) {
          await journal.writeStep(l.fencingToken, {
            runId: "b",
            seq,
            name: `s${seq}`,
            inputHash: "h",
            status: "completed",
            attempt: 1,
            startedAt: 1,
            fencingToken: l.fencingToken,
          });
        }
        // as an earlier release left them: no updated_at index, no step_max field
        const client = journal.client as unknown as Redis; // the public type is the narrow client contract
        await client.del(`${prefix}runs:updated`);
        await client.hdel(`${prefix}{b}:run`, "step_max");
        // listed newest created first (the creation index every release kept), b's lease moves nothing
        const listed = await journal.listRuns();
        vitest.expect(listed.map((r) => r.runId)).toEqual(["c", "b", "a"]);
        const write = (seq: number) =>
          journal.writeStep(l.fencingToken, {
            runId: "b",
            seq,
            name: `s${seq}`,
            inputHash: "h",
            status: "started",
            attempt: 1,
            startedAt: 1,
            fencingToken: l.fencingToken,
          });
        await vitest.expect(write(4)).rejects.toThrow("the next one must be #3");
        await write(3);
        vitest.expect((await journal.readSteps("b", { last: 2 })).map((s) => s.seq)).toEqual([2, 3]);
      } finally {
        await journal.clear();
        await journal.close();
      }
    },
  );
});
