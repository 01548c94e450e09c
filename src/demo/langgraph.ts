/**
 * `npm run demo:langgraph`: a LangGraph.js `StateGraph` (`MessagesAnnotation`,
 * a model node and a tool node) checkpointed with `DumplingsSaver` on SQLite,
 * killed with SIGKILL mid-run and resumed from its last checkpoint.
 *
 * The graph: `agent` calls the local model server (`startModelServer`, real
 * HTTP, OpenAI chat-completions wire format, no network) through the AI SDK
 * (`generateText` with `@ai-sdk/openai-compatible`), the LangChain messages
 * converted to AI SDK messages and the answer back to an `AIMessage`; `tools`
 * is LangGraph's `ToolNode` with one tool, `conversation_stats`, that reads a
 * bundled real conversation (data/trajectories) and takes a while (a
 * simulated slow tool). The scripted model asks for the statistics of a few
 * conversations one at a time, then answers from the tool results it was sent.
 *
 * The demo runs an uninterrupted reference in-process, then runs the same
 * graph on a new thread in a child process (this file with `--child`),
 * SIGKILLs it while a tool is running, prints the checkpoint timeline,
 * resumes the thread in a new child (`stream(null, config)`: LangGraph
 * continues from the last checkpoint), prints the timeline again, and exits
 * non-zero unless the resumed thread's messages equal the reference's and no
 * model request was repeated.
 *
 * Storage: a SQLite file in a temp directory (removed at the end; `--keep`
 * keeps it and prints its path).
 *
 * @module
 */
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { AIMessage, type BaseMessage, HumanMessage } from "@langchain/core/messages";
import { tool as lcTool } from "@langchain/core/tools";
import { END, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { ToolNode, toolsCondition } from "@langchain/langgraph/prebuilt";
import { generateText, jsonSchema, type ModelMessage, tool } from "ai";
import { z } from "zod";
import { DumplingsSaver } from "../langgraph/index.js";
import { type RecordedRequest, startModelServer } from "../testing/model-server.js";
import { loadSampleConversations } from "../testing/samples.js";

const KILL_AT_TOOL = Number(process.env.DEMO_KILL_AT_TOOL ?? 3);
const TOOL_MS = Number(process.env.DEMO_TOOL_MS ?? 400);
const QUESTION_COUNT = 5;
const QUESTION = `Of the first ${QUESTION_COUNT} bundled conversations, which one made the most tool calls?`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (line = "") => process.stdout.write(`${line}\n`);

/** The conversations the scripted model asks about: the first few OpenAI-format ones, by id. */
function conversationIds(): string[] {
  return loadSampleConversations({ protocol: "openai" })
    .slice(0, QUESTION_COUNT)
    .map((c) => c.id);
}

/** The tool's result: statistics of one bundled conversation. */
function conversationStats(id: string): { id: string; messages: number; toolCalls: number; bytes: number } {
  const conv = loadSampleConversations({ protocol: "openai" }).find((c) => c.id === id);
  if (!conv) throw new Error(`no bundled conversation ${id}`);
  let toolCalls = 0;
  for (const m of conv.messages) toolCalls += ((m as { tool_calls?: unknown[] }).tool_calls ?? []).length;
  return { id, messages: conv.messages.length, toolCalls, bytes: conv.bytes };
}

/**
 * The scripted model: asks for the next conversation's statistics until it has
 * them all, then answers from the tool results in the request. The answer
 * depends only on the request, so a repeated request gets the same answer.
 */
function modelTurn(request: RecordedRequest) {
  const ids = conversationIds();
  const messages = (request.body.messages ?? []) as { role: string; content?: unknown }[];
  const results = messages
    .filter((m) => m.role === "tool")
    .map((m) => JSON.parse(String(m.content)) as ReturnType<typeof conversationStats>);
  if (results.length < ids.length) {
    const i = results.length;
    return { toolCalls: [{ id: `call_${i}`, name: "conversation_stats", arguments: { id: ids[i] } }] };
  }
  const top = [...results].sort((a, b) => b.toolCalls - a.toolCalls || a.id.localeCompare(b.id))[0]!;
  const total = results.reduce((n, r) => n + r.messages, 0);
  return {
    text: `${top.id} made the most tool calls (${top.toolCalls}, in ${top.messages} messages); the ${results.length} conversations hold ${total} messages.`,
  };
}

/** LangChain messages as AI SDK messages (text, tool calls and tool results). */
function toModelMessages(messages: BaseMessage[]): ModelMessage[] {
  const names = new Map<string, string>();
  return messages.map((m): ModelMessage => {
    const text = typeof m.content === "string" ? m.content : JSON.stringify(m.content);
    if (m.type === "human") return { role: "user", content: text };
    if (m.type === "system") return { role: "system", content: text };
    if (m.type === "ai") {
      const calls = (m as AIMessage).tool_calls ?? [];
      for (const c of calls) names.set(c.id ?? "", c.name);
      return {
        role: "assistant",
        content: [
          ...(text ? [{ type: "text" as const, text }] : []),
          ...calls.map((c) => ({
            type: "tool-call" as const,
            toolCallId: c.id ?? "",
            toolName: c.name,
            input: c.args,
          })),
        ],
      };
    }
    if (m.type === "tool") {
      const id = (m as unknown as { tool_call_id: string }).tool_call_id;
      return {
        role: "tool",
        content: [
          {
            type: "tool-result",
            toolCallId: id,
            toolName: names.get(id) ?? m.name ?? "unknown",
            output: { type: "text", value: text },
          },
        ],
      };
    }
    throw new Error(`message type ${m.type} is not converted by this demo`);
  });
}

/** The graph: agent ⇄ tools, checkpointed by `checkpointer`. `onTool` is told when a tool starts. */
function buildGraph(modelUrl: string, checkpointer: DumplingsSaver, onTool: (id: string) => void = () => {}) {
  const model = createOpenAICompatible({ name: "local", baseURL: modelUrl, apiKey: "not-a-secret" })("scripted-model");
  const statsTool = lcTool(
    async ({ id }: { id: string }) => {
      onTool(id);
      await sleep(TOOL_MS);
      return JSON.stringify(conversationStats(id));
    },
    {
      name: "conversation_stats",
      description: "Messages, tool calls and bytes of one bundled conversation, by id.",
      schema: z.object({ id: z.string() }),
    },
  );
  const agent = async (state: typeof MessagesAnnotation.State) => {
    const result = await generateText({
      model,
      messages: toModelMessages(state.messages),
      tools: {
        conversation_stats: tool({
          description: statsTool.description,
          inputSchema: jsonSchema<{ id: string }>({
            type: "object",
            properties: { id: { type: "string" } },
            required: ["id"],
          }),
        }),
      },
    });
    return {
      messages: [
        new AIMessage({
          content: result.text,
          tool_calls: result.toolCalls.map((c) => ({
            id: c.toolCallId,
            name: c.toolName,
            args: c.input as Record<string, unknown>,
            type: "tool_call" as const,
          })),
        }),
      ],
    };
  };
  return new StateGraph(MessagesAnnotation)
    .addNode("agent", agent)
    .addNode("tools", new ToolNode([statsTool]))
    .addEdge(START, "agent")
    .addConditionalEdges("agent", toolsCondition, ["tools", END])
    .addEdge("tools", "agent")
    .compile({ checkpointer });
}

const threadConfig = (threadId: string) => ({ configurable: { thread_id: threadId } });

/** Runs (or resumes) one thread, printing a line per finished node; `durability: "sync"` checkpoints before the next step. */
async function runThread(graph: ReturnType<typeof buildGraph>, threadId: string, print: (line: string) => void) {
  const config = threadConfig(threadId);
  const state = await graph.getState(config);
  const resuming = state.next.length > 0;
  print(
    resuming
      ? `RESUME from checkpoint ${state.config.configurable?.checkpoint_id} (step ${state.metadata?.step}, ${state.values.messages?.length ?? 0} messages, next: ${state.next.join(",")})`
      : "START",
  );
  const input = resuming ? null : { messages: [new HumanMessage(QUESTION)] };
  const stream = await graph.stream(input, { ...config, streamMode: "updates", durability: "sync" });
  for await (const update of stream) {
    for (const [node, value] of Object.entries(update as Record<string, { messages?: BaseMessage[] }>)) {
      print(`STEP ${node}: ${(value.messages ?? []).map(describe).join("; ")}`);
    }
  }
}

/** One message in a line. */
function describe(m: BaseMessage): string {
  const text = typeof m.content === "string" ? m.content : JSON.stringify(m.content);
  const calls = m.type === "ai" ? ((m as AIMessage).tool_calls ?? []) : [];
  if (calls.length > 0) return `ai → ${calls.map((c) => `${c.name}(${JSON.stringify(c.args)})`).join(", ")}`;
  const short = text.length > 90 ? `${text.slice(0, 87)}…` : text;
  return `${m.type}: ${short}`;
}

/** Child mode: run or resume one thread, printing one line per step and per tool start. */
async function child(threadId: string): Promise<void> {
  const checkpointer = new DumplingsSaver({ store: { sqlite: { path: process.env.DEMO_DB! } } });
  const graph = buildGraph(process.env.DEMO_MODEL_URL!, checkpointer, (id) =>
    log(`TOOL start conversation_stats ${id}`),
  );
  log(`READY pid ${process.pid}`);
  await runThread(graph, threadId, log);
  await checkpointer.close();
}

function spawnChild(
  env: Record<string, string>,
  threadId: string,
  killAtTool?: number,
): Promise<{ code: number | null; signal: string | null }> {
  return new Promise((resolve, reject) => {
    const self = fileURLToPath(import.meta.url);
    const proc = spawn(process.execPath, [...process.execArgv, self, "--child", threadId], {
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, ...env },
    });
    let buffer = "";
    let tools = 0;
    proc.stdout.on("data", (d: Buffer) => {
      buffer += d.toString();
      for (let nl = buffer.indexOf("\n"); nl >= 0; nl = buffer.indexOf("\n")) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        log(`    [child ${proc.pid}] ${line}`);
        if (line.startsWith("TOOL start")) tools++;
        if (killAtTool !== undefined && tools === killAtTool) {
          log(`    [demo] SIGKILL → child ${proc.pid} while tool call #${tools} is running`);
          proc.kill("SIGKILL");
          killAtTool = undefined;
        }
      }
    });
    proc.once("error", reject);
    proc.once("exit", (code, signal) => resolve({ code, signal }));
  });
}

/** The thread's checkpoints, oldest first, one line each; a rule after `killedAt`. */
async function timeline(graph: ReturnType<typeof buildGraph>, threadId: string, killedAt?: string): Promise<void> {
  const snapshots = [];
  for await (const s of graph.getStateHistory(threadConfig(threadId))) snapshots.push(s);
  snapshots.reverse();
  const t0 = Date.parse(snapshots[0]?.createdAt ?? "") || 0;
  for (const s of snapshots) {
    const messages = (s.values.messages ?? []) as BaseMessage[];
    const last = messages.at(-1);
    const id = String(s.config.configurable?.checkpoint_id ?? "");
    log(
      `    #${String(s.metadata?.step ?? "?").padStart(2)}  ${String(s.metadata?.source ?? "").padEnd(5)} +${String((Date.parse(s.createdAt ?? "") || 0) - t0).padStart(5)} ms  ${String(messages.length).padStart(2)} msgs  next=${(s.next.join(",") || "END").padEnd(6)} ${last ? describe(last) : ""}`,
    );
    if (killedAt !== undefined && id === killedAt) {
      log("    ── SIGKILL here; the checkpoints below were written by a new process resuming from this one ──");
    }
  }
}

/** What two runs must agree on: each message's type, text and tool calls (ids are per run). */
function comparable(messages: BaseMessage[]): string {
  return JSON.stringify(
    messages.map((m) => [
      m.type,
      m.content,
      m.type === "ai" ? ((m as AIMessage).tool_calls ?? []).map((c) => [c.id, c.name, c.args]) : [],
    ]),
  );
}

async function main(): Promise<number> {
  const keep = process.argv.includes("--keep");
  const dir = mkdtempSync(path.join(tmpdir(), "dumplings-langgraph-demo-"));
  const db = path.join(dir, "graph.db");
  const server = await startModelServer({ handler: modelTurn });
  const checkpointer = new DumplingsSaver({ store: { sqlite: { path: db } } });
  const graph = buildGraph(server.url, checkpointer);
  const base = `thread-${Date.now().toString(36)}`;
  try {
    log(`dumplings-ai LangGraph demo — DumplingsSaver on SQLite ${db}; model server ${server.url}`);
    log(`question: ${QUESTION}`);

    log("\n1. Reference: the graph uninterrupted, in this process");
    await runThread(graph, `${base}-reference`, (line) => log(`    ${line}`));
    const referenceRequests = server.count;
    const reference = (await graph.getState(threadConfig(`${base}-reference`))).values.messages as BaseMessage[];
    log(`    finished: ${reference.length} messages, ${referenceRequests} model requests`);

    const env = { DEMO_DB: db, DEMO_MODEL_URL: server.url };
    log(
      `\n2. The same graph on thread ${base} in a child process, killed with SIGKILL during tool call #${KILL_AT_TOOL}`,
    );
    const first = await spawnChild(env, base, KILL_AT_TOOL);
    log(`    child exited: ${first.signal ?? `code ${first.code}`}`);
    const atKill = await graph.getState(threadConfig(base));
    const killedAt = String(atKill.config.configurable?.checkpoint_id ?? "");
    log("\n   Timeline before resuming:");
    await timeline(graph, base);
    if (atKill.next.length > 0) {
      log(`    (node ${atKill.next.join(",")} was in flight when the process died; it runs again on resume)`);
    }

    log("\n3. Resume: a new child process continues the thread from its last checkpoint");
    const second = await spawnChild(env, base);
    log(`    child exited: ${second.signal ?? `code ${second.code}`}`);
    log("\n   Timeline after resuming:");
    await timeline(graph, base, killedAt);

    const final = await graph.getState(threadConfig(base));
    const messages = (final.values.messages ?? []) as BaseMessage[];
    const same = comparable(messages) === comparable(reference);
    const childRequests = server.count - referenceRequests;
    const answer = messages.at(-1);
    log(`\n4. Result\n\n    ${answer ? `${answer.type}: ${String(answer.content)}` : "(no answer)"}\n`);
    log(`    killed mid-run: ${first.signal === "SIGKILL" ? "yes" : "no (finished before the kill)"}`);
    log(
      `    resumed thread's messages equal the uninterrupted run's (${messages.length} messages): ${same ? "yes" : "NO"}`,
    );
    log(
      `    model requests: ${childRequests} across both processes, ${referenceRequests} uninterrupted — none repeated: ${childRequests === referenceRequests ? "yes" : "NO"}`,
    );
    let checkpoints = 0;
    for await (const _ of checkpointer.list(threadConfig(base))) checkpoints++;
    const bytes = [db, `${db}-wal`].reduce((n, f) => n + (existsSync(f) ? statSync(f).size : 0), 0);
    log(`    checkpoints of the thread: ${checkpoints}; SQLite file and WAL: ${bytes} bytes (both threads)`);
    if (keep) log(`    kept: ${db}`);
    const ok = same && childRequests === referenceRequests && first.signal === "SIGKILL" && second.code === 0;
    return ok && final.next.length === 0 ? 0 : 1;
  } finally {
    await checkpointer.close();
    await server.close();
    if (!keep) rmSync(dir, { recursive: true, force: true });
  }
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
