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
 * 3. the demo lists the run as `dumplings runs` does and approves the call as
 *    `dumplings approve RUN_ID TOOL_CALL_ID` does (same functions; the
 *    equivalent commands are printed);
 * 4. the run resumes and completes; the demo prints the journal, the
 *    model-request count against the `llm` steps, and checks the final
 *    messages against the recording. Exit 0 only when everything matches.
 *
 * Embedded SQLite journal by default; with `REDIS_URL` set, the workers are
 * `DurableWorker` processes on a BullMQ queue (the dead worker's job is
 * recovered by BullMQ's stalled-job check, and the approval re-enqueues the run).
 * Options: `--conversation ID`, `--keep` (keep the journal file), `--local`
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
import { renderJournal, renderRuns, sendDecision } from "../cli/durable-commands.js";
import type { OpenAIMessage } from "../core/messages.js";
import { SqliteJournal } from "../durable/journal-sqlite.js";
import { approvalSignalName } from "../durable/signals.js";
import { startModelServer } from "../testing/model-server.js";
import {
  approvalTool,
  compareWithRecording,
  DEFAULT_DEMO_CONVERSATION,
  DEMO_WORKFLOW,
  demoConversation,
  recordedModel,
} from "./durable-conversation.js";

const { values: args } = parseArgs({
  options: {
    conversation: { type: "string" },
    keep: { type: "boolean", default: false },
    local: { type: "boolean", default: false },
  },
});

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

async function main(): Promise<number> {
  const conv = demoConversation(args.conversation ?? DEFAULT_DEMO_CONVERSATION);
  const recording = conv.messages as OpenAIMessage[];
  const approval = approvalTool(recording);
  const useQueue = !!process.env.REDIS_URL && !args.local;
  const dir = mkdtempSync(path.join(tmpdir(), "dumplings-demo-durable-"));
  const db = path.join(dir, "journal.db");
  const runId = `demo-${Date.now().toString(36)}`;
  const queue = `dumplings-demo-${process.pid}`;
  const server = await startModelServer({ handler: recordedModel(recording) });
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

    // [3] dumplings runs / dumplings approve
    const journalFlag = `--journal sqlite:${db}`;
    log(`\n[3] the run waits for a human, holding no worker.\n$ dumplings runs ${journalFlag}`);
    log((await renderRuns(journal)).text);
    log(`\n$ dumplings approve ${runId} ${toolCallId} ${journalFlag}${queueClient ? ` --queue ${queue}` : ""}`);
    const decision = await sendDecision(
      journal,
      runId,
      approvalSignalName(toolCallId),
      { approved: true },
      queueClient ? queue : undefined,
    );
    log(`released ${runId}: approval recorded${decision.wakes && queueClient ? " and the run queued again" : ""}`);

    // [4] the run resumes and completes
    log(`\n[4] ${queueClient ? "worker #2 takes the run again" : "worker #3 resumes the run"} and completes it`);
    if (!queueClient) await startWorker(env, "worker#3", () => undefined).exited;
    for (let i = 0; i < 1200; i++) {
      const run = await journal.getRun(runId);
      if (run?.status === "completed" || run?.status === "failed") break;
      await pause(100);
    }
    const done = await journal.getRun(runId);
    const steps = await journal.readSteps(runId);
    log(`\njournal of ${runId} (${steps.length} steps):`);
    log(renderJournal(steps));
    const llmSteps = steps.filter((s) => s.name === "llm");
    const llmAttempts = llmSteps.reduce((n, s) => n + s.attempt, 0);
    const toolReruns = steps.filter((s) => s.name.startsWith("tool:") && s.attempt > 1);
    log(
      `\nmodel requests served: ${server.count} for ${llmSteps.length} llm steps (${llmAttempts} attempts) — no duplicated paid call: ${server.count === llmSteps.length ? "yes" : "NO"}`,
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
    log(
      `\nsee it yourself: dumplings runs ${runId} ${journalFlag}${args.keep ? "" : "   (pass --keep to keep the journal)"}`,
    );
    return diff || server.count !== llmSteps.length ? 1 : 0;
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
    if (!args.keep) rmSync(dir, { recursive: true, force: true });
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
