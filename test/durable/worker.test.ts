/**
 * Distributed workers on BullMQ with real processes and real Redis: three
 * worker processes take 60 runs; one is SIGKILLed mid-way. Every run completes
 * exactly once, no journal has a gap or a duplicate seq, step bodies ran only
 * after their "started" record, and a write with the dead worker's fencing
 * token is refused. Runs waiting for a signal hold no worker and are
 * re-enqueued by the signal; durable timers are re-enqueued with a delay.
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RunInputMismatchError, RunNotFoundError, StaleFencingTokenError } from "../../src/durable/errors.js";
import type { StepRecord } from "../../src/durable/journal.js";
import { RedisJournal } from "../../src/durable/journal-redis.js";
import { DurableQueue } from "../../src/durable/worker.js";
import { type ChildResult, fixture, startChild } from "../fixtures/durable/spawn.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const skip = await redisSkipReason();
const RUNS = 60;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(!!skip)(`DurableWorker on BullMQ${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const id = randomUUID().slice(0, 8);
  const queueName = `dq-${id}`;
  const journalPrefix = `test:dw:${id}:`;
  const effectsKey = `test:dw:${id}:effects`;
  let journal: RedisJournal;
  let queue: DurableQueue;
  let redis: Redis;
  const workers: { child: ReturnType<typeof startChild>["child"]; done: Promise<ChildResult>; owner: string }[] = [];

  beforeAll(async () => {
    redis = new Redis(REDIS_URL);
    journal = new RedisJournal({ url: REDIS_URL, prefix: journalPrefix });
    queue = new DurableQueue({ journal, queueName, redisUrl: REDIS_URL });
    for (const owner of ["w1", "w2", "w3"]) {
      const w = startChild(fixture("worker-child.ts"), {
        REDIS_URL,
        QUEUE: queueName,
        JOURNAL_PREFIX: journalPrefix,
        EFFECTS_KEY: effectsKey,
        OWNER: owner,
        CONCURRENCY: "2",
      });
      workers.push({ ...w, owner });
    }
    await Promise.all(workers.map(({ child }) => new Promise((r) => child.stdout?.once("data", r))));
  });

  afterAll(async () => {
    for (const w of workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill("SIGTERM");
    await Promise.all(workers.map((w) => w.done));
    await queue?.obliterate().catch(() => undefined);
    await queue?.close();
    await journal?.clear();
    await journal?.close();
    await redis?.del(effectsKey);
    redis?.disconnect();
  });

  it("60 runs on three workers, one SIGKILLed mid-way: each run completes exactly once with a gapless journal", async () => {
    const ids = Array.from({ length: RUNS }, (_, i) => `tiny-${i}`);
    for (const runId of ids) {
      expect(await queue.enqueue({ runId, workflow: "tiny", input: { runId } })).toEqual({
        created: true,
        outcome: "created",
      });
    }
    // Run identity: the same request again is "existing"; another input under the same id is refused;
    // a mistyped id without input creates nothing.
    expect(await queue.enqueue({ runId: ids[0]!, workflow: "tiny", input: { runId: ids[0]! } })).toMatchObject({
      outcome: "existing",
    });
    await expect(queue.enqueue({ runId: ids[0]!, workflow: "tiny", input: { other: 1 } })).rejects.toBeInstanceOf(
      RunInputMismatchError,
    );
    await expect(queue.enqueue({ runId: "tiny-typo", workflow: "tiny" })).rejects.toBeInstanceOf(RunNotFoundError);
    expect(await journal.getRun("tiny-typo")).toBeUndefined();

    // kill w1 while it holds a run, after some runs are done
    // a run w1 holds with at least two of its four 40 ms steps still to go, so the kill lands mid-run
    // (a run caught in its last step could complete between this check and the kill: nothing to take over)
    let victim: string | undefined;
    for (let i = 0; i < 600 && !victim; i++) {
      const done = (await journal.listRuns({ status: "completed" })).length;
      for (const held of (await journal.listRuns({ status: "running" })).filter((r) => r.leaseOwner === "w1")) {
        if (done >= 8 && (await journal.readSteps(held.runId)).length <= 2) {
          victim = held.runId;
          break;
        }
      }
      if (!victim) await sleep(5);
    }
    expect(victim, "w1 never held a run").toBeDefined();
    workers[0]?.child.kill("SIGKILL");
    expect((await workers[0]?.done)?.signal).toBe("SIGKILL");

    for (let i = 0; i < 600; i++) {
      if ((await journal.listRuns({ status: "completed" })).length >= RUNS) break;
      await sleep(100);
    }
    const effects = await redis.hgetall(effectsKey);
    let takenOver = 0;
    for (const runId of ids) {
      const run = await journal.getRun(runId);
      expect(run, runId).toMatchObject({ status: "completed", output: { sum: 60 } });
      const steps = await journal.readSteps(runId);
      expect(steps.map((s) => s.seq)).toEqual([0, 1, 2, 3]);
      expect(steps.every((s) => s.status === "completed")).toBe(true);
      const events = await journal.readEvents(runId);
      expect(events.filter((e) => e.type === "run_completed")).toHaveLength(1);
      for (let seq = 0; seq < 4; seq++) {
        expect(events.filter((e) => e.type === "step_completed" && e.seq === seq)).toHaveLength(1);
        const started = events.filter((e) => e.type === "step_started" && e.seq === seq).length;
        const ran = Number(effects[`${runId}:${seq}`] ?? 0);
        expect(ran).toBeGreaterThanOrEqual(1);
        expect(ran).toBeLessThanOrEqual(started); // a body runs only after its "started" record
      }
      const owners = events.filter((e) => e.type === "lease_acquired").map((e) => e.name);
      if (owners.includes("w1") && owners.at(-1) !== "w1") takenOver++;
    }
    expect(takenOver).toBeGreaterThanOrEqual(1);
    const executions = Object.values(effects).reduce((a, b) => a + Number(b), 0);
    console.info(
      `[durable workers] ${RUNS} runs completed once each; ${takenOver} taken over from the killed worker; ` +
        `${executions} step-body executions for ${RUNS * 4} completed steps`,
    );

    // the dead worker's token is stale: its write is refused and nothing changes
    const events = await journal.readEvents(String(victim));
    const w1Token = events.find((e) => e.type === "lease_acquired" && e.name === "w1")?.fencingToken;
    const current = (await journal.getRun(String(victim)))?.fencingToken ?? 0;
    expect(w1Token).toBeLessThan(current);
    const before = await journal.readSteps(String(victim));
    await expect(
      journal.writeStep(Number(w1Token), {
        ...(before[3] as StepRecord),
        status: "failed",
        error: { name: "Zombie", message: "late" },
      }),
    ).rejects.toBeInstanceOf(StaleFencingTokenError);
    await expect(journal.updateRun(Number(w1Token), String(victim), { status: "failed" })).rejects.toBeInstanceOf(
      StaleFencingTokenError,
    );
    expect(await journal.readSteps(String(victim))).toEqual(before);
  });

  it("runs waiting for a signal hold no worker; the signal re-enqueues them; timers come back after their delay", async () => {
    const gated = ["gated-0", "gated-1", "gated-2"];
    for (const runId of gated) await queue.enqueue({ runId, workflow: "gated", input: null });
    await queue.enqueue({ runId: "timer-0", workflow: "timer", input: null });
    for (let i = 0; i < 300; i++) {
      const waiting = await journal.listRuns({ status: "waiting" });
      if (gated.every((g) => waiting.some((r) => r.runId === g && r.waitingFor === "go"))) break;
      await sleep(50);
    }
    // their jobs finish: no worker is held while they wait (the timer run may come and go meanwhile)
    let active = -1;
    for (let i = 0; i < 300 && active !== 0; i++) {
      active = (await queue.jobCounts()).active ?? -1;
      if (active !== 0) await sleep(20);
    }
    expect(active).toBe(0);
    for (const runId of gated) expect((await journal.getRun(runId))?.status).toBe("waiting");
    for (const [i, runId] of gated.entries()) {
      const sent = await queue.signal(runId, "go", { n: i });
      expect(sent.wakes).toBe(true);
    }
    for (let i = 0; i < 300; i++) {
      const runs = await Promise.all([...gated, "timer-0"].map((r) => journal.getRun(r)));
      if (runs.every((r) => r?.status === "completed")) break;
      await sleep(50);
    }
    for (const [i, runId] of gated.entries()) {
      expect(await journal.getRun(runId)).toMatchObject({ status: "completed", output: i + 1 });
    }
    expect(await journal.getRun("timer-0")).toMatchObject({ status: "completed", output: "rested" });
    // a signal to a finished run is refused (it would be recorded and never taken), and wakes nothing
    await expect(queue.signal("gated-0", "late", 1)).rejects.toMatchObject({ code: "RUN_STATE", action: "signal" });
    expect(await journal.getSignal("gated-0", "late")).toBeUndefined();
  });
});
