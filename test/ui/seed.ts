/**
 * Seeds the stores the web-inspector tests look at, with the library's own
 * APIs on temporary SQLite files:
 *
 * - sessions: two bundled conversations from `data/trajectories/` (an OpenAI
 *   one with tool calls and an Anthropic one), the first with a user message
 *   carrying an XSS payload appended (`<img src=x onerror=…>` and a `<script>`);
 * - a finished workflow of three nodes (a ResumableGraphRunner run);
 * - a durable run waiting for the approval of a `refund_payment` call, the
 *   tool call recorded in its `llm` step as an AI SDK tool-call part.
 */
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { Message } from "../../src/core/messages.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { step, waitForSignal } from "../../src/durable/context.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { approvalSignalName } from "../../src/durable/signals.js";
import { ResumableGraphRunner } from "../../src/workflow/runner.js";
import { END } from "../../src/workflow/state.js";
import { CheckpointStore } from "../../src/workflow/store.js";
import { ROOT, runCli } from "../cli/run-cli.js";

/** The XSS payload stored in a user message. */
export const XSS_TEXT =
  `Ignore that. <img src=x onerror="window.__xss=1;document.body.setAttribute('data-xss','img')">` +
  `<script>window.__xss=2;alert("xss")</script> thanks`;

/** The seeded conversations (file stems under data/trajectories). */
export const CONVERSATIONS = ["taubench-airline-gpt-4o-task07-trial0", "spotter-tool_heavy.anthropic"] as const;
/** Session key of the conversation holding the XSS message. */
export const XSS_KEY = "taubench-airline-gpt-4o-task07-trial0";
/** The finished workflow. */
export const WORKFLOW_ID = "order-42";
/** The durable run waiting for an approval. */
export const RUN_ID = "refund-run-1";
/** The tool call it waits on. */
export const TOOL_CALL_ID = "call_refund_1";
/** Arguments of that call. */
export const TOOL_ARGS = { orderId: "A-1009", amountCents: 4250, reason: "damaged <b>box</b>" };

/** The seeded stores. */
export interface Seeded {
  dir: string;
  sessionsDb: string;
  workflowsDb: string;
  journalDb: string;
}

/** The refund workflow of the durable run: a model step proposing the call, the approval, the tool. */
export async function refundWorkflow(): Promise<string> {
  await step("llm", () => ({
    content: [
      { type: "text", text: "I will refund the damaged order." },
      { type: "tool-call", toolCallId: TOOL_CALL_ID, toolName: "refund_payment", input: TOOL_ARGS },
    ],
    finishReason: "tool-calls",
  }));
  const decision = await waitForSignal<{ approved: boolean; note?: string }>(approvalSignalName(TOOL_CALL_ID));
  if (!decision.approved) return `refused: ${decision.note ?? ""}`;
  const receipt = await step("tool:refund_payment", () => ({ refunded: TOOL_ARGS.amountCents, receipt: "R-77" }));
  return `refunded ${receipt.refunded}`;
}

/**
 * Builds the three stores in a fresh temporary directory.
 *
 * @returns their paths
 */
export async function seed(): Promise<Seeded> {
  const dir = mkdtempSync(path.join(tmpdir(), "dumplings-ui-"));
  const sessionsDb = path.join(dir, "sessions.db");
  const workflowsDb = path.join(dir, "workflows.db");
  const journalDb = path.join(dir, "journal.db");

  // sessions: the bundled conversations, imported as `dumplings import` does
  const files = CONVERSATIONS.map((stem) => path.join(ROOT, "data", "trajectories", `${stem}.jsonl`));
  const imported = runCli(["import", ...files, "--backend", `sqlite:${sessionsDb}`]);
  if (imported.code !== 0) throw new Error(`dumplings import failed: ${imported.stderr}`);
  const backend = new SQLiteBackend({ dbPath: sessionsDb });
  try {
    const state = backend.load(XSS_KEY);
    state.history.push({ role: "user", content: XSS_TEXT } as Message);
    backend.save(XSS_KEY, state);
  } finally {
    backend.close();
  }
  // sanity: the conversation is the bundled one
  JSON.parse(readFileSync(files[0] as string, "utf8").split("\n")[0] as string);

  // a finished workflow
  const store = await CheckpointStore.open({
    cold: new SqliteColdStore({ path: workflowsDb }),
    blobDir: path.join(dir, "blobs"),
  });
  try {
    const runner = new ResumableGraphRunner({
      store,
      nodes: {
        plan: async () => ({ next: "charge", updates: { plan: ["check stock", "charge card"], total: 4250 } }),
        charge: async () => ({ next: "ship", updates: { charged: true, receipt: "R-77" } }),
        ship: async () => ({ next: END, updates: { shipped: true, carrier: "<i>DHL</i>" } }),
      },
    });
    const result = await runner.runOrResume(WORKFLOW_ID, { sharedMemory: { orderId: 42 } });
    if (result.status !== "finished") throw new Error(`the seeded workflow is ${result.status}`);
  } finally {
    await store.close();
  }

  // a durable run waiting for an approval
  const journal = new SqliteJournal({ path: journalDb });
  try {
    const r = await runDurable(RUN_ID, refundWorkflow, { journal, input: { orderId: "A-1009" }, workflow: "refund" });
    if (r.status !== "waiting") throw new Error(`the seeded run is ${r.status}`);
  } finally {
    await journal.close();
  }
  return { dir, sessionsDb, workflowsDb, journalDb };
}
