/**
 * `npm run demo:workflow`: a resumable multi-step workflow over the real
 * conversations bundled with the package, killed with SIGKILL mid-run and
 * resumed from its last checkpoint.
 *
 * The workflow: `load` lists the bundled conversations; `analyze` runs once
 * per conversation (messages by role, tool calls per tool name, bytes,
 * longest tool output) with a simulated model latency; `aggregate` sums them
 * up; `report` writes a Markdown report as a guarded side effect.
 *
 * The demo runs an uninterrupted reference in-process, then runs the same
 * workflow in a child process (this file with `--child`), SIGKILLs it after a
 * few steps, prints the step timeline, resumes it in a new child (which first
 * waits for the killed child's lease on the workflow to expire: a short one,
 * 2 s, in the demo), prints the timeline again, and exits non-zero if the
 * resumed result differs from the reference or the report was written more
 * than once.
 *
 * Storage: embedded SQLite under `./.dumplingsAI_workflows` (or
 * `DUMPLINGS_WORKFLOW_DIR`); the Redis hot tier when `REDIS_URL` is set.
 *
 * @module
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { appendFileSync, existsSync, mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { JsonObject, JsonValue } from "../core/json.js";
import type { Message } from "../core/messages.js";
import { loadSampleConversations, readConversation } from "../testing/samples.js";
import {
  CheckpointStore,
  END,
  type GraphNode,
  RedisHotTier,
  ResumableGraphRunner,
  SqliteColdStore,
  type StepEvent,
} from "../workflow/index.js";

const DIR = path.resolve(process.env.DUMPLINGS_WORKFLOW_DIR ?? ".dumplingsAI_workflows");
const KILL_AFTER_STEPS = Number(process.env.DEMO_KILL_AFTER_STEPS ?? 6);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface ConversationStats {
  messages: number;
  byRole: Record<string, number>;
  toolCalls: Record<string, number>;
  bytes: number;
  longestToolOutput: { tool: string; chars: number };
}

function textLength(content: unknown): number {
  if (typeof content === "string") return content.length;
  if (Array.isArray(content)) {
    return content.reduce<number>((n, part) => {
      const p = part as { text?: unknown; content?: unknown };
      return n + (typeof p.text === "string" ? p.text.length : textLength(p.content));
    }, 0);
  }
  return 0;
}

/** Statistics of one conversation, for both protocols. */
function analyze(messages: Message[], bytes: number): ConversationStats {
  const byRole: Record<string, number> = {};
  const toolCalls: Record<string, number> = {};
  const toolNameById = new Map<string, string>();
  let longest = { tool: "-", chars: 0 };
  const bump = (rec: Record<string, number>, key: string) => {
    rec[key] = (rec[key] ?? 0) + 1;
  };
  for (const m of messages) {
    const msg = m as { role: string; content?: unknown; tool_calls?: { id: string; function: { name: string } }[] };
    bump(byRole, msg.role);
    for (const call of msg.tool_calls ?? []) {
      bump(toolCalls, call.function.name);
      toolNameById.set(call.id, call.function.name);
    }
    if (msg.role === "tool") {
      const id = (m as { tool_call_id?: string }).tool_call_id ?? "";
      const chars = textLength(msg.content);
      if (chars > longest.chars) longest = { tool: toolNameById.get(id) ?? "?", chars };
    }
    if (Array.isArray(msg.content)) {
      for (const block of msg.content as {
        type: string;
        id?: string;
        name?: string;
        tool_use_id?: string;
        content?: unknown;
      }[]) {
        if (block.type === "tool_use" && block.name) {
          bump(toolCalls, block.name);
          if (block.id) toolNameById.set(block.id, block.name);
        }
        if (block.type === "tool_result") {
          const chars = textLength(block.content);
          if (chars > longest.chars) longest = { tool: toolNameById.get(block.tool_use_id ?? "") ?? "?", chars };
        }
      }
    }
  }
  return { messages: messages.length, byRole, toolCalls, bytes, longestToolOutput: longest };
}

/** The workflow's nodes. `stepMs` simulates a model call's latency in `analyze`. */
function nodes(stepMs: number, reportFile: (workflowId: string) => string): Record<string, GraphNode> {
  return {
    load: () => {
      const convs = loadSampleConversations();
      return {
        next: "analyze",
        updates: {
          conversations: convs.map((c) => ({ id: c.id, protocol: c.protocol, file: path.basename(c.file) })),
          queue: convs.map((c) => c.id),
          perConversation: {},
        },
      };
    },
    analyze: async (s) => {
      const queue = s.sharedMemory.queue as string[];
      const id = queue[0]!;
      const entry = (s.sharedMemory.conversations as { id: string; file: string }[]).find((c) => c.id === id)!;
      const conv = readConversation(path.join(path.dirname(loadSampleConversations()[0]!.file), entry.file));
      await sleep(stepMs);
      const stats = analyze(conv.messages, conv.bytes);
      return {
        next: queue.length > 1 ? "analyze" : "aggregate",
        updates: {
          queue: queue.slice(1),
          perConversation: { ...(s.sharedMemory.perConversation as JsonObject), [id]: stats as unknown as JsonValue },
        },
      };
    },
    aggregate: (s) => {
      const per = s.sharedMemory.perConversation as unknown as Record<string, ConversationStats>;
      const byRole: Record<string, number> = {};
      const toolCalls: Record<string, number> = {};
      let bytes = 0;
      let messages = 0;
      let longest = { conversation: "-", tool: "-", chars: 0 };
      for (const [id, st] of Object.entries(per)) {
        messages += st.messages;
        bytes += st.bytes;
        for (const [r, n] of Object.entries(st.byRole)) byRole[r] = (byRole[r] ?? 0) + n;
        for (const [t, n] of Object.entries(st.toolCalls)) toolCalls[t] = (toolCalls[t] ?? 0) + n;
        if (st.longestToolOutput.chars > longest.chars) longest = { conversation: id, ...st.longestToolOutput };
      }
      return {
        next: "report",
        updates: { totals: { conversations: Object.keys(per).length, messages, bytes, byRole, toolCalls, longest } },
      };
    },
    report: async (s, ctx) => {
      const t = s.sharedMemory.totals as {
        conversations: number;
        messages: number;
        bytes: number;
        byRole: Record<string, number>;
        toolCalls: Record<string, number>;
        longest: { conversation: string; tool: string; chars: number };
      };
      const topTools = Object.entries(t.toolCalls)
        .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
        .slice(0, 8);
      const text = [
        "# Bundled conversations: statistics",
        "",
        `- conversations: ${t.conversations}`,
        `- messages: ${t.messages}`,
        `- bytes: ${t.bytes}`,
        `- messages by role: ${Object.entries(t.byRole)
          .sort()
          .map(([r, n]) => `${r} ${n}`)
          .join(", ")}`,
        `- tool calls (top ${topTools.length}): ${topTools.map(([name, n]) => `${name} ${n}`).join(", ")}`,
        `- longest tool output: ${t.longest.chars} chars from ${t.longest.tool} in ${t.longest.conversation}`,
        "",
      ].join("\n");
      // The side effect: append the report to a file. Appending makes a second execution visible.
      const written = await ctx.sideEffect("write-report", () => {
        appendFileSync(reportFile(ctx.workflowId), text);
        return { bytes: Buffer.byteLength(text), sha256: createHash("sha256").update(text).digest("hex") };
      });
      return { next: END, updates: { report: written } };
    },
  };
}

async function openStore(): Promise<CheckpointStore> {
  mkdirSync(DIR, { recursive: true });
  return CheckpointStore.open({
    cold: new SqliteColdStore({ path: path.join(DIR, "workflows.db") }),
    hot: process.env.REDIS_URL
      ? new RedisHotTier({ url: process.env.REDIS_URL, keyPrefix: "dumplings-demo:" })
      : undefined,
    blobDir: path.join(DIR, "blobs"),
  });
}

const reportFile = (workflowId: string) => path.join(DIR, `${workflowId}.report.md`);

/** The children's lease on the workflow, ms: a killed child holds it this long at most. */
const LEASE_TTL_MS = 2000;

/** Child mode: run or resume one workflow, printing one line per step event. */
async function child(workflowId: string): Promise<void> {
  const store = await openStore();
  const runner = new ResumableGraphRunner({
    store,
    nodes: nodes(Number(process.env.DEMO_STEP_MS ?? 150), reportFile),
    entry: "load",
    // A child started after a SIGKILL waits for the dead one's lease to expire, then takes it over.
    leaseTtlMs: LEASE_TTL_MS,
    leaseWaitMs: 5 * LEASE_TTL_MS,
    onStep: (e: StepEvent) => {
      if (e.type === "finish") process.stdout.write(`STEP ${e.stepIndex} ${e.node} ${e.durationMs.toFixed(0)}ms\n`);
    },
  });
  process.stdout.write(`READY pid ${process.pid}\n`);
  await runner.runOrResume(workflowId);
  await store.close();
}

function spawnChild(
  workflowId: string,
  killAfterSteps?: number,
): Promise<{ code: number | null; signal: string | null }> {
  return new Promise((resolve, reject) => {
    const self = fileURLToPath(import.meta.url);
    const proc = spawn(process.execPath, [...process.execArgv, self, "--child", workflowId], {
      stdio: ["ignore", "pipe", "inherit"],
      env: process.env,
    });
    let buffer = "";
    let steps = 0;
    proc.stdout.on("data", (d: Buffer) => {
      buffer += d.toString();
      let nl = buffer.indexOf("\n");
      while (nl >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        nl = buffer.indexOf("\n");
        console.log(`    [child ${proc.pid}] ${line}`);
        if (line.startsWith("STEP ")) steps++;
        if (killAfterSteps !== undefined && steps === killAfterSteps) {
          console.log(`    [demo] SIGKILL → child ${proc.pid} after ${steps} steps`);
          proc.kill("SIGKILL");
          killAfterSteps = undefined;
        }
      }
    });
    proc.once("error", reject);
    proc.once("exit", (code, signal) => resolve({ code, signal }));
  });
}

async function timeline(store: CheckpointStore, workflowId: string, killedAfterStep?: number): Promise<void> {
  const history = await store.history(workflowId);
  const t0 = history[0]?.createdAt ?? 0;
  for (const h of history) {
    const mem = h.state.sharedMemory;
    const queue = Array.isArray(mem.queue) ? `queue ${mem.queue.length}` : "";
    console.log(
      `    #${String(h.stepIndex).padStart(2)}  ${h.nodeName.padEnd(10)} +${String(h.createdAt - t0).padStart(5)} ms  ${h.state.status.padEnd(8)} next=${h.state.currentNode} ${queue}`,
    );
    if (killedAfterStep !== undefined && h.stepIndex === killedAfterStep) {
      console.log(
        "    ── SIGKILL here; the steps below were written by a new process resuming from this checkpoint ──",
      );
    }
  }
}

async function main(): Promise<number> {
  const base = `stats-${new Date().toISOString().replace(/[-:.TZ]/g, "")}`;
  console.log(
    `dumplings-ai workflow demo — checkpoints in ${DIR}${process.env.REDIS_URL ? ` (+ Redis hot tier at ${process.env.REDIS_URL})` : ""}`,
  );
  const store = await openStore();

  console.log("\n1. Reference: the workflow uninterrupted, in this process");
  const reference = await new ResumableGraphRunner({ store, nodes: nodes(0, reportFile), entry: "load" }).runOrResume(
    `${base}-reference`,
  );
  console.log(`    finished at step ${reference.state.stepIndex}`);

  console.log(`\n2. The same workflow in a child process, killed with SIGKILL after ${KILL_AFTER_STEPS} steps`);
  const first = await spawnChild(base, KILL_AFTER_STEPS);
  console.log(`    child exited: ${first.signal ?? `code ${first.code}`}`);
  const atKill = await store.loadLatest(base);
  console.log("\n   Timeline before resuming:");
  await timeline(store, base);
  if (atKill && !atKill.isFinished) {
    console.log(
      `    (node ${atKill.currentNode} was in flight when the process died; it runs again from step ${atKill.stepIndex})`,
    );
  }

  console.log(
    `\n3. Resume: a new child process takes the workflow over once the killed child's lease expires (${LEASE_TTL_MS / 1000} s) and continues from the last checkpoint`,
  );
  const second = await spawnChild(base);
  console.log(`    child exited: ${second.signal ?? `code ${second.code}`}`);
  console.log("\n   Timeline after resuming:");
  await timeline(store, base, atKill?.stepIndex);

  const final = await store.loadLatest(base);
  const same = JSON.stringify(final?.sharedMemory) === JSON.stringify(reference.state.sharedMemory);
  const reportText = existsSync(reportFile(base)) ? readFileSync(reportFile(base), "utf8") : "";
  const report = final?.sharedMemory.report as { bytes: number } | undefined;
  const writtenOnce = report !== undefined && Buffer.byteLength(reportText) === report.bytes;
  console.log(`\n4. Result\n\n${reportText.replace(/^/gm, "    ")}`);
  console.log(`    killed mid-run: ${first.signal === "SIGKILL" ? "yes" : "no (finished before the kill)"}`);
  console.log(`    resumed result equals the uninterrupted run: ${same ? "yes" : "NO"}`);
  console.log(`    report side effect executed exactly once: ${writtenOnce ? "yes" : "NO"}`);
  console.log(
    `    hot tier: ${store.hot ? `hits ${store.stats.hotHits}, errors ${store.stats.hotErrors}` : "off (set REDIS_URL)"}`,
  );
  await store.close();
  return same && writtenOnce && second.code === 0 && final?.isFinished ? 0 : 1;
}

const childAt = process.argv.indexOf("--child");
if (childAt >= 0) {
  child(process.argv[childAt + 1]!).then(
    () => process.exit(0),
    (e: unknown) => {
      console.error(e);
      process.exit(1);
    },
  );
} else {
  main().then(
    (code) => process.exit(code),
    (e: unknown) => {
      console.error(e);
      process.exit(1);
    },
  );
}
