/**
 * The agent process of `npm run demo:agent` (started, killed and restarted
 * by `agent.ts`). It loads the session from SQLite if it exists (else starts
 * a new one), registers one real tool per tool name of the recording, and
 * plays the user's side of the recorded conversation turn by turn, with
 * auto-save after every appended message. After a crash it first finishes
 * the interrupted turn, re-running the tools whose results were lost.
 *
 * Environment: `DEMO_DB` (SQLite file), `DEMO_KEY` (session key),
 * `DEMO_CONVERSATION` (file of the recorded conversation), `DEMO_PROVIDER`,
 * `DEMO_MODEL`, `DEMO_API_KEY_ENV`, `DEMO_KILL_AT_TOOL` (1-based index of the
 * tool call during which this process announces `KILLPOINT` on stdout and
 * waits to be killed), `DEMO_LIVE=1` (tools answer by name, not by call id).
 *
 * @module
 */
import { BaseAgent } from "../agent/base-agent.js";
import type { ToolDefinition } from "../agent/tools.js";
import { SQLiteBackend } from "../backends/sqlite.js";
import { StateNotFoundError } from "../core/errors.js";
import type { OpenAIMessage } from "../core/messages.js";
import { loadState } from "../persistence/api.js";
import { configure } from "../persistence/config.js";
import { readConversation } from "../testing/samples.js";

const env = (name: string): string => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (this process is started by src/demo/agent.ts)`);
  return v;
};
const say = (line: string) => process.stdout.write(`${line}\n`);

const recording = readConversation(env("DEMO_CONVERSATION")).messages as OpenAIMessage[];
const key = env("DEMO_KEY");
const live = process.env.DEMO_LIVE === "1";
const killAt = Number(process.env.DEMO_KILL_AT_TOOL ?? "0");
const backend = new SQLiteBackend({ dbPath: env("DEMO_DB") });
configure({ enabled: true, backend, keyStrategy: "name" });

// recorded tool outputs in order per tool name (live mode)
const outputsByName = new Map<string, string[]>();
const callNames = new Map<string, string>();
const toolNames = new Set<string>();
for (const m of recording) {
  if (m.role === "assistant") {
    for (const c of m.tool_calls ?? []) {
      callNames.set(c.id, c.function.name);
      toolNames.add(c.function.name);
    }
  }
  if (m.role === "tool") {
    const content = typeof m.content === "string" ? m.content : JSON.stringify(m.content);
    const name = callNames.get(m.tool_call_id) ?? "";
    outputsByName.set(name, [...(outputsByName.get(name) ?? []), content]);
  }
}

let agent: BaseAgent;
try {
  agent = await loadState<BaseAgent>(key, { backend });
  const pending = agent.pendingToolCalls();
  say(
    `loaded session ${JSON.stringify(key)}: ${agent.history.length} messages` +
      (pending.length ? `, tool calls without result: ${pending.map((p) => `${p.name}(${p.id})`).join(", ")}` : ""),
  );
} catch (e) {
  if (!(e instanceof StateNotFoundError)) throw e;
  const system = recording[0]?.role === "system" ? [recording[0]] : [];
  agent = new BaseAgent({
    name: key,
    apiProvider: env("DEMO_PROVIDER"),
    modelName: env("DEMO_MODEL"),
    apiKeyEnv: process.env.DEMO_API_KEY_ENV ?? "",
    history: system,
    toolTimeout: 600,
  });
  say(`new session ${JSON.stringify(key)}`);
}
agent.on("persistError", (e) => say(`persistError: ${String(e)}`));

let toolRuns = 0;
const usedByName = new Map<string, number>();
for (const name of toolNames) {
  const tool: ToolDefinition = {
    name,
    description: `recorded tool ${name}`,
    parameters: { type: "object" },
    execute: async (_args, { toolCallId }) => {
      toolRuns++;
      if (killAt > 0 && toolRuns === killAt) {
        say(`KILLPOINT ${name} ${toolCallId}`);
        await new Promise(() => {}); // the demo kills this process here
      }
      if (!live) {
        // call ids repeat within real recordings: find the result that follows THIS assistant message
        const at = agent.history.findLastIndex((m) => m.role === "assistant");
        const out = recording
          .slice(at + 1)
          .find(
            (m): m is Extract<OpenAIMessage, { role: "tool" }> => m.role === "tool" && m.tool_call_id === toolCallId,
          );
        if (out === undefined) throw new Error(`no recorded output for call ${toolCallId} after message ${at}`);
        return typeof out.content === "string" ? out.content : JSON.stringify(out.content);
      }
      const n = usedByName.get(name) ?? 0;
      usedByName.set(name, n + 1);
      return outputsByName.get(name)?.[n] ?? `no recorded output for call #${n + 1} of ${name}`;
    },
  };
  agent.registerTool(tool);
}

const turnOptions = { checkpoint: "message" as const, repair: "rerun" as const, maxRetries: 0 };
const last = agent.history[agent.history.length - 1];
if (agent.pendingToolCalls().length > 0 || (last && last.role !== "assistant" && last.role !== "system")) {
  const r = await agent.resumeTurn(turnOptions);
  say(`resumed the interrupted turn: ${r.toolCalls} tool call(s) run again, ${r.rounds} model call(s)`);
}
// the user's side of the recording, from where the session stands
const userTurns = recording.map((m, i) => ({ m, i })).filter(({ m }) => m.role === "user");
const done = agent.history.filter((m) => m.role === "user").length;
for (const { m, i } of userTurns.slice(done)) {
  if (!live && i === recording.length - 1) {
    // the recording ends with the user's last words: no model answer was recorded
    agent.history.push(m);
    await agent.saveState();
    say(`last user message stored, ${agent.history.length} messages saved`);
    continue;
  }
  const r = await agent.conversationWithTool(m, turnOptions);
  say(`turn: ${r.toolCalls} tool call(s), ${r.rounds} model call(s), ${agent.history.length} messages saved`);
}
say(`FINISHED ${agent.history.length}`);
await backend.close();
