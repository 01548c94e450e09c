/**
 * The conversation loop: one call of `conversationWithTool` appends the user
 * message, calls the model through the AI SDK, runs every tool the model asks
 * for (function-calling mode) and calls the model again, until the model
 * answers without tool calls or `maxRounds` is reached.
 *
 * Crash safety. The history stays in the protocol's own shape (OpenAI chat
 * or Anthropic Messages) and grows message by message: user message →
 * assistant message (complete, with its tool calls) → the tool results of
 * that round → … . It is repaired before every model call (see `repair.ts`),
 * so a process that died at any point leaves a history the next turn can
 * send. With `checkpoint: "message"` the agent is saved after every appended
 * message, so a SIGKILL loses at most the message being produced.
 *
 * Streaming rule (PB-05, vercel/ai#10638). When a streamed answer stops
 * before the model finished (connection dropped, abort, provider error), the
 * text the user already saw is kept as an assistant message marked
 * `partial: true` (a field the providers never see), or nothing is kept when
 * no text was streamed. Tool calls of an unfinished stream are dropped: they
 * were never executed and are never stored, so no half tool call can reach
 * the history. The turn then throws {@link StreamInterruptedError} (after
 * the auto-save).
 *
 * Auto-save. The OUTERMOST call on an agent instance calls `persist("turn")`
 * once when it returns or throws; nested calls (a tool that calls the same
 * agent) do not, and run on a branch of the history (see `nestedTurn`). A
 * call is nested when it runs inside the async context of a turn of the same
 * agent (`AsyncLocalStorage`), so concurrent turns of different agents never
 * interfere, and two concurrent top-level turns of ONE agent run one after
 * the other (each saved once) instead of interleaving their messages.
 *
 * @module
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { randomUUID } from "node:crypto";
import { APICallError, generateText, type LanguageModel, type ModelMessage, streamText } from "ai";
import { DumplingsError } from "../core/errors.js";
import { log } from "../core/logger.js";
import type { AnthropicMessage, Message, OpenAIMessage, Protocol } from "../core/messages.js";
import { checkOptions, optionKeys } from "../core/options.js";
import type { AgentConfig } from "../core/state.js";
import { fromModelMessages, toModelMessages } from "./ai-sdk-messages.js";
import { createLanguageModel } from "./model.js";
import { type PendingToolCall, type RepairAction, type RepairPolicy, repairHistory } from "./repair.js";
import { runToolCalls, type ToolCallOutcome, type ToolDefinition, type ToolHook, toAiSdkTools } from "./tools.js";
import { toWellFormedDeep } from "./well-formed.js";

/** The keys of {@link TurnOptions}: any other is an `InvalidOptionError`. */
const TURN_OPTIONS = optionKeys<TurnOptions>({
  stream: true,
  onToken: true,
  maxRounds: true,
  signal: true,
  repair: true,
  checkpoint: true,
  maxRetries: true,
});

/** What the loop needs from an agent (`BaseAgent` and `AnthropicAgent` provide it). */
export interface ConversationHost {
  /** Shape of `history`. */
  readonly protocol: Protocol;
  /** Model and tool settings. */
  config: AgentConfig;
  /** The conversation; the loop appends to it (and may replace it with a repaired copy). */
  history: Message[];
  /** Task id of the running/last turn. */
  currentTaskId: string | null;
  /** Events: `repair` ({@link RepairAction}[]), `hookError`, `checkpointError`. */
  emit(event: string | symbol, ...args: unknown[]): boolean;
}

/** Options of one turn. */
export interface TurnOptions {
  /** Stream the answer. @default config.stream */
  stream?: boolean;
  /** Called with each text delta while the answer streams (also when `stream` is false: once with the whole text). */
  onToken?: (delta: string) => void;
  /** Model calls allowed in this turn before {@link MaxRoundsError}. @default 16 */
  maxRounds?: number;
  /** Aborts the model call or the tools in flight. */
  signal?: AbortSignal;
  /** How a tool call left without result by a crash is repaired. @default "interrupted" */
  repair?: RepairPolicy;
  /** `"turn"`: save once at the end of the outermost turn; `"message"`: also after every appended message. @default "turn" */
  checkpoint?: "turn" | "message";
  /** Retries of a failed model call (429/5xx) by the AI SDK. @default 2 */
  maxRetries?: number;
}

/** What the agent passes to the loop besides the options. */
export interface TurnRuntime {
  /** Tools the model may call, by name. */
  tools: ReadonlyMap<string, ToolDefinition>;
  /** Tool-call hooks. */
  hooks: readonly ToolHook[];
  /**
   * Saves the agent: `"turn"` at the end of the outermost turn (must never
   * throw; failures are the persistence layer's to report), `"checkpoint"`
   * after an appended message in `checkpoint: "message"` mode. Resolves to
   * false when the save failed.
   */
  persist?: (kind: "turn" | "checkpoint") => Promise<boolean>;
  /**
   * Runs once before each outermost turn (after the previous turn of the agent ended), before the
   * history is read: the persistence layer continues a stored session there (see `continueStoredSession`).
   * Must never throw: failures are the persistence layer's to report.
   */
  prepare?: () => Promise<void>;
  /** Builds the model (tests and the durable layer may inject one). @default {@link createLanguageModel} from the config */
  model?: () => LanguageModel;
}

/** Result of a turn. */
export interface TurnResult {
  /** The final assistant message (as stored in the history). */
  message: Message;
  /** Its text. */
  text: string;
  /** Task id of the turn. */
  taskId: string;
  /** Model calls made. */
  rounds: number;
  /** Tool calls run. */
  toolCalls: number;
  /** Tokens used, summed over the rounds. */
  usage: { inputTokens: number; outputTokens: number };
}

/** The model kept asking for tools for more than `maxRounds` calls. Code `MAX_ROUNDS`. Thrown after the auto-save. */
export class MaxRoundsError extends DumplingsError {
  readonly maxRounds: number;
  readonly taskId: string;
  constructor(maxRounds: number, taskId: string) {
    super("MAX_ROUNDS", `turn ${taskId} reached maxRounds=${maxRounds} model calls without a final answer`);
    this.maxRounds = maxRounds;
    this.taskId = taskId;
  }
}

/** The model call failed (HTTP error after retries, network failure). Code `MODEL_CALL`; `status` when HTTP. */
export class ModelCallError extends DumplingsError {
  readonly status: number | undefined;
  constructor(message: string, options: { status?: number; cause?: unknown }) {
    super("MODEL_CALL", message, { cause: options.cause });
    this.status = options.status;
  }
}

/** A streamed answer stopped before the model finished. `partialText` is what was kept (may be ""). Code `STREAM_INTERRUPTED`. */
export class StreamInterruptedError extends DumplingsError {
  readonly partialText: string;
  constructor(partialText: string, cause: unknown) {
    super(
      "STREAM_INTERRUPTED",
      `the streamed answer stopped before it finished (${partialText ? `kept ${partialText.length} characters marked partial` : "nothing kept"}): ${describeError(cause)}`,
      { cause },
    );
    this.partialText = partialText;
  }
}

/** A mid-turn checkpoint could not be written (twice): the turn stops rather than call the model on unsaved progress. Code `CHECKPOINT_FAILED`. */
export class CheckpointFailedError extends DumplingsError {
  constructor(taskId: string) {
    super(
      "CHECKPOINT_FAILED",
      `turn ${taskId}: the checkpoint after a tool round could not be saved (see the persistError event); stopping before the next model call`,
    );
  }
}

function describeError(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

const depths = new WeakMap<object, number>();
/** The agents whose turn the current async context runs inside (to tell a nested call from a concurrent one). */
const activeTurns = new AsyncLocalStorage<ReadonlySet<object>>();
/** Per agent: the promise the next top-level turn waits for. */
const turnLocks = new WeakMap<object, Promise<void>>();
const loggedHookErrors = new WeakMap<object, Set<string>>();

/** Emits `hookError`; with no listener, logs it on stderr once per distinct message per agent. */
function reportHookError(host: ConversationHost, error: unknown, event: { toolName: string; type: string }): void {
  if (host.emit("hookError", error, event)) return;
  const message = `${event.type} hook of tool ${event.toolName} threw: ${describeError(error)}`;
  let seen = loggedHookErrors.get(host);
  if (!seen) {
    seen = new Set();
    loggedHookErrors.set(host, seen);
  }
  if (seen.has(message)) return;
  seen.add(message);
  log("error", message, { tool: event.toolName, hook: event.type });
}
/** Index of the assistant message whose tool calls are running, per agent. */
const inflight = new WeakMap<object, number>();

/**
 * Current nesting depth of `conversationWithTool` on an agent (0: no turn running).
 *
 * @param host - the agent
 * @returns the depth
 */
export function turnDepth(host: object): number {
  return depths.get(host) ?? 0;
}

function userMessage(protocol: Protocol, input: string | Message): Message {
  if (typeof input !== "string") return input;
  return protocol === "openai"
    ? ({ role: "user", content: input } as OpenAIMessage)
    : ({ role: "user", content: [{ type: "text", text: input }] } as AnthropicMessage);
}

/**
 * The text of an assistant message of either protocol.
 *
 * @param message - an assistant message
 * @returns its text parts joined ("" when it has none)
 */
export function messageText(message: Message | undefined): string {
  const content = (message as { content?: unknown } | undefined)?.content;
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .filter((b: { type?: string }) => b.type === "text")
    .map((b: { text?: string }) => b.text ?? "")
    .join("");
}

function toolResultMessages(protocol: Protocol, outcomes: readonly ToolCallOutcome[]): Message[] {
  if (protocol === "openai") {
    // `name` (the tool's name) is kept in the stored message, as recorded OpenAI traces do; it is not sent
    return outcomes.map(
      (o) => ({ role: "tool", tool_call_id: o.id, name: o.name, content: o.content }) as OpenAIMessage,
    );
  }
  return [
    {
      role: "user",
      content: outcomes.map((o) => ({
        type: "tool_result",
        tool_use_id: o.id,
        content: o.content,
        ...(o.status === "ok" ? {} : { is_error: true }),
      })),
    } as AnthropicMessage,
  ];
}

function callsOf(protocol: Protocol, message: Message): PendingToolCall[] {
  const m = message as Record<string, unknown>;
  if (protocol === "openai") {
    return ((m.tool_calls as { id: string; function: { name: string; arguments: string } }[] | undefined) ?? []).map(
      (c) => ({ index: -1, id: c.id, name: c.function.name, arguments: c.function.arguments }),
    );
  }
  if (!Array.isArray(m.content)) return [];
  return (m.content as { type: string; id?: string; name?: string; input?: unknown }[])
    .filter((b) => b.type === "tool_use")
    .map((b) => ({ index: -1, id: String(b.id), name: String(b.name), arguments: JSON.stringify(b.input ?? {}) }));
}

/**
 * Runs one turn of the conversation (see the module comment for the rules).
 *
 * @param host - the agent (its `history`, `config`, `currentTaskId` are read and updated)
 * @param input - the user's text or message; `null` continues the history as it is (after a crash:
 *   repairs it, re-runs pending tools with `repair: "rerun"`, and calls the model)
 * @param options - stream, onToken, maxRounds (default 16), signal, repair policy, checkpoint mode, maxRetries
 * @param runtime - tools, hooks, persistence callback and model factory supplied by the agent
 * @returns the final assistant message, its text, the task id, rounds, tool calls and token usage
 * @throws {MaxRoundsError} after `maxRounds` model calls without a final answer (after saving)
 * @throws {ModelCallError} when the model call fails after its retries (after saving)
 * @throws {StreamInterruptedError} when a streamed answer stops early (after keeping the partial text and saving)
 * @throws {CheckpointFailedError} in `checkpoint: "message"` mode when progress cannot be saved
 * @example
 * const { text } = await conversationWithTool(agent, "What is 2+2?", {}, { tools: new Map(), hooks: [] });
 */
export async function conversationWithTool(
  host: ConversationHost,
  input: string | Message | null,
  options: TurnOptions = {},
  runtime: TurnRuntime = { tools: new Map(), hooks: [] },
): Promise<TurnResult> {
  const chain = activeTurns.getStore();
  checkOptions("conversationWithTool", options, TURN_OPTIONS);
  if (chain?.has(host)) return nestedTurn(host, input, options, runtime);
  // Top-level turns of one agent run one after the other (a second caller waits), so that each
  // is an outermost turn with its own save and the history never interleaves two turns.
  const previous = turnLocks.get(host) ?? Promise.resolve();
  let release: () => void = () => {};
  const mine = new Promise<void>((resolve) => {
    release = resolve;
  });
  const tail = previous.then(() => mine);
  turnLocks.set(host, tail);
  await previous;
  try {
    if (runtime.prepare) await runtime.prepare();
  } catch (e) {
    release();
    if (turnLocks.get(host) === tail) turnLocks.delete(host);
    throw e;
  }
  depths.set(host, 1);
  const taskId = randomUUID();
  host.currentTaskId = taskId;
  try {
    return await activeTurns.run(new Set([...(chain ?? []), host]), () =>
      runTurn(host, input, options, runtime, taskId),
    );
  } finally {
    depths.delete(host);
    try {
      if (runtime.persist) await runtime.persist("turn");
    } finally {
      release();
      if (turnLocks.get(host) === tail) turnLocks.delete(host);
    }
  }
}

/**
 * A nested turn (a tool calling its own agent, found through the async context of the running
 * turn) runs on a branch: the conversation up to the round in progress. Its messages stay out of
 * the stored history (its answer gets there as the calling tool's result), which therefore never
 * has a user turn inside a tool round; it does not save.
 */
async function nestedTurn(
  host: ConversationHost,
  input: string | Message | null,
  options: TurnOptions,
  runtime: TurnRuntime,
): Promise<TurnResult> {
  depths.set(host, turnDepth(host) + 1);
  const outerTaskId = host.currentTaskId;
  const taskId = randomUUID();
  host.currentTaskId = taskId;
  const start = inflight.get(host);
  const branch: ConversationHost = {
    protocol: host.protocol,
    config: host.config,
    history: host.history.slice(0, start ?? host.history.length),
    currentTaskId: taskId,
    emit: (event, ...args) => host.emit(event, ...args),
  };
  const { persist: _persist, ...branchRuntime } = runtime;
  try {
    return await runTurn(branch, input, options, branchRuntime, taskId);
  } finally {
    const left = turnDepth(host) - 1;
    if (left > 0) depths.set(host, left);
    else depths.delete(host);
    host.currentTaskId = outerTaskId;
  }
}

async function runTurn(
  host: ConversationHost,
  input: string | Message | null,
  options: TurnOptions,
  runtime: TurnRuntime,
  taskId: string,
): Promise<TurnResult> {
  const protocol = host.protocol;
  const config = host.config;
  const maxRounds = options.maxRounds ?? 16;
  const checkpointEach = options.checkpoint === "message" && runtime.persist !== undefined;
  const usage = { inputTokens: 0, outputTokens: 0 };
  let toolCalls = 0;

  const checkpoint = async () => {
    if (!checkpointEach || !runtime.persist) return;
    if (await runtime.persist("checkpoint")) return;
    if (await runtime.persist("checkpoint")) return; // one retry (PB-03: retry the lost write before going on)
    const error = new CheckpointFailedError(taskId);
    host.emit("checkpointError", error);
    throw error;
  };
  const append = async (...messages: Message[]) => {
    host.history.push(...messages);
    await checkpoint();
  };
  const runTools = async (calls: PendingToolCall[], rejected?: ReadonlyMap<string, string>) => {
    const at = host.history.findLastIndex((m) => m.role === "assistant");
    inflight.set(host, at);
    const outcomes = await runToolCalls(
      calls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })),
      {
        tools: runtime.tools,
        maxWorkers: config.toolMaxWorkers,
        timeoutMs: config.toolTimeout * 1000,
        taskId,
        hooks: runtime.hooks,
        onHookError: (error, event) => reportHookError(host, error, event),
        ...(rejected ? { rejected } : {}),
        ...(options.signal ? { signal: options.signal } : {}),
      },
    );
    inflight.delete(host);
    toolCalls += outcomes.length;
    await append(...toolResultMessages(protocol, outcomes));
  };

  // 1. repair what a crash may have left, re-running pending tools when asked
  const repaired = repairHistory(protocol, host.history, options.repair ?? "interrupted");
  if (repaired.actions.length > 0 || repaired.pending.length > 0) {
    host.history = repaired.history;
    if (repaired.actions.length > 0) host.emit("repair", repaired.actions satisfies RepairAction[]);
  }
  if (repaired.pending.length > 0) {
    if (config.fcModel) await runTools(repaired.pending);
    else {
      const fallback = repairHistory(protocol, host.history, "interrupted");
      host.history = fallback.history;
      host.emit("repair", fallback.actions);
    }
  }

  // 2. the user message
  if (input !== null) await append(userMessage(protocol, input));

  // 3. rounds
  const tools = config.fcModel && runtime.tools.size > 0 ? toAiSdkTools(runtime.tools) : undefined;
  const stream = options.stream ?? config.stream;
  for (let round = 1; round <= maxRounds; round++) {
    const model = runtime.model ? runtime.model() : await createLanguageModel(config, protocol);
    // Storage keeps lone surrogates exactly; the provider request never carries one (pb-06).
    const messages = toWellFormedDeep(toModelMessages(protocol, host.history));
    // A leading system message of the history goes in the AI SDK's `system` option (the same first
    // message on the wire); otherwise the configured prompt does.
    const first = messages[0];
    const leadingSystem =
      first?.role === "system" && !(first.providerOptions?.dumplings as { role?: string } | undefined)?.role
        ? first.content
        : undefined;
    if (leadingSystem !== undefined) messages.shift();
    const system = toWellFormedDeep(leadingSystem ?? (config.prompt || undefined));
    const request = {
      model,
      messages,
      ...(system !== undefined ? { system } : {}),
      ...(tools ? { tools } : {}),
      maxOutputTokens: config.maxTokens,
      maxRetries: options.maxRetries ?? 2,
      ...(options.signal ? { abortSignal: options.signal } : {}),
    };
    const produced = stream ? await streamRound(host, request, options) : await generateRound(request, options);
    usage.inputTokens += produced.usage.inputTokens;
    usage.outputTokens += produced.usage.outputTokens;
    const assistant = fromModelMessages(protocol, produced.messages).filter((m) => m.role === "assistant");
    const message = assistant[assistant.length - 1];
    const calls = message && config.fcModel ? callsOf(protocol, message) : [];
    if (message && (calls.length > 0 || messageText(message) !== "" || hasThinking(message))) await append(message);
    if (calls.length === 0) {
      // a model that answered nothing: reported as an empty answer, never stored (no empty assistant message)
      const finalMessage = message ?? ({ role: "assistant", content: "" } as Message);
      return { message: finalMessage, text: messageText(finalMessage), taskId, rounds: round, toolCalls, usage };
    }
    await runTools(calls, produced.rejected);
  }
  throw new MaxRoundsError(maxRounds, taskId);
}

function hasThinking(message: Message): boolean {
  const c = (message as { content?: unknown }).content;
  return Array.isArray(c) && c.some((b: { type?: string }) => b.type === "thinking" || b.type === "redacted_thinking");
}

type Request = Parameters<typeof generateText>[0] & { messages: ModelMessage[] };
type Produced = {
  messages: ModelMessage[];
  usage: { inputTokens: number; outputTokens: number };
  /** Tool calls the AI SDK found invalid (bad JSON, schema mismatch), by id, with its message. */
  rejected: Map<string, string>;
};

function rejectedOf(parts: readonly { type: string; toolCallId?: string; error?: unknown }[]): Map<string, string> {
  const rejected = new Map<string, string>();
  for (const p of parts) {
    if (p.type === "tool-error" && p.toolCallId) rejected.set(p.toolCallId, describeError(p.error));
  }
  return rejected;
}

function toModelCallError(e: unknown): ModelCallError {
  if (e instanceof ModelCallError) return e;
  const api = APICallError.isInstance(e)
    ? e
    : APICallError.isInstance((e as { lastError?: unknown })?.lastError)
      ? (e as { lastError: APICallError }).lastError
      : undefined;
  return new ModelCallError(
    `model call failed${api?.statusCode ? ` with HTTP ${api.statusCode}` : ""}: ${describeError(e)}`,
    {
      ...(api?.statusCode ? { status: api.statusCode } : {}),
      cause: e,
    },
  );
}

async function generateRound(request: Request, options: TurnOptions): Promise<Produced> {
  try {
    const result = await generateText(request);
    if (result.text) options.onToken?.(result.text);
    return {
      messages: result.response.messages,
      usage: { inputTokens: result.usage.inputTokens ?? 0, outputTokens: result.usage.outputTokens ?? 0 },
      rejected: rejectedOf(result.content),
    };
  } catch (e) {
    throw toModelCallError(e);
  }
}

async function streamRound(host: ConversationHost, request: Request, options: TurnOptions): Promise<Produced> {
  let text = "";
  let failure: unknown;
  let finished = false;
  const errors: { type: string; toolCallId?: string; error?: unknown }[] = [];
  const result = streamText({ ...request, onError: () => {} });
  try {
    for await (const part of result.fullStream) {
      if (part.type === "text-delta") {
        text += part.text;
        options.onToken?.(part.text);
      } else if (part.type === "tool-error") errors.push(part);
      else if (part.type === "error") failure = part.error;
      else if (part.type === "abort") failure = new Error("the model call was aborted");
      else if (part.type === "finish") finished = true;
    }
  } catch (e) {
    failure = e;
  }
  if (failure === undefined && finished) {
    try {
      const response = await result.response;
      const u = await result.usage;
      return {
        messages: response.messages,
        usage: { inputTokens: u.inputTokens ?? 0, outputTokens: u.outputTokens ?? 0 },
        rejected: rejectedOf(errors),
      };
    } catch (e) {
      failure = e;
    }
  }
  // The stream stopped early: keep what the user saw, marked partial; drop unfinished tool calls.
  if (text === "" && failure !== undefined && !(failure instanceof Error && failure.name === "AbortError")) {
    const error = toModelCallError(failure);
    if (error.status !== undefined) throw error; // an HTTP error before any token: a plain failed call
  }
  if (text !== "") {
    const partial =
      host.protocol === "openai"
        ? ({ role: "assistant", content: text, partial: true } as OpenAIMessage)
        : ({ role: "assistant", content: [{ type: "text", text }], partial: true } as AnthropicMessage);
    host.history.push(partial);
  }
  throw new StreamInterruptedError(text, failure ?? new Error("the stream ended without a finish event"));
}

/**
 * Runs a turn and exposes its streamed tokens as an async iterator.
 *
 * @param run - starts the turn with the given `onToken` callback (e.g. `(onToken) => agent.conversationWithTool(input, { stream: true, onToken })`)
 * @returns `tokens` (async iterable of text deltas, ends with the turn) and `result` (the turn's promise)
 * @example
 * const { tokens, result } = streamTurn((onToken) => agent.conversationWithTool("hi", { stream: true, onToken }));
 * for await (const t of tokens) process.stdout.write(t);
 * await result;
 */
export function streamTurn<T>(run: (onToken: (delta: string) => void) => Promise<T>): {
  tokens: AsyncIterable<string>;
  result: Promise<T>;
} {
  const queue: string[] = [];
  let done = false;
  let wake: (() => void) | undefined;
  const notify = () => {
    wake?.();
    wake = undefined;
  };
  const result = run((delta) => {
    queue.push(delta);
    notify();
  }).finally(() => {
    done = true;
    notify();
  });
  result.catch(() => {}); // the caller observes the rejection through `result`
  const tokens: AsyncIterable<string> = {
    async *[Symbol.asyncIterator]() {
      while (true) {
        if (queue.length > 0) {
          yield queue.shift() as string;
          continue;
        }
        if (done) return;
        await new Promise<void>((r) => {
          wake = r;
        });
      }
    },
  };
  return { tokens, result };
}
