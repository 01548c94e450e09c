/**
 * A worker process of `npm run demo:durable`. Announces each tool body it
 * starts on stdout (`TOOL <name> <toolCallId>`) so the demo can kill it in
 * the middle of one.
 *
 * - `DEMO_MODE=direct`: runs (or resumes) the run with `runDurable` and exits,
 *   printing `RESULT <json>` (completed, or waiting for an approval).
 * - `DEMO_MODE=bullmq`: a `DurableWorker` consuming `DEMO_QUEUE` on
 *   `REDIS_URL` until SIGTERM; prints `READY` once connected.
 *
 * `DEMO_PROGRAM=v2` runs the deployed program (see `conversationWorkflow`) and
 * prints what its `patched()` answered (`PATCH <id> <true|false>`).
 *
 * env: DEMO_DB, DEMO_MODEL_URL, DEMO_RUN_ID, DEMO_CONVERSATION, DEMO_MODE, DEMO_QUEUE, DEMO_PROGRAM
 *
 * @module
 */
import { SqliteJournal } from "../durable/journal-sqlite.js";
import { runDurable } from "../durable/run.js";
import { DurableWorker } from "../durable/worker.js";
import { conversationWorkflow, DEMO_WORKFLOW, demoConversation } from "./durable-conversation.js";

const need = (k: string): string => {
  const v = process.env[k];
  if (!v) throw new Error(`missing environment variable ${k}`);
  return v;
};
const say = (line: string) => process.stdout.write(`${line}\n`);

const journal = new SqliteJournal({ path: need("DEMO_DB") });
const workflow = conversationWorkflow(demoConversation(need("DEMO_CONVERSATION")), need("DEMO_MODEL_URL"), {
  onTool: (name, id) => say(`TOOL ${name} ${id}`),
  program: process.env.DEMO_PROGRAM === "v2" ? "v2" : "v1",
  onPatch: (id, taken) =>
    say(
      `PATCH ${id} ${taken}${taken ? " (a new run: marker recorded, the new step runs)" : " (history from v1: the new step is skipped)"}`,
    ),
});

if (process.env.DEMO_MODE === "bullmq") {
  const worker = new DurableWorker({
    journal,
    queueName: need("DEMO_QUEUE"),
    workflows: { [DEMO_WORKFLOW]: workflow },
    leaseTtlMs: 2000,
    lockDurationMs: 2000,
    stalledIntervalMs: 1000,
  });
  await worker.start();
  say("READY");
  process.on("SIGTERM", () => {
    void worker.close().then(async () => {
      await journal.close();
      process.exit(0);
    });
  });
} else {
  const result = await runDurable(need("DEMO_RUN_ID"), workflow, {
    journal,
    input: null,
    workflow: DEMO_WORKFLOW,
    leaseTtlMs: 2000,
    leaseWaitMs: 10_000,
  });
  say(
    `RESULT ${JSON.stringify({ status: result.status, ...(result.status === "waiting" ? { waitingFor: result.waitingFor } : {}) })}`,
  );
  await journal.close();
}
