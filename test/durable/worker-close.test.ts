/**
 * A worker that shuts down cleanly: a worker process gets SIGTERM mid-step and its handler calls
 * `close({ timeoutMs })`. Within the timeout, the step finishes and is recorded, no other step starts,
 * and the job goes back to the queue at once (its lease released): a second worker process finishes
 * the run, each effect happening once. A step that outlasts the timeout is abandoned: the process exits
 * within the timeout plus a margin, and the next worker runs the step's body again (its `started`
 * record counts the interrupted attempt); its recorded result, and the effect it acknowledges, are once.
 * And `health()`, the readiness probe, before start, while running, while closing, after close, and
 * with Redis stopped.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { InvalidOptionError } from "../../src/core/errors.js";
import { step } from "../../src/durable/context.js";
import { RedisJournal } from "../../src/durable/journal-redis.js";
import { DurableQueue, DurableWorker } from "../../src/durable/worker.js";
import { type ChildResult, fixture, startChild } from "../fixtures/durable/spawn.js";
import { redisServerBinary, startRedis } from "../helpers/redis-server.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const skip = await redisSkipReason();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(!!skip)(`DurableWorker.close({ timeoutMs }) on SIGTERM${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const id = randomUUID().slice(0, 8);
  const queueName = `dq-close-${id}`;
  const journalPrefix = `test:dwc:${id}:`;
  const dir = mkdtempSync(join(tmpdir(), "dumplings-close-"));
  let journal: RedisJournal;
  let queue: DurableQueue;
  const children: { child: ReturnType<typeof startChild>["child"]; done: Promise<ChildResult> }[] = [];

  const spawnWorker = async (owner: string, file: string, stepMs: number, timeoutMs: number) => {
    const w = startChild(fixture("worker-close-child.ts"), {
      REDIS_URL,
      QUEUE: queueName,
      JOURNAL_PREFIX: journalPrefix,
      EFFECTS_FILE: file,
      OWNER: owner,
      STEP_MS: String(stepMs),
      TIMEOUT_MS: String(timeoutMs),
    });
    children.push(w);
    await new Promise((r) => w.child.stdout?.once("data", r));
    return w;
  };
  const lines = (file: string) => {
    try {
      return readFileSync(file, "utf8").trim().split("\n").filter(Boolean);
    } catch {
      return [];
    }
  };
  const waitFor = async (what: string, ok: () => boolean | Promise<boolean>, ms = 15_000) => {
    const end = Date.now() + ms;
    while (!(await ok())) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await sleep(20);
    }
  };

  beforeAll(() => {
    journal = new RedisJournal({ url: REDIS_URL, prefix: journalPrefix });
    queue = new DurableQueue({ journal, queueName, url: REDIS_URL });
  });

  afterAll(async () => {
    for (const w of children) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill("SIGKILL");
    await Promise.all(children.map((w) => w.done));
    await queue?.obliterate().catch(() => undefined);
    await queue?.close();
    await journal?.clear();
    await journal?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("SIGTERM mid-step: the step finishes and records, the job is handed back, a second worker finishes the run; each effect once", async () => {
    const file = join(dir, "within.log");
    const w1 = await spawnWorker("w1", file, 800, 10_000);
    await queue.enqueue({ runId: "within", workflow: "effects", input: {} });
    await waitFor("step a to start", () => lines(file).includes("a-start w1"));
    w1.child.kill("SIGTERM");
    const r1 = await w1.done;
    expect(r1.code, r1.stderr).toBe(0);
    // the step in progress finished and was recorded; no other step started on the closing worker
    expect(lines(file)).toEqual(["a-start w1", "a-effect w1"]);
    expect((await journal.readSteps("within")).map((s) => [s.name, s.status])).toEqual([["a", "completed"]]);
    const run = await journal.getRun("within");
    expect(run?.status).not.toBe("completed");
    // the job is back in the queue (not failed, not completed), and the lease is free
    const counts = await queue.jobCounts();
    expect(counts.failed).toBe(0);
    expect(counts.completed).toBe(0);
    expect((counts.waiting ?? 0) + (counts.delayed ?? 0)).toBe(1);
    expect(run?.leaseOwner ?? null).toBeNull();

    // a second worker takes it at once (not after the 30 s job lock or lease expiry) and finishes it
    const t0 = Date.now();
    const w2 = await spawnWorker("w2", file, 800, 10_000);
    await waitFor("the run to complete", async () => (await journal.getRun("within"))?.status === "completed");
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(await journal.getRun("within")).toMatchObject({ status: "completed", output: { sum: 3 } });
    expect(lines(file)).toEqual(["a-start w1", "a-effect w1", "b w2"]);
    w2.child.kill("SIGTERM");
    expect((await w2.done).code).toBe(0);
  }, 40_000);

  it("a step that outlasts timeoutMs: the worker exits within it, the next worker runs the step again and completes the run; the effect is acknowledged once", async () => {
    const file = join(dir, "outlasts.log");
    const w1 = await spawnWorker("w1", file, 60_000, 500);
    await queue.enqueue({ runId: "outlasts", workflow: "effects", input: {} });
    await waitFor("step a to start", () => lines(file).includes("a-start w1"));
    const t0 = Date.now();
    w1.child.kill("SIGTERM");
    const r1 = await w1.done;
    const exitedInMs = Date.now() - t0;
    expect(r1.code, r1.stderr).toBe(0);
    expect(Number(r1.json?.closedInMs)).toBeLessThan(500 + 1500);
    expect(exitedInMs).toBeLessThan(500 + 3000);
    // the body was abandoned mid-way: its start is recorded, nothing else
    expect(lines(file)).toEqual(["a-start w1"]);
    expect((await journal.readSteps("outlasts")).map((s) => [s.name, s.status, s.attempt])).toEqual([
      ["a", "started", 1],
    ]);
    expect((await queue.jobCounts()).failed).toBe(0);

    const w2 = await spawnWorker("w2", file, 50, 10_000);
    await waitFor("the run to complete", async () => (await journal.getRun("outlasts"))?.status === "completed");
    expect(await journal.getRun("outlasts")).toMatchObject({ status: "completed", output: { sum: 3 } });
    // started twice (at-least-once body), acknowledged once, recorded once as attempt 2
    expect(lines(file)).toEqual(["a-start w1", "a-start w2", "a-effect w2", "b w2"]);
    expect((await journal.readSteps("outlasts")).map((s) => [s.name, s.status, s.attempt])).toEqual([
      ["a", "completed", 2],
      ["b", "completed", 1],
    ]);
    w2.child.kill("SIGTERM");
    expect((await w2.done).code).toBe(0);
  }, 40_000);
});

describe.skipIf(!!skip)(`DurableWorker.health()${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const id = randomUUID().slice(0, 8);
  const journal = new RedisJournal({ url: REDIS_URL, prefix: `test:dwh:${id}:` });
  const open: DurableWorker[] = [];
  afterEach(async () => {
    for (const w of open.splice(0)) await w.close({ timeoutMs: 0 }).catch(() => undefined);
  });
  afterAll(async () => {
    await journal.clear();
    await journal.close();
  });

  it("before start, while running, while closing, after close", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let entered!: () => void;
    const inStep = new Promise<void>((r) => {
      entered = r;
    });
    const worker = new DurableWorker({
      journal,
      url: REDIS_URL,
      queueName: `dq-health-${id}`,
      workflows: {
        gated: async () => {
          await step("wait", async () => {
            entered();
            await gate;
            return 1;
          });
          return step("after", () => 2);
        },
      },
    });
    open.push(worker);
    expect(await worker.health()).toEqual({ ready: false, running: 0, closing: false, redis: "ok", journal: "ok" });
    await worker.start();
    expect(await worker.health()).toEqual({ ready: true, running: 0, closing: false, redis: "ok", journal: "ok" });
    await worker.enqueue({ runId: "h1", workflow: "gated", input: {} });
    await inStep;
    expect(await worker.health()).toEqual({ ready: true, running: 1, closing: false, redis: "ok", journal: "ok" });
    const closed = worker.close({ timeoutMs: 10_000 });
    expect(await worker.health()).toEqual({ ready: false, running: 1, closing: true, redis: "ok", journal: "ok" });
    release();
    await closed;
    expect(await worker.health()).toEqual({ ready: false, running: 0, closing: true, redis: "down", journal: "ok" });
    // the step finished within the timeout and was recorded, the next one never started; the run waits in
    // the queue for a worker
    expect((await journal.readSteps("h1")).map((s) => s.status)).toEqual(["completed"]);
    expect((await journal.getRun("h1"))?.status).not.toBe("completed");
  });

  it("refuses a bad timeoutMs or an unknown option", async () => {
    const worker = new DurableWorker({ journal, url: REDIS_URL, queueName: `dq-health-${id}-b`, workflows: {} });
    open.push(worker);
    await expect(worker.close({ timeoutMs: -1 })).rejects.toBeInstanceOf(InvalidOptionError);
    await expect(worker.close({ timeoutMs: Number.NaN })).rejects.toBeInstanceOf(InvalidOptionError);
    await expect(worker.close({ timeout: 5 } as never)).rejects.toBeInstanceOf(InvalidOptionError);
  });

  it.skipIf(!redisServerBinary())(
    "with its Redis stopped: not ready, redis down, within the command timeout",
    async () => {
      const server = await startRedis();
      try {
        const worker = new DurableWorker({
          journal,
          url: server.url,
          queueName: `dq-health-${id}-c`,
          connectTimeoutMs: 500,
          commandTimeoutMs: 500,
          workflows: {},
        });
        open.push(worker);
        await worker.start();
        expect((await worker.health()).ready).toBe(true);
        await server.kill();
        const t0 = Date.now();
        expect(await worker.health()).toEqual({
          ready: false,
          running: 0,
          closing: false,
          redis: "down",
          journal: "ok",
        });
        expect(Date.now() - t0).toBeLessThan(2000);
      } finally {
        await server.kill();
      }
    },
  );
});
