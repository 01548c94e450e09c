/**
 * Crash tests with real processes: a DurableAgent run SIGKILLed after its
 * k-th journal write resumes in a new process and ends with the same
 * messages, with exactly one model request per llm step and one tool body
 * execution per tool step; an approval wait survives the process exiting and
 * two racing processes signal it (exactly one wins); a changed prompt under a
 * paused run is drift (recorded results stand); a SIGSTOPped zombie's late write is refused.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { ModelMessage } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { type ModelServer, type RecordedRequest, startModelServer } from "../../src/testing/model-server.js";
import {
  FINAL_TEXT,
  makeFixtureAgent,
  modelHandler,
  requestsOf,
  userMessages,
} from "../fixtures/durable/agent-fixture.js";
import { type ChildResult, fixture, runChild, startChild } from "../fixtures/durable/spawn.js";

let dir: string;
let db: string;
let server: ModelServer;
let journal: SqliteJournal;
const requestHooks = new Set<(r: RecordedRequest) => void>();
const slowRuns = new Set<string>();
/** The run a request belongs to: the `[runId]` tag of its first user message. */
const tagOf = (r: RecordedRequest) => /\[([^\]"]+)\] please/.exec(JSON.stringify(r.body.messages))?.[1] ?? "";
let reference: { messages: ModelMessage[]; text: string; llmSteps: number };

const effects = (runId: string) => {
  const file = path.join(dir, `${runId}.effects`);
  return existsSync(file) ? readFileSync(file, "utf8").trim().split("\n").filter(Boolean) : [];
};
const childEnv = (runId: string, extra: Record<string, string> = {}) => ({
  DB: db,
  MODEL_URL: server.url,
  RUN_ID: runId,
  EFFECTS: path.join(dir, `${runId}.effects`),
  LEASE_TTL_MS: "800",
  ...extra,
});

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "dumplings-crash-"));
  db = path.join(dir, "journal.db");
  server = await startModelServer({
    handler: (request) => {
      for (const hook of requestHooks) hook(request);
      const turn = modelHandler(request);
      return slowRuns.has(tagOf(request)) ? { ...turn, chunkDelayMs: 150, chunkSize: 2 } : turn;
    },
  });
  journal = new SqliteJournal({ path: db });
  // the uninterrupted reference run, in this process
  const agent = makeFixtureAgent(server.url, path.join(dir, "ref.effects"));
  const r = await runDurable("ref", agent.workflow(), { journal, input: { messages: userMessages("ref") } });
  if (r.status !== "completed") throw new Error(`reference run did not complete: ${JSON.stringify(r)}`);
  reference = r.output as never;
});
afterAll(async () => {
  await server?.close();
  await journal?.close();
  rmSync(dir, { recursive: true, force: true });
});

/**
 * Writes of the fixture run: 1 llm started, 2 llm completed, 3 lookup started, 4 lookup completed, 5 llm started,
 * 6 llm completed, 7 refund started, 8 refund completed, 9 llm started, 10 llm completed. Kill points cover a
 * death before a model request, after a tool step and before a tool body; each costs two process starts.
 */
const KILL_POINTS = [1, 4, 7];

describe.concurrent("SIGKILL and resume in a new process", () => {
  it("the reference run made 3 model requests and ran each tool once", () => {
    expect(reference.text).toBe(FINAL_TEXT);
    expect(reference.llmSteps).toBe(3);
    expect(requestsOf(server.requests, "ref")).toHaveLength(3);
    expect(effects("ref")).toEqual(["lookup call_lookup", "refund call_refund"]);
  });

  it.each(KILL_POINTS)(
    "killed after journal write %i: resumes, same final messages, no repeated request or tool body",
    async (k) => {
      const runId = `kill-${k}`;
      const first = await runChild(fixture("agent-child.ts"), childEnv(runId, { KILL_AFTER_WRITES: String(k) }));
      expect(first.signal).toBe("SIGKILL");
      const stepsAtKill = await journal.readSteps(runId);
      expect(stepsAtKill.length).toBe(Math.ceil(k / 2));
      const second = await runChild(fixture("agent-child.ts"), childEnv(runId));
      expect(second.json, second.stderr).toMatchObject({ status: "completed" });
      const output = (second.json as { output: typeof reference }).output;
      expect(output.text).toBe(FINAL_TEXT);
      expect(output.messages.slice(1)).toEqual(reference.messages.slice(1));
      // exactly one model request per llm step and one body execution per tool step
      expect(requestsOf(server.requests, runId)).toHaveLength(3);
      expect(effects(runId)).toEqual(["lookup call_lookup", "refund call_refund"]);
      const steps = await journal.readSteps(runId);
      expect(steps.map((s) => s.seq)).toEqual([0, 1, 2, 3, 4]);
      expect(steps.every((s) => s.status === "completed")).toBe(true);
      // a step killed after its "started" record was re-run as attempt 2 by the new owner
      const interrupted = k % 2 === 1 ? steps[(k - 1) / 2] : undefined;
      if (interrupted) expect(interrupted.attempt).toBe(2);
      expect(steps.filter((s) => s.attempt > 1)).toHaveLength(k % 2);
      const leases = (await journal.readEvents(runId)).filter((e) => e.type === "lease_acquired");
      expect(leases.map((e) => e.fencingToken)).toEqual([1, 2]);
    },
  );
});

describe("SIGKILL while the model is streaming", () => {
  it("the interrupted llm step is asked again (attempt 2): one extra request, still the same final messages", async () => {
    const runId = "kill-mid-stream";
    slowRuns.add(runId);
    const { child, done } = startChild(fixture("agent-child.ts"), childEnv(runId));
    // kill the child while the answer to its third request (the final text) is being streamed
    await new Promise<void>((resolve) => {
      const hook = (r: RecordedRequest) => {
        if (tagOf(r) === runId && requestsOf(server.requests, runId).length === 3) {
          requestHooks.delete(hook);
          setTimeout(() => {
            child.kill("SIGKILL");
            resolve();
          }, 300);
        }
      };
      requestHooks.add(hook);
    });
    expect((await done).signal).toBe("SIGKILL");
    slowRuns.delete(runId);
    const second = await runChild(fixture("agent-child.ts"), childEnv(runId));
    expect(second.json, second.stderr).toMatchObject({ status: "completed" });
    expect((second.json as { output: typeof reference }).output.messages.slice(1)).toEqual(reference.messages.slice(1));
    const steps = await journal.readSteps(runId);
    expect(steps.map((s) => [s.name, s.attempt])).toEqual([
      ["llm", 1],
      ["tool:lookup", 1],
      ["llm", 1],
      ["tool:refund", 1],
      ["llm", 2],
    ]);
    expect(requestsOf(server.requests, runId)).toHaveLength(4); // 3 llm steps + the interrupted attempt
    expect(effects(runId)).toEqual(["lookup call_lookup", "refund call_refund"]);
  });
});

describe("approvals across processes", () => {
  it("an approval wait survives the process exiting; a changed prompt is drift; of two racing signals exactly one is taken", async () => {
    const runId = "approval-race";
    const first = await runChild(fixture("agent-child.ts"), childEnv(runId, { APPROVAL: "1" }));
    expect(first.code).toBe(0);
    expect(first.json).toMatchObject({
      status: "waiting",
      waitingFor: { kind: "signal", name: "approval:call_refund" },
    });
    expect(await journal.getRun(runId)).toMatchObject({ status: "waiting", waitingFor: "approval:call_refund" });
    expect(effects(runId)).toEqual(["lookup call_lookup"]);

    // resuming with a changed program (another system prompt) replays the recorded steps as drift: the run
    // keeps waiting, each replayed llm step records a step_drift event, the steps are untouched
    const before = await journal.readSteps(runId);
    const changed = await runChild(
      fixture("agent-child.ts"),
      childEnv(runId, { APPROVAL: "1", SYSTEM: "You are a very different assistant." }),
    );
    expect(changed.json, changed.stderr).toMatchObject({ status: "waiting" });
    const drift = (await journal.readEvents(runId)).filter((e) => e.type === "step_drift");
    expect(drift.map((e) => [e.seq, e.name])).toEqual([
      [0, "llm"],
      [2, "llm"],
    ]);
    expect(await journal.readSteps(runId)).toEqual(before);

    const goFile = path.join(dir, "go");
    const base = { DB: db, RUN_ID: runId, TOOL_CALL_ID: "call_refund", GO_FILE: goFile };
    const racers = [
      startChild(fixture("signal-child.ts"), { ...base, DECISION: "approve" }),
      startChild(fixture("signal-child.ts"), { ...base, DECISION: "reject" }),
    ];
    await Promise.all(racers.map(({ child }) => new Promise((r) => child.stdout?.once("data", r))));
    writeFileSync(goFile, "go");
    const [a, b] = (await Promise.all(racers.map((r) => r.done))) as [ChildResult, ChildResult];
    const outcomes = [a.json, b.json];
    const winners = outcomes.filter((o) => o?.ok === true);
    const losers = outcomes.filter((o) => o?.code === "SIGNAL_CONFLICT");
    expect(winners, `${a.stdout}${a.stderr}${b.stdout}${b.stderr}`).toHaveLength(1);
    expect(losers).toHaveLength(1);
    const approved = winners[0]?.decision === "approve";

    const resumed = await runChild(fixture("agent-child.ts"), childEnv(runId, { APPROVAL: "1" }));
    expect(resumed.json, resumed.stderr).toMatchObject({ status: "completed" });
    expect(requestsOf(server.requests, runId)).toHaveLength(3);
    expect(effects(runId)).toEqual(approved ? ["lookup call_lookup", "refund call_refund"] : ["lookup call_lookup"]);
    if (!approved) {
      const last = requestsOf(server.requests, runId)[2]?.body as { messages: { role: string; content: unknown }[] };
      expect(JSON.stringify(last.messages.filter((m) => m.role === "tool").pop())).toContain("raced");
    }
    expect((await journal.listSignals(runId)).map((s) => s.name)).toEqual(["approval:call_refund"]);
  });
});

describe("fencing a zombie", () => {
  it("a SIGSTOPped executor whose run was taken over has its late write refused", async () => {
    const runId = "zombie";
    const { child, done } = startChild(fixture("zombie-child.ts"), {
      DB: db,
      RUN_ID: runId,
      LEASE_TTL_MS: "400",
      SLOW_MS: "1500",
    });
    // wait until the slow step has started, then freeze the process
    for (let i = 0; i < 400; i++) {
      const steps = await journal.readSteps(runId);
      if (steps[1]?.status === "started") break;
      await new Promise((r) => setTimeout(r, 25));
    }
    child.kill("SIGSTOP");
    let lease = await journal.acquireLease(runId, "rescuer", 60_000);
    while (!lease.acquired) {
      await new Promise((r) => setTimeout(r, 50));
      lease = await journal.acquireLease(runId, "rescuer", 60_000);
    }
    child.kill("SIGCONT");
    const result = await done;
    expect(result.json, result.stderr).toMatchObject({ code: "STALE_FENCING_TOKEN" });
    const steps = await journal.readSteps(runId);
    expect(steps.map((s) => [s.name, s.status])).toEqual([
      ["one", "completed"],
      ["slow", "started"],
    ]);
    expect(steps[1]?.fencingToken).toBeLessThan(lease.fencingToken);
    expect(JSON.stringify(steps)).not.toContain("zombie result");
  });
});
