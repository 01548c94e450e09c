/**
 * `writeStep(token, record, { sync: false })`, the write `step` uses for an
 * attempt's `started` record (and the unsynced `updateRun` to `running` and
 * `releaseLease`): the same checks and the same record as a synced write, kept by a crash of the writing process (SIGKILL right after it), and
 * no lasting change to the connection (SQLite's `synchronous`, PostgreSQL's
 * `synchronous_commit`). Also PostgreSQL's one-statement step write falling
 * back to its transaction when a writer of the previous release took the
 * event's index, and which records `step` writes unsynced.
 */
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { InvalidOptionError } from "../../src/core/errors.js";
import { step } from "../../src/durable/context.js";
import { JournalIntegrityError, StaleFencingTokenError } from "../../src/durable/errors.js";
import type { Journal, StepRecord, WriteStepOptions } from "../../src/durable/journal.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { RedisJournal } from "../../src/durable/journal-redis.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";

const dirs: string[] = [];
const tempDir = () => {
  const d = mkdtempSync(path.join(tmpdir(), "dumplings-unsynced-"));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const pgSkip = await postgresSkipReason();
const redisSkip = await redisSkipReason();

function rec(runId: string, seq: number, token: number, patch: Partial<StepRecord> = {}): StepRecord {
  return {
    runId,
    seq,
    name: `s${seq}`,
    inputHash: "h".repeat(64),
    status: "started",
    attempt: 1,
    startedAt: 1,
    fencingToken: token,
    ...patch,
  };
}

/** The same checks as a synced write: next seq only, no rename, no rewrite of a completed record, current token. */
async function unsyncedWritesAreChecked(j: Journal): Promise<void> {
  const id = `r-${randomUUID()}`;
  await j.createRun({ runId: id, workflow: "wf", input: null });
  const lease = await j.acquireLease(id, "a", 10_000);
  if (!lease.acquired) throw new Error("lease refused");
  const t = lease.fencingToken;
  const lazy: WriteStepOptions = { sync: false };
  await j.writeStep(t, rec(id, 0, t), lazy);
  await expect(j.writeStep(t, rec(id, 2, t), lazy)).rejects.toBeInstanceOf(JournalIntegrityError);
  await expect(j.writeStep(t, rec(id, 0, t, { name: "renamed" }), lazy)).rejects.toBeInstanceOf(JournalIntegrityError);
  await expect(j.writeStep(t + 1, rec(id, 0, t + 1), lazy)).rejects.toBeInstanceOf(StaleFencingTokenError);
  await j.writeStep(t, rec(id, 0, t, { status: "completed", output: { a: [1, "é"] }, finishedAt: 2 }));
  await expect(j.writeStep(t, rec(id, 0, t, { attempt: 2 }), lazy)).rejects.toBeInstanceOf(JournalIntegrityError);
  await j.writeStep(t, rec(id, 1, t, { error: { name: "Error", message: "first try" } }), lazy);
  await expect(j.writeStep(t, rec(id, 2, t), { sync: false, fsync: false } as never)).rejects.toBeInstanceOf(
    InvalidOptionError,
  );
  const steps = await j.readSteps(id);
  expect(steps.map((s) => [s.seq, s.status, s.output, s.error?.message])).toEqual([
    [0, "completed", { a: [1, "é"] }, undefined],
    [1, "started", undefined, "first try"],
  ]);
  // the other writes a store may leave unsynced: the status `running`, and the release of a lease
  await j.updateRun(t, id, { status: "running" });
  await j.releaseLease(id, t);
  const run = await j.getRun(id);
  expect([run?.status, run?.leaseOwner, run?.leaseExpiresAt]).toEqual(["running", undefined, undefined]);
  expect((await j.readEvents(id)).map((e) => e.type)).toEqual([
    "run_created",
    "lease_acquired",
    "step_started",
    "step_completed",
    "step_started",
    "run_running",
  ]);
}

describe("SqliteJournal: unsynced step writes", () => {
  it("are checked and stored as synced ones; the connection is back to synchronous = FULL after each", async () => {
    const j = new SqliteJournal({ path: path.join(tempDir(), "j.db") });
    try {
      await unsyncedWritesAreChecked(j);
      expect(j.db.pragma("synchronous", { simple: true })).toBe(2);
    } finally {
      await j.close();
    }
  });

  it("a record written unsynced survives a SIGKILL of its process right after the write", () => {
    const dir = tempDir();
    const file = path.join(dir, "j.db");
    const script = path.join(dir, "child.mts");
    const src = (m: string) => JSON.stringify(path.resolve(import.meta.dirname, "../../src/durable", m));
    writeFileSync(
      script,
      `import { SqliteJournal } from ${src("journal-sqlite.ts")};
const j = new SqliteJournal({ path: ${JSON.stringify(file)} });
await j.createRun({ runId: "r", workflow: "wf", input: null });
const l = await j.acquireLease("r", "a", 60000);
const base = { runId: "r", seq: 0, name: "tool:pay", inputHash: "h", attempt: 1, startedAt: 1, fencingToken: l.fencingToken };
await j.writeStep(l.fencingToken, { ...base, status: "completed", output: 1, finishedAt: 2 });
await j.writeStep(l.fencingToken, { ...base, seq: 1, status: "started" }, { sync: false });
process.kill(process.pid, "SIGKILL");
`,
    );
    const child = spawnSync(process.execPath, ["--import", "tsx", script], { encoding: "utf8" });
    expect(child.signal, child.stderr).toBe("SIGKILL");
    const j = new SqliteJournal({ path: file });
    return j
      .readSteps("r")
      .then((steps) =>
        expect(steps.map((s) => [s.seq, s.status])).toEqual([
          [0, "completed"],
          [1, "started"],
        ]),
      )
      .finally(() => j.close());
  });

  it("step writes an attempt's started record unsynced, synced when the body must never start twice", async () => {
    const inner = new SqliteJournal({ path: path.join(tempDir(), "j.db") });
    const writes: [string, string, boolean][] = [];
    const journal = new Proxy(inner, {
      get(target, p, receiver) {
        if (p !== "writeStep") return Reflect.get(target, p, receiver);
        return (token: number, record: StepRecord, options?: WriteStepOptions) => {
          writes.push([record.name, record.status, options?.sync !== false]);
          return target.writeStep(token, record, options);
        };
      },
    });
    try {
      const r = await runDurable(
        "r",
        async () => {
          await step("a", () => 1);
          await step("b", () => 2, { retry: { maxStartedAttempts: 1 } });
          return null;
        },
        { journal, input: null },
      );
      expect(r.status).toBe("completed");
      expect(writes).toEqual([
        ["a", "started", false],
        ["a", "completed", true],
        ["b", "started", true],
        ["b", "completed", true],
      ]);
    } finally {
      await inner.close();
    }
  });
});

describe.skipIf(!!pgSkip)(`PostgresJournal: one-statement writes${pgSkip ? ` (skipped: ${pgSkip})` : ""}`, () => {
  const schema = `unsynced_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
  afterAll(async () => {
    const j = new PostgresJournal({ url: DATABASE_URL, schema });
    await j.dropSchema();
    await j.close();
  });

  it("unsynced writes are checked and stored as synced ones; no connection keeps synchronous_commit off", async () => {
    const j = new PostgresJournal({ url: DATABASE_URL, schema, maxConnections: 1 });
    try {
      await unsyncedWritesAreChecked(j);
      const { rows } = await j.pool.query("SHOW synchronous_commit");
      expect(rows[0]?.synchronous_commit).toBe("on");
    } finally {
      await j.close();
    }
  });

  it("keeps numbering events when a writer of the previous release took the index of a step's, a status's, a lease's or a suspension's event", async () => {
    const j = new PostgresJournal({ url: DATABASE_URL, schema });
    try {
      await j.createRun({ runId: "legacy", workflow: "wf", input: null });
      const l = await j.acquireLease("legacy", "a", 10_000);
      if (!l.acquired) throw new Error("lease refused");
      // the old release numbers an event by counting the run's events, and leaves event_count alone
      const oldWriter = () =>
        j.pool.query(
          `INSERT INTO "${schema}".durable_events (run_id, idx, type, at)
           SELECT 'legacy', COALESCE(MAX(idx) + 1, 0), 'signal_received', 1 FROM "${schema}".durable_events WHERE run_id = 'legacy'`,
        );
      await oldWriter();
      await j.writeStep(l.fencingToken, rec("legacy", 0, l.fencingToken), { sync: false });
      await j.writeStep(l.fencingToken, rec("legacy", 0, l.fencingToken, { status: "completed", output: 1 }));
      await oldWriter();
      await j.updateRun(l.fencingToken, "legacy", { status: "running" });
      await oldWriter();
      const again = await j.acquireLease("legacy", "a", 10_000);
      if (!again.acquired) throw new Error("lease refused");
      await oldWriter();
      expect(await j.updateRun(again.fencingToken, "legacy", { status: "waiting", waitingFor: "go" })).toEqual({
        ok: true,
      });
      const events = await j.readEvents("legacy");
      expect(events.map((e) => [e.index, e.type])).toEqual([
        [0, "run_created"],
        [1, "lease_acquired"],
        [2, "signal_received"],
        [3, "step_started"],
        [4, "step_completed"],
        [5, "signal_received"],
        [6, "run_running"],
        [7, "signal_received"],
        [8, "lease_acquired"],
        [9, "signal_received"],
        [10, "run_waiting"],
      ]);
      expect(again.fencingToken).toBe(l.fencingToken + 1);
      expect(await j.getRun("legacy")).toMatchObject({ status: "waiting", waitingFor: "go" });
      expect((await j.readSteps("legacy")).map((s) => [s.status, s.output])).toEqual([["completed", 1]]);
    } finally {
      await j.close();
    }
  });
});

describe.skipIf(!!redisSkip)(`RedisJournal: unsynced step writes${redisSkip ? ` (skipped: ${redisSkip})` : ""}`, () => {
  it("are checked and stored as synced ones", async () => {
    const j = new RedisJournal({ url: REDIS_URL, keyPrefix: `unsynced:${randomUUID()}:` });
    try {
      await unsyncedWritesAreChecked(j);
    } finally {
      await j.clear();
      await j.close();
    }
  });
});
