/**
 * `npm run demo:durable`: a durable AI-SDK agent on a bundled recorded
 * conversation, over the local model server (real HTTP, OpenAI wire protocol,
 * no network):
 *
 * 1. worker process #1 starts the run and is SIGKILLed in the middle of a tool call;
 * 2. worker process #2 replays the journal (recorded model answers and tool
 *    results come from the journal: no model request is repeated) and
 *    continues until a write-like tool call needs a human approval; the run
 *    is checkpointed as `waiting` and holds no process;
 * 3. the demo lists the run as `dumplings runs` does;
 * 4. a deploy while the run waits: program v2 appends a sentence to the
 *    system prompt, adds a tool, and adds a step before the first model call
 *    behind `patched()`; the call is approved as
 *    `dumplings approve RUN_ID TOOL_CALL_ID` does (same functions; the
 *    equivalent commands are printed);
 * 5. a v2 worker resumes the run and completes it: the replayed `llm` steps
 *    keep their recorded answers (their changed input is recorded as
 *    `step_drift`, printed as `dumplings runs RUN_ID` does); the demo prints
 *    the journal, the model-request count against the `llm` steps, and checks
 *    the final messages against the recording;
 * 6. a second run, started under v2, waits for its approval and is cancelled
 *    by an operator (`dumplings cancel`); it is listed as cancelled with who
 *    and why, and a late approval is refused.
 *
 * Exit 0 only when everything matches.
 *
 * Embedded SQLite journal by default; with `REDIS_URL` set, the workers are
 * `DurableWorker` processes on a BullMQ queue (the dead worker's job is
 * recovered by BullMQ's stalled-job check, and the approval re-enqueues the run).
 * The journal (a SQLite file in the OS temp folder) is kept, and the demo ends
 * with the `dumplings runs` and `dumplings ui` commands that show the run it
 * made. Options: `--conversation ID`, `--clean` (remove the journal at the
 * end instead), `--keep` (the default; accepted for older scripts), `--local`
 * (ignore REDIS_URL).
 *
 * @module
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import type { ModelMessage } from "ai";
import { renderJournal, renderRuns } from "../cli/durable-commands.js";
import type { OpenAIMessage } from "../core/messages.js";
import { SqliteJournal } from "../durable/journal-sqlite.js";
import { cancel } from "../durable/run.js";
import { approvalSignalName } from "../durable/signals.js";
import { describeWait, renderNotes, sendDecision } from "../ops/runs.js";
import { type RecordedRequest, startModelServer } from "../testing/model-server.js";
import {
  approvalTool,
  compareWithRecording,
  contentText,
  DEFAULT_DEMO_CONVERSATION,
  DEMO_WORKFLOW,
  demoConversation,
  recordedModel,
  V2_PATCH,
  V2_SYSTEM_SENTENCE,
  V2_TOOL,
} from "./durable-conversation.js";

const { values: args } = parseArgs({
  options: {
    conversation: { type: "string" },
    keep: { type: "boolean", default: false },
    clean: { type: "boolean", default: false },
    local: { type: "boolean", default: false },
  },
});

/** The journal is kept unless `--clean` (then `--keep` cannot bring it back: `--clean` wins). */
const keep = !args.clean;
const log = (line = "") => process.stdout.write(`${line}\n`);
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Worker {
  child: ChildProcess;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function startWorker(env: Record<string, string>, label: string, onLine: (line: string, w: Worker) => void): Worker {
  const here = fileURLToPath(import.meta.url);
  const ts = here.endsWith(".ts");
  const child = spawn(
    process.execPath,
    [...(ts ? ["--import", "tsx"] : []), path.join(path.dirname(here), `durable-worker${ts ? ".ts" : ".js"}`)],
    { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "inherit"] },
  );
  const w: Worker = {
    child,
    exited: new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal }))),
  };
  let buffer = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    buffer += chunk.toString("utf8");
    for (let nl = buffer.indexOf("\n"); nl >= 0; nl = buffer.indexOf("\n")) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      log(`    ${label}: ${line}`);
      onLine(line, w);
    }
  });
  return w;
}

/** Polls the run until its status is one of `statuses` (or about 2 minutes pass). */
async function until(journal: SqliteJournal, runId: string, statuses: string[]) {
  for (let i = 0; i < 1200; i++) {
    const run = await journal.getRun(runId);
    if (run && statuses.includes(run.status)) return run;
    await pause(100);
  }
  return journal.getRun(runId);
}

/**
 * Part [6]: a second run under v2 waits for its approval; an operator cancels
 * it; it is listed as cancelled with who and why; a late approval is refused.
 *
 * @returns whether every part behaved
 */
async function cancelDemo(o: {
  journal: SqliteJournal;
  env: Record<string, string>;
  runId: string;
  journalFlag: string;
  queueClient: import("../durable/worker.js").DurableQueue | undefined;
}): Promise<boolean> {
  const { journal, runId, journalFlag, queueClient } = o;
  log(`\n[6] a second run, ${runId}, starts under v2 and waits for its approval; an operator cancels it`);
  const env = { ...o.env, DEMO_RUN_ID: runId };
  if (queueClient) await queueClient.enqueue({ runId, workflow: DEMO_WORKFLOW, input: null });
  else await startWorker(env, "worker#4", () => undefined).exited;
  const waiting = await until(journal, runId, ["waiting", "completed", "failed", "blocked", "cancelled"]);
  if (waiting?.status !== "waiting" || !waiting.waitingFor?.startsWith("approval:")) {
    log(`the second run is not waiting for an approval: ${JSON.stringify(waiting)}`);
    return false;
  }
  const toolCallId = waiting.waitingFor.slice("approval:".length);
  const reason = "the customer withdrew the change by phone";
  log(`\n$ dumplings cancel ${runId} --by demo-operator --reason ${JSON.stringify(reason)} ${journalFlag}`);
  const after = await cancel(journal, runId, { by: "demo-operator", reason });
  log(`${runId} is ${after.status} (cancel by demo-operator)`);
  log(`\n$ dumplings runs ${runId} ${journalFlag}`);
  const why = describeWait(after);
  log(`${runId}  ${after.workflow}  ${after.status}${why && why !== after.status ? `  ${why}` : ""}`);
  const notes = renderNotes(await journal.readEvents(runId));
  for (const line of notes) log(line);
  log(`\n$ dumplings approve ${runId} ${toolCallId} ${journalFlag}   (too late)`);
  let refused = false;
  try {
    await sendDecision(journal, runId, approvalSignalName(toolCallId), { approved: true });
    log("the late approval was recorded: it should have been refused");
  } catch (error) {
    refused = true;
    log(`refused: ${error instanceof Error ? error.message : String(error)}`);
  }
  const recorded = await journal.getSignal(runId, approvalSignalName(toolCallId));
  let resumed = "cancelled";
  if (!queueClient) {
    let result = "";
    await startWorker(env, "worker#5", (line) => {
      if (line.startsWith("RESULT ")) result = line;
    }).exited;
    resumed = (JSON.parse(result.slice("RESULT ".length) || "{}") as { status?: string }).status ?? "?";
  }
  const final = await journal.getRun(runId);
  const ok =
    after.status === "cancelled" &&
    final?.status === "cancelled" &&
    refused &&
    recorded === undefined &&
    resumed === "cancelled" &&
    notes.some((n) => n.startsWith("cancelled by demo-operator") && n.endsWith(reason));
  log(
    `cancel: ${runId} is ${final?.status}, by demo-operator (${reason}); the late approval ${recorded ? "WAS recorded" : "was not recorded"}${queueClient ? "" : `; a worker resuming it gets status ${resumed}`}: ${ok ? "ok" : "NOT OK"}`,
  );
  return ok;
}

async function main(): Promise<number> {
  const conv = demoConversation(args.conversation ?? DEFAULT_DEMO_CONVERSATION);
  const recording = conv.messages as OpenAIMessage[];
  const approval = approvalTool(recording);
  const useQueue = !!process.env.REDIS_URL && !args.local;
  const dir = mkdtempSync(path.join(tmpdir(), "dumplings-demo-durable-"));
  const db = path.join(dir, "journal.db");
  const runId = `demo-${Date.now().toString(36)}`;
  const cancelledId = `${runId}-b`;
  const queue = `dumplings-demo-${process.pid}`;
  const answer = recordedModel(recording);
  let lastRequest: RecordedRequest | undefined;
  const server = await startModelServer({
    handler: (request) => {
      lastRequest = request;
      return answer(request);
    },
  });
  const journal = new SqliteJournal({ path: db });
  let workerUp: Worker | undefined;
  let queueClient: import("../durable/worker.js").DurableQueue | undefined;
  try {
    log(
      `dumplings-ai durable demo: ${conv.id} (${recording.length} recorded messages; approval needed for ${approval})`,
    );
    log(`local model server (OpenAI wire protocol, recorded answers): ${server.url}`);
    log(
      `journal: SQLite ${db}; workers: ${useQueue ? `BullMQ queue "${queue}" on ${process.env.REDIS_URL}` : "processes calling runDurable"}`,
    );
    const env = {
      DEMO_DB: db,
      DEMO_MODEL_URL: server.url,
      DEMO_RUN_ID: runId,
      DEMO_CONVERSATION: conv.id,
      DEMO_MODE: useQueue ? "bullmq" : "direct",
      DEMO_QUEUE: queue,
    };
    if (useQueue) {
      const { DurableQueue } = await import("../durable/worker.js");
      queueClient = new DurableQueue({ journal, queueName: queue });
    }

    // [1] the first worker is killed in the middle of a tool call
    log("\n[1] worker #1 starts the run; it is SIGKILLed in the middle of a tool call once 6 steps are journaled");
    let killedIn: string | undefined;
    const w1 = startWorker(env, "worker#1", (line, w) => {
      if (killedIn || !line.startsWith("TOOL ")) return;
      void journal.readSteps(runId).then((steps) => {
        if (killedIn || steps.filter((s) => s.status === "completed").length < 6) return;
        killedIn = line.slice(5);
        log(`    demo: SIGKILL worker #1 while tool ${killedIn} is running`);
        w.child.kill("SIGKILL");
      });
    });
    if (queueClient) {
      await new Promise<void>((resolve) =>
        w1.child.stdout?.on("data", (d: Buffer) => d.includes("READY") && resolve()),
      );
      await queueClient.enqueue({ runId, workflow: DEMO_WORKFLOW, input: null });
    }
    const first = await w1.exited;
    if (first.signal !== "SIGKILL") {
      log(`worker #1 ended without being killed (${JSON.stringify(first)})`);
      return 1;
    }
    const atKill = await journal.readSteps(runId);
    log(
      `    journal after the kill: ${atKill.filter((s) => s.status === "completed").length} completed steps; step #${atKill.length - 1} (${atKill.at(-1)?.name}) was started, never finished`,
    );

    // [2] a second worker replays and runs until the approval
    log("\n[2] worker #2 replays the journal and continues until the approval");
    const requestsBefore = server.count;
    const w2 = startWorker(env, "worker#2", () => undefined);
    if (queueClient) {
      workerUp = w2;
      log("    (BullMQ gives the dead worker's job to worker #2 once its lock expires)");
    }
    for (let i = 0; i < 1200; i++) {
      const run = await journal.getRun(runId);
      if (run?.status === "waiting" || run?.status === "completed" || run?.status === "failed") break;
      await pause(100);
    }
    if (!queueClient) await w2.exited;
    const waiting = await journal.getRun(runId);
    if (waiting?.status !== "waiting" || !waiting.waitingFor?.startsWith("approval:")) {
      log(`the run is not waiting for an approval: ${JSON.stringify(waiting)}`);
      return 1;
    }
    const toolCallId = waiting.waitingFor.slice("approval:".length);
    log(`    worker #2 made ${server.count - requestsBefore} model request(s); the replayed steps made none`);

    // [3] dumplings runs
    const journalFlag = `--journal sqlite:${db}`;
    log(`\n[3] the run waits for a human, holding no worker.\n$ dumplings runs ${journalFlag}`);
    log((await renderRuns(journal)).text);

    // [4] a deploy while the run waits, then the approval
    log("\n[4] deploy while the run waits: program v2 replaces v1 (the run was started and paused under v1)");
    log(`    v2 system prompt: the recorded prompt + ${JSON.stringify(V2_SYSTEM_SENTENCE)}`);
    log(`    v2 tools: the recorded tools + ${V2_TOOL}`);
    log(`    v2 screens the customer before the first model call: a new step, behind patched("${V2_PATCH}")`);
    const v2env = { ...env, DEMO_PROGRAM: "v2" };
    if (queueClient && workerUp) {
      log("    (worker #2, running v1, is stopped; worker #3 runs v2 on the same queue)");
      workerUp.child.kill("SIGTERM");
      await workerUp.exited;
      const w3 = startWorker(v2env, "worker#3", () => undefined);
      workerUp = w3;
      await new Promise<void>((resolve) =>
        w3.child.stdout?.on("data", (d: Buffer) => d.includes("READY") && resolve()),
      );
    }
    const requestsBeforeDeploy = server.count;
    log(`\n$ dumplings approve ${runId} ${toolCallId} ${journalFlag}${queueClient ? ` --queue ${queue}` : ""}`);
    const decision = await sendDecision(
      journal,
      runId,
      approvalSignalName(toolCallId),
      { approved: true },
      queueClient ? queue : undefined,
    );
    log(`released ${runId}: approval recorded${decision.wakes && queueClient ? " and the run queued again" : ""}`);

    // [5] the run resumes under v2 and completes
    log("\n[5] worker #3 (program v2) resumes the run and completes it");
    if (!queueClient) await startWorker(v2env, "worker#3", () => undefined).exited;
    const done = await until(journal, runId, ["completed", "failed", "blocked", "cancelled"]);
    const steps = await journal.readSteps(runId);
    log(`\njournal of ${runId} (${steps.length} steps):`);
    log(renderJournal(steps));
    const llmSteps = steps.filter((s) => s.name === "llm");
    const llmAttempts = llmSteps.reduce((n, s) => n + s.attempt, 0);
    const toolReruns = steps.filter((s) => s.name.startsWith("tool:") && s.attempt > 1);
    const requests = server.count;
    const afterDeploy = requests - requestsBeforeDeploy;
    const newLlm = llmSteps.filter((s) => s.seq > (steps.find((x) => x.name.startsWith("signal:"))?.seq ?? 0)).length;
    const drift = (await journal.readEvents(runId)).filter((e) => e.type === "step_drift");
    const notes = renderNotes(drift);
    log(
      `\ndrift the journal recorded (${drift.length} step_drift events; dumplings runs ${runId} prints them): the v1 steps replayed under v2 keep their recorded results`,
    );
    for (const line of notes.slice(0, 3)) log(`    ${line}`);
    if (notes.length > 3) log(`    … ${notes.length - 3} more`);
    const sent = (lastRequest?.body.messages ?? []) as OpenAIMessage[];
    const sentSystem = sent[0]?.role === "system" ? contentText(sent[0].content) : "";
    const sentTools = ((lastRequest?.body.tools ?? []) as { function?: { name?: string } }[]).map(
      (t) => t.function?.name,
    );
    const v2Sent = sentSystem.endsWith(V2_SYSTEM_SENTENCE) && sentTools.includes(V2_TOOL);
    log(
      `deploy: the run paused under v1 ${done?.status === "completed" ? "completed" : `ended ${done?.status}`} under v2 with ${afterDeploy} model request(s) after the deploy for ${newLlm} new llm step(s); the last request carried the v2 prompt and ${sentTools.length} tools: ${v2Sent ? "yes" : "NO"}`,
    );
    log(
      `\nmodel requests served: ${requests} for ${llmSteps.length} llm steps (${llmAttempts} attempts) — no duplicated paid call: ${requests === llmSteps.length ? "yes" : "NO"}`,
    );
    log(
      `tool bodies re-run after the crash: ${toolReruns.map((s) => `${s.name} (attempt ${s.attempt})`).join(", ") || "none"} — a body interrupted by the crash runs again (at-least-once); pair external writes with an idempotency key`,
    );
    if (done?.status !== "completed") {
      log(`the run did not complete: ${JSON.stringify(done)}`);
      return 1;
    }
    const output = done.output as { messages: ModelMessage[] };
    const diff = compareWithRecording(recording, output.messages);
    log(
      `final messages ${diff ? `DIFFER from the recording: ${diff}` : `equal the recording (${output.messages.length} messages)`}`,
    );
    const deployOk = drift.length > 0 && afterDeploy === newLlm && v2Sent;

    // [6] a second run, cancelled by an operator while it waits
    const cancelOk = await cancelDemo({ journal, env: v2env, runId: cancelledId, journalFlag, queueClient });

    // The journal is removed below with --clean: name it only when it will still exist, with a command that
    // works in this repository (`dumplings` is on the PATH only where the package is installed).
    log(
      keep
        ? `\nsee it yourself (the journal is kept): npm run dumplings -- runs ${runId} ${journalFlag}\n(or npx dumplings runs … where dumplings-ai is installed)` +
            `\nin a browser: npm run dumplings -- ui ${journalFlag}\n(it prints http://127.0.0.1:PORT/?token=…; the run is at /runs/${runId})`
        : "\nthe journal is removed now (--clean); to look at it yourself: npm run demo:durable (it prints the commands, dumplings ui included)",
    );
    return diff || requests !== llmSteps.length || !deployOk || !cancelOk ? 1 : 0;
  } finally {
    if (workerUp && workerUp.child.exitCode === null) {
      workerUp.child.kill("SIGTERM");
      await workerUp.exited;
    }
    if (queueClient) {
      await queueClient.obliterate().catch(() => undefined);
      await queueClient.close();
    }
    await journal.close();
    await server.close();
    if (!keep) rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(
      `demo:durable failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exitCode = 1;
  },
);
