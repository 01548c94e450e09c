/**
 * `npm run demo:agent`: an agent replays a real recorded conversation with no
 * network, is killed with SIGKILL in the middle of a tool call, and resumes
 * from its saved state to the same final history as the recording.
 *
 * - A local model server (real HTTP, the OpenAI chat-completions wire
 *   protocol) plays the recorded assistant turns: for each request it checks
 *   that the conversation sent so far is the recording's, and answers with
 *   the recorded next assistant message (text or tool calls).
 * - The agent runs in a child process (`agent-child.ts`) whose registered
 *   tools return the recorded tool outputs; every appended message is saved
 *   to SQLite.
 * - The demo SIGKILLs the child while a tool call is running, starts a new
 *   child, which loads the session, re-runs the interrupted tool, and plays
 *   the rest of the conversation.
 * - The demo exits 0 only if the saved final history equals the recording.
 *
 * Options: `--conversation ID` (a bundled OpenAI-protocol conversation with
 * tool calls; default the first taubench one), `--kill-at N` (the N-th tool
 * call; default the middle one), `--keep` (keep the session database).
 * `--provider URL --model NAME [--api-key-env VAR]` runs the same demo
 * against a live model instead: the tools answer with the recorded outputs by
 * tool name, and success means the session resumed to a valid history with
 * every user turn of the recording (a live model's words differ).
 *
 * @module
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual, parseArgs } from "node:util";
import { findPendingToolCalls, isHistoryValid } from "../agent/repair.js";
import { SQLiteBackend } from "../backends/sqlite.js";
import type { OpenAIMessage } from "../core/messages.js";
import {
  type ModelServer,
  type RecordedRequest,
  type ScriptedTurn,
  startModelServer,
} from "../testing/model-server.js";
import { loadSampleConversations, type SampleConversation } from "../testing/samples.js";

const { values: args } = parseArgs({
  options: {
    conversation: { type: "string" },
    "kill-at": { type: "string" },
    provider: { type: "string" },
    model: { type: "string" },
    "api-key-env": { type: "string" },
    keep: { type: "boolean", default: false },
  },
});

const log = (line = "") => process.stdout.write(`${line}\n`);

function toolCallCount(messages: readonly OpenAIMessage[]): number {
  return messages.reduce((n, m) => n + (m.role === "assistant" ? (m.tool_calls?.length ?? 0) : 0), 0);
}

function pickConversation(): SampleConversation {
  const all = loadSampleConversations({ protocol: "openai" });
  const wanted = args.conversation;
  const conv = wanted
    ? all.find((c) => c.id === wanted)
    : all.find((c) => c.id.startsWith("taubench-") && toolCallCount(c.messages as OpenAIMessage[]) >= 2);
  if (!conv) {
    throw new Error(
      `no bundled conversation ${wanted ? JSON.stringify(wanted) : "with tool calls"}; known: ${all.map((c) => c.id).join(", ")}`,
    );
  }
  return conv;
}

function text(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p: { text?: string }) => p.text ?? "").join("");
  return "";
}

/** The recorded model: answers request n with the recorded assistant message that follows its n messages. */
function recordedModel(recording: readonly OpenAIMessage[]) {
  return (request: RecordedRequest): ScriptedTurn => {
    const sent = (request.body.messages ?? []) as OpenAIMessage[];
    for (const [i, m] of sent.entries()) {
      const r = recording[i];
      const same =
        r !== undefined &&
        r.role === m.role &&
        (m.role === "assistant" || text(r.content) === text(m.content)) &&
        (m.role !== "tool" || (r.role === "tool" && r.tool_call_id === m.tool_call_id));
      if (!same) return { error: { status: 400, message: `request diverges from the recording at message ${i}` } };
    }
    const next = recording[sent.length];
    if (next?.role !== "assistant") {
      return { error: { status: 400, message: `the recording has no assistant message at ${sent.length}` } };
    }
    return {
      ...(typeof next.content === "string" && next.content !== "" ? { text: next.content } : {}),
      toolCalls: (next.tool_calls ?? []).map((c) => ({
        id: c.id,
        name: c.function.name,
        arguments: c.function.arguments,
      })),
    };
  };
}

interface ChildRun {
  code: number | null;
  signal: NodeJS.Signals | null;
}

function runChild(env: Record<string, string>, onLine: (line: string, kill: () => void) => void): Promise<ChildRun> {
  const here = fileURLToPath(import.meta.url);
  const ts = here.endsWith(".ts");
  const child = spawn(
    process.execPath,
    [...(ts ? ["--import", "tsx"] : []), path.join(path.dirname(here), `agent-child${ts ? ".ts" : ".js"}`)],
    {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  let buffer = "";
  child.stdout.on("data", (chunk: Buffer) => {
    buffer += chunk.toString("utf8");
    let nl = buffer.indexOf("\n");
    while (nl >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      onLine(line, () => child.kill("SIGKILL"));
      nl = buffer.indexOf("\n");
    }
  });
  return new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
}

async function main(): Promise<number> {
  const conv = pickConversation();
  const recording = conv.messages as OpenAIMessage[];
  const live = args.provider !== undefined;
  if (live && !args.model) throw new Error("--provider needs --model");
  const totalTools = toolCallCount(recording);
  const killAt = Number(args["kill-at"] ?? Math.max(1, Math.ceil(totalTools / 2)));
  const dir = mkdtempSync(path.join(tmpdir(), "dumplings-demo-agent-"));
  const db = path.join(dir, "sessions.db");
  const key = "demo-session";
  let server: ModelServer | undefined;
  const started = performance.now();
  try {
    log(`dumplings-ai agent demo: ${conv.id} (${recording.length} messages, ${totalTools} tool calls)`);
    let provider: string;
    if (live) provider = args.provider as string;
    else {
      server = await startModelServer({ handler: recordedModel(recording) });
      provider = `${server.url}/chat/completions`;
      log(`local model server (OpenAI wire protocol, recorded answers): ${provider}`);
    }
    const env = {
      DEMO_DB: db,
      DEMO_KEY: key,
      DEMO_CONVERSATION: conv.file,
      DEMO_PROVIDER: provider,
      DEMO_MODEL: args.model ?? "recorded-gpt-4o",
      DEMO_API_KEY_ENV: args["api-key-env"] ?? "",
      ...(live ? { DEMO_LIVE: "1" } : {}),
    };

    log(`\n[1] agent process starts; it will be killed during tool call #${killAt}`);
    let killedDuring: string | undefined;
    const first = await runChild({ ...env, DEMO_KILL_AT_TOOL: String(killAt) }, (line, kill) => {
      log(`    child: ${line}`);
      if (line.startsWith("KILLPOINT")) {
        killedDuring = line.slice("KILLPOINT ".length);
        log(`    demo: SIGKILL while tool ${killedDuring} is running`);
        kill();
      }
    });
    if (first.signal !== "SIGKILL") {
      log(
        `the first agent process ended without being killed (code ${first.code}); is --kill-at beyond the conversation?`,
      );
      return 1;
    }

    const inspect = new SQLiteBackend({ dbPath: db });
    const saved = await inspect.load(key);
    await inspect.close();
    const pending = saved ? findPendingToolCalls("openai", saved.history) : [];
    log(
      `\n[2] saved state after the kill: ${saved?.history.length ?? 0} messages; ` +
        (pending.length
          ? `tool call(s) without result: ${pending.map((p) => `${p.name}(${p.id})`).join(", ")} — repaired on resume`
          : "nothing pending"),
    );

    log("\n[3] a new agent process resumes the session");
    const second = await runChild(env, (line) => log(`    child: ${line}`));
    if (second.code !== 0) {
      log(`the resumed agent process failed (code ${second.code}, signal ${second.signal})`);
      return 1;
    }

    const check = new SQLiteBackend({ dbPath: db });
    const final = (await check.load(key))?.history ?? [];
    await check.close();
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    log(`\n[4] final saved history: ${final.length} messages; recording: ${recording.length} messages`);
    if (server) log(`    model requests served: ${server.count}; wall time ${seconds}s`);
    if (live) {
      const ok =
        isHistoryValid("openai", final) &&
        final.filter((m) => m.role === "user").length === recording.filter((m) => m.role === "user").length;
      log(
        ok
          ? "OK: the session resumed to a valid history with every user turn"
          : "FAIL: the resumed history is incomplete or invalid",
      );
      return ok ? 0 : 1;
    }
    const equal = isDeepStrictEqual(final, recording);
    if (!equal) {
      const at = final.findIndex((m, i) => !isDeepStrictEqual(m, recording[i]));
      log(`FAIL: the resumed history differs from the recording at message ${at === -1 ? final.length : at}`);
      log(`    saved:    ${JSON.stringify(final[at])?.slice(0, 300)}`);
      log(`    recorded: ${JSON.stringify(recording[at])?.slice(0, 300)}`);
      return 1;
    }
    log("OK: the resumed session's history equals the recording, message for message");
    return 0;
  } finally {
    await server?.close();
    if (!args.keep) rmSync(dir, { recursive: true, force: true });
    else log(`session database kept: ${db}`);
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error instanceof Error ? (error.stack ?? error.message) : error);
    process.exit(1);
  },
);
