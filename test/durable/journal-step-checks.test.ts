/**
 * The SQL journal's step-write checks (`SqlJournal.writeStep`), read in one
 * statement: the run's token and the records at `seq - 1` and `seq`. Seqs
 * have no gaps, so these two tell the next position from an existing one; a
 * gap reads the count for its message. On SQLite (its only path) and on
 * PostgreSQL (the transaction its one-statement write falls back to).
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { JournalIntegrityError, RunNotFoundError, StaleFencingTokenError } from "../../src/durable/errors.js";
import type { Journal, StepRecord } from "../../src/durable/journal.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { SqlJournal } from "../../src/durable/journal-sql.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const pgSkip = await postgresSkipReason();
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-step-checks-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const rec = (runId: string, seq: number, token: number, patch: Partial<StepRecord> = {}): StepRecord => ({
  runId,
  seq,
  name: `s${seq}`,
  inputHash: "h".repeat(64),
  status: "started",
  attempt: 1,
  startedAt: 1,
  fencingToken: token,
  ...patch,
});

/** `write` is the SQL journal's own writeStep (PostgresJournal's override bypassed) unless `own` is set. */
async function checks(j: Journal, own = false): Promise<void> {
  const write = (token: number, record: StepRecord) =>
    own ? j.writeStep(token, record) : SqlJournal.prototype.writeStep.call(j, token, record);
  const id = `r-${randomUUID()}`;
  await j.createRun({ runId: id, workflow: "wf", input: null });
  const lease = await j.acquireLease(id, "a", 10_000);
  if (!lease.acquired) throw new Error("lease refused");
  const t = lease.fencingToken;
  // parallel steps: #0 and #1 started, then #0 (not the last record) completed, then #1 failed, then #2
  await write(t, rec(id, 0, t));
  await write(t, rec(id, 1, t));
  await write(t, rec(id, 0, t, { status: "completed", output: { a: 1 }, finishedAt: 2 }));
  await write(t, rec(id, 1, t, { status: "failed", error: { name: "Error", message: "x" }, finishedAt: 2 }));
  await write(t, rec(id, 1, t, { attempt: 2 })); // a failed record is not completed: it may be rewritten
  await write(t, rec(id, 2, t));
  const gap = write(t, rec(id, 4, t));
  await expect(gap).rejects.toBeInstanceOf(JournalIntegrityError);
  await expect(gap).rejects.toThrow("the next one must be #3");
  for (const seq of [-1, 1.5]) {
    await expect(write(t, rec(id, seq, t))).rejects.toThrow("the next one must be #3");
  }
  await expect(write(t, rec(id, 0, t, { name: "renamed" }))).rejects.toThrow('with a step named "renamed"');
  await expect(write(t, rec(id, 0, t, { attempt: 2 }))).rejects.toThrow('step "s0" is already completed');
  await expect(write(t + 1, rec(id, 3, t + 1))).rejects.toBeInstanceOf(StaleFencingTokenError);
  await expect(write(t, rec(`${id}-none`, 0, t))).rejects.toBeInstanceOf(RunNotFoundError);
  // a refused write leaves nothing behind, its event number included: the next write's event follows on
  await write(t, rec(id, 3, t));
  const steps = await j.readSteps(id);
  expect(steps.map((s) => [s.seq, s.name, s.status, s.attempt])).toEqual([
    [0, "s0", "completed", 1],
    [1, "s1", "started", 2],
    [2, "s2", "started", 1],
    [3, "s3", "started", 1],
  ]);
  const events = await j.readEvents(id);
  expect(events.map((e) => e.index)).toEqual(events.map((_, i) => i));
  expect(events.filter((e) => e.type.startsWith("step_")).map((e) => [e.seq, e.type])).toEqual([
    [0, "step_started"],
    [1, "step_started"],
    [0, "step_completed"],
    [1, "step_failed"],
    [1, "step_started"],
    [2, "step_started"],
    [3, "step_started"],
  ]);
  // a fresh run: #0 is the next position, #1 a gap over an empty journal
  const fresh = `f-${randomUUID()}`;
  await j.createRun({ runId: fresh, workflow: "wf", input: null });
  const l2 = await j.acquireLease(fresh, "a", 10_000);
  if (!l2.acquired) throw new Error("lease refused");
  await expect(write(l2.fencingToken, rec(fresh, 1, l2.fencingToken))).rejects.toThrow("the next one must be #0");
  await write(l2.fencingToken, rec(fresh, 0, l2.fencingToken));
  expect((await j.readSteps(fresh)).map((s) => s.seq)).toEqual([0]);
}

describe("SQL journal step checks", () => {
  it("SQLite", async () => {
    const j = new SqliteJournal({ path: path.join(dir, "j.db") });
    try {
      await checks(j);
    } finally {
      await j.close();
    }
  });

  for (const own of [false, true]) {
    const label = own ? "its one-statement write" : "the transaction path";
    it.skipIf(!!pgSkip)(`PostgreSQL (${label})${pgSkip ? ` (skipped: ${pgSkip})` : ""}`, async () => {
      const j = new PostgresJournal({
        url: DATABASE_URL,
        schema: `dsc_${randomUUID().replaceAll("-", "").slice(0, 16)}`,
      });
      try {
        await checks(j, own);
      } finally {
        await j.dropSchema();
        await j.close();
      }
    });
  }
});
