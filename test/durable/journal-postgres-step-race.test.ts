/**
 * Two writers of one run with the same fencing token (an unfenced workflow save, two stores of one
 * schema) write the same step at once on PostgreSQL: exactly one record is written, the other
 * writer gets `JournalIntegrityError` and the stored record is the winner's. Before the fix the
 * second write's checks read a snapshot taken before the first committed, and its `ON CONFLICT …
 * DO UPDATE` replaced the completed record: both writes "succeeded" and the first was lost.
 */
import { createHash, randomUUID } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { JournalIntegrityError } from "../../src/durable/errors.js";
import { hashInput, type StepRecord } from "../../src/durable/journal.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const skip = await postgresSkipReason();

describe.skipIf(skip)("PostgreSQL journal: racing writers of one step and one token", () => {
  const schema = `dj_race_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
  // Two journals, two pools: as two processes.
  const a = new PostgresJournal({ url: DATABASE_URL, schema });
  const b = new PostgresJournal({ url: DATABASE_URL, schema });
  afterAll(async () => {
    await a.dropSchema();
    await a.close();
    await b.close();
  });

  for (const blobs of [false, true]) {
    it(`one completed record wins, the other writer is refused${blobs ? " (writes with blobs: the transaction)" : " (the one-statement write)"}`, async () => {
      let refused = 0;
      for (let i = 0; i < 30; i++) {
        const runId = `r-${blobs}-${i}`;
        const { run } = await a.createRun({ runId, workflow: "w", input: null });
        await b.getRun(runId); // both set up before the race
        const record = (output: string): StepRecord => ({
          runId,
          seq: 0,
          name: "checkpoint:0:a",
          inputHash: hashInput(null),
          status: "completed",
          output,
          attempt: 1,
          startedAt: 1,
          finishedAt: 1,
          fencingToken: run.fencingToken,
        });
        const options = (who: string) => {
          if (!blobs) return {};
          const bytes = new TextEncoder().encode(`${who}-${i}`);
          const ref = createHash("sha256").update(bytes).digest("hex");
          return { blobs: new Map([[ref, bytes]]), blobRefs: [ref] };
        };
        const results = await Promise.allSettled([
          a.writeStep(run.fencingToken, record("A"), options("a")),
          b.writeStep(run.fencingToken, record("B"), options("b")),
        ]);
        const won = results.findIndex((r) => r.status === "fulfilled");
        expect(
          results.filter((r) => r.status === "fulfilled"),
          `run ${runId}`,
        ).toHaveLength(1);
        const lost = results[1 - won] as PromiseRejectedResult;
        expect(lost.reason).toBeInstanceOf(JournalIntegrityError);
        const steps = await a.readSteps(runId);
        expect(steps.map((s) => s.output)).toEqual([won === 0 ? "A" : "B"]);
        const events = (await a.readEvents(runId)).filter((e) => e.type === "step_completed");
        expect(events).toHaveLength(1);
        refused++;
      }
      expect(refused).toBe(30);
    }, 60_000);
  }
});
