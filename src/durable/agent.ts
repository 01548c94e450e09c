/**
 * A durable agent loop over the AI SDK (`ai@6`): {@link DurableAgent} runs
 * "call the model; run the tools it asked for; repeat" where every model call
 * and every tool call is a journaled step, and tools marked `needsApproval`
 * wait durably for a human (`approval:<toolCallId>` signal). After a crash the
 * loop replays: recorded model answers and tool results are returned from the
 * journal, so the model is not called (or paid) twice for a completed step.
 *
 * Model tokens travel on the run's side channel (`{ type: "token", seq,
 * attempt, round, text }` events); the journal stores one complete assistant
 * message per `llm` step. A retried `llm` attempt first appends
 * `{ type: "reset", seq, attempt }` for the attempt it abandons, so readers
 * drop what that attempt streamed (`readText` in `stream.ts`).
 *
 * Before every `llm` step the history is repaired with the rules of
 * `BaseAgent` (`agent/repair.ts`): a tool call without its result gets an
 * "interrupted" result, an orphaned tool result is removed, an empty assistant
 * message is removed. The repair is a pure function of the history, so a
 * replay builds the same request.
 *
 * A tool's `needsApproval` function is evaluated once per tool call, as a
 * durable step (`needs-approval:<tool>`) whose recorded decision every replay
 * reads: the policy is never asked again for a call it decided, and a policy
 * change or outage after the pause cannot undo a human's decision.
 *
 * Tool results: a tool's `toModelOutput` is applied to the recorded result (on
 * replay too) to build what the model sees; a generator (async iterable) tool's
 * last yielded value is its result; the calls of one round run concurrently, at
 * most `maxParallelTools` at once, each its own step, started in call order so
 * their seqs are deterministic. A result must be JSON: unlike the AI SDK, which
 * sends `JSON.stringify` of any value (a `Date` becomes its ISO string), a
 * `Date`, `BigInt`, `Map` or class instance fails the tool step with a
 * `NonJsonValueError` (`step "tool:<name>" output…`, inside a `StepFailedError`),
 * and the model receives that message as the tool's error: the journal never
 * holds a value that would replay differently. Return `date.toISOString()`.
 *
 * {@link durableTool} wraps a single AI SDK tool so its body is a durable step
 * inside a user's own loop.
 *
 * @module
 */

import {
  type AssistantModelMessage,
  tool as aiTool,
  assistantModelMessageSchema,
  type LanguageModel,
  type ModelMessage,
  type PrepareStepFunction,
  type StepResult,
  type StopCondition,
  streamText,
  type Tool,
  type ToolChoice,
  type ToolResultPart,
  type ToolSet,
} from "ai";
import { INTERRUPTED_RESULT, type RepairAction, repairHistory } from "../agent/repair.js";
import { toWellFormedDeep } from "../agent/well-formed.js";
import { DumplingsError, InvalidOptionError } from "../core/errors.js";
import { assertJson, type JsonObject, type JsonValue } from "../core/json.js";
import type { OpenAIMessage } from "../core/messages.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { schemaProblem, toToolSchema } from "../core/tool-schema.js";
import { type ApprovalWait, approvalSignalName, DEFAULT_REJECTION, readDecision } from "./approvals.js";
import { currentRun, currentStep, type RetryPolicy, step, waitForSignalWith } from "./context.js";
import { StepFailedError } from "./errors.js";
import type { WorkflowFn } from "./run.js";

/** The keys of {@link DurableAgentOptions}: any other is an `InvalidOptionError`. */
/** The keys of `durableTool`'s options. */
const TOOL_OPTIONS = optionKeys<{ name: string; retry?: RetryPolicy }>({ name: true, retry: true });
const SETTINGS_OPTIONS = optionKeys<NonNullable<DurableAgentOptions["settings"]>>({
  temperature: true,
  maxOutputTokens: true,
  topP: true,
  seed: true,
});
const AGENT_OPTIONS = optionKeys<DurableAgentOptions>({
  name: true,
  model: true,
  tools: true,
  system: true,
  maxSteps: true,
  settings: true,
  llmRetry: true,
  toolRetry: true,
  approvalPolicyRetry: true,
  toolChoice: true,
  providerOptions: true,
  maxOutputTokens: true,
  stopWhen: true,
  prepareStep: true,
  maxParallelTools: true,
  toolsContext: true,
  editableArgs: true,
});

/** Options of {@link DurableAgent}. */
export interface DurableAgentOptions {
  /**
   * The program's name: runs started with {@link DurableAgent.workflow} are stored under it, and
   * `dumplings runs` and the web inspector list them by it (a worker registers the agent under the
   * same name). A non-empty string. @default "durable-agent"
   */
  name?: string;
  /** An AI SDK language model, e.g. `createOpenAICompatible({ baseURL, name, apiKey })("model-id")`. */
  model: LanguageModel;
  /** Tools the model may call (AI SDK `tool(...)`s); `needsApproval` makes a call wait for a human. */
  tools?: ToolSet;
  /** System prompt. */
  system?: string;
  /** Maximum model calls per run. @default 20 */
  maxSteps?: number;
  /** JSON call settings passed to `streamText` (e.g. `{ temperature: 0, maxOutputTokens: 512 }`). */
  settings?: { temperature?: number; maxOutputTokens?: number; topP?: number; seed?: number };
  /** Retry policy of each `llm` step (each attempt is one model request). @default { maxAttempts: 3, backoffMs: 500 } */
  llmRetry?: RetryPolicy;
  /** Retry policy of each tool step. @default { maxAttempts: 1 } */
  toolRetry?: RetryPolicy;
  /**
   * Retry policy of each `needs-approval:<tool>` step (one call of a tool's
   * `needsApproval` function). When every attempt throws, the step and the run
   * fail (an operator can retry the run once the policy works again).
   * @default { maxAttempts: 3, backoffMs: 200 }
   */
  approvalPolicyRetry?: RetryPolicy;
  /**
   * Which tool the model must call (AI SDK `ToolChoice`: `"auto"`, `"none"`, `"required"` or
   * `{ type: "tool", toolName }`). Recorded in each `llm` step's input.
   */
  toolChoice?: ToolChoice<ToolSet>;
  /** Provider-specific options of every model call (JSON, e.g. `{ openai: { reasoningEffort: "low" } }`). Recorded. */
  providerOptions?: ProviderOptions;
  /** Maximum tokens the model may generate per call; overrides `settings.maxOutputTokens`. Recorded. */
  maxOutputTokens?: number;
  /**
   * AI SDK stop conditions (`stepCountIs(n)`, `hasToolCall(name)`, or your own
   * `({ steps }) => boolean`), evaluated after each round that ran tools, on the
   * rounds of this run (recorded ones on replay, so the decision replays too).
   * The loop also stops when the model calls no tool, and after `maxSteps` model calls.
   * Each `steps[i]` carries `stepNumber`, `content`, `text`, `toolCalls`,
   * `toolResults`, `finishReason` and `response.messages`; other `StepResult` fields are absent.
   */
  stopWhen?: StopCondition<ToolSet> | StopCondition<ToolSet>[];
  /**
   * Called before each model call (on replay too: keep it a pure function of its
   * arguments) with `{ stepNumber, steps, model, messages }`; its result may set
   * `model`, `system` (a string), `messages`, `toolChoice`, `activeTools` and
   * `providerOptions` for that call only. The effective request is what the `llm`
   * step's input records and hashes.
   */
  prepareStep?: PrepareStepFunction<ToolSet>;
  /**
   * How many tool calls of one round run at once. Each call is its own step; the
   * steps are started in the order of the calls, so their seqs (and the replay) are
   * deterministic. Approvals of a round are decided first, in call order. @default 4
   */
  maxParallelTools?: number;
  /**
   * AI SDK 7's per-tool context, by tool name: `toolsContext[name]` is passed as
   * `context` to that tool's `execute`, its `needsApproval` function and a
   * function `description` (as `generateText({ toolsContext })` does). Not
   * recorded: keep it the same across replays. AI SDK 6 tools ignore it.
   */
  toolsContext?: Record<string, unknown>;
  /**
   * Names of `needsApproval` tools whose arguments a reviewer may correct when approving a call
   * (`approve(runId, toolCallId, { args })`, `dumplings approve --args JSON`, the web inspector). The
   * tool then runs with the corrected arguments, and the model is told so with its result. The wait of
   * such a call records the tool's JSON Schema, so corrected arguments are checked (in any process)
   * before they are recorded; the tool's own schema checks them again when the run resumes. Other
   * tools' approvals refuse `args`. @default []
   */
  editableArgs?: string[];
}

/** Input of {@link DurableAgent.workflow}: the conversation so far. */
export interface DurableAgentInput {
  /** AI SDK `ModelMessage`s (JSON only; checked at run time). */
  messages: ModelMessage[];
}

/** Result of {@link DurableAgent.run}. */
export interface DurableAgentResult {
  /** The whole conversation: the input messages, then every assistant and tool message. */
  messages: ModelMessage[];
  /** Text of the last assistant message. */
  text: string;
  /** Number of `llm` steps taken. */
  llmSteps: number;
}

type ToolCallPart = { type: "tool-call"; toolCallId: string; toolName: string; input: unknown };
type ToolResultOutput = ToolResultPart["output"];
/** What a tool's `execute` receives besides its input (AI SDK 6 and 7: 7 adds `context`). */
type ToolCallOptions = Parameters<NonNullable<Tool["execute"]>>[1];
/** A tool call's outcome: what the model sees, the tool's recorded value when it ran, and the arguments it ran with. */
type ToolRun = { output: ToolResultOutput; value?: JsonValue; input?: unknown };
/**
 * Whether a call may run: `refused` (what the model receives instead), or the arguments it runs with (the
 * reviewer's corrected ones, or the model's) and the reviewer's words to add to its result.
 */
type Admission = { refused: ToolResultOutput } | { input: unknown; review?: string };

/** The AI SDK's `ProviderOptions` (JSON by provider name), as `streamText` takes them. */
type ProviderOptions = NonNullable<Parameters<typeof streamText>[0]["providerOptions"]>;

/** One round's effective model request (after `prepareStep`). */
interface LlmRequest {
  model: LanguageModel;
  system?: string;
  messages: ModelMessage[];
  tools: ToolSet;
  toolDefs: JsonValue;
  toolChoice?: ToolChoice<ToolSet>;
  providerOptions?: ProviderOptions;
}

function modelJson(model: LanguageModel): JsonValue {
  if (typeof model === "string") return { modelId: model };
  return { provider: model.provider, modelId: model.modelId };
}

function textOf(message: AssistantModelMessage | undefined): string {
  if (!message) return "";
  if (typeof message.content === "string") return message.content;
  return message.content
    .filter((p): p is { type: "text"; text: string } => p.type === "text")
    .map((p) => p.text)
    .join("");
}

/** Result of {@link repairModelMessages}. */
export interface ModelMessagesRepair {
  /** The repaired messages (a new array; messages that needed no change are the same objects). */
  messages: ModelMessage[];
  /**
   * What was changed, in `repairHistory`'s terms; `index` is the index of the
   * message concerned in the ORIGINAL list. Empty when nothing needed repair.
   */
  actions: RepairAction[];
}

type Part = { type: string; [key: string]: unknown };
const partsOf = (m: ModelMessage): Part[] =>
  typeof m.content === "string" ? [{ type: "text", text: m.content }] : (m.content as Part[]);
/** A tool call the client must answer (not one the provider executed itself). */
const isClientCall = (p: Part) => p.type === "tool-call" && p.providerExecuted !== true;

/**
 * Repairs an AI SDK message list with the rules `BaseAgent` applies to its
 * history before every model call (`repairHistory` of `agent/repair.ts`,
 * policy `"interrupted"`), so that the provider accepts it:
 *
 * - a tool call without its result: a result is added right after the
 *   assistant message's other results (an `error-text` output with
 *   `INTERRUPTED_RESULT`, marked `providerOptions.dumplings.interrupted`);
 * - a tool result without its call (an orphan, or a second result for one call): removed;
 * - an assistant message with neither text nor anything else but blank text: removed;
 * - a `tool` message left without results: removed.
 *
 * The decisions are `repairHistory`'s own, taken on the OpenAI-shaped view
 * of the list (one `tool` message per result), and applied to the model
 * messages without re-encoding them: everything else (reasoning, files,
 * provider options) is kept as it was. Pure and deterministic: the same input
 * gives the same output, so a replay builds the same request.
 *
 * @param messages - AI SDK `ModelMessage`s (not modified)
 * @returns `{ messages, actions }`
 * @example
 * const { messages, actions } = repairModelMessages([
 *   { role: "user", content: "refund order 7" },
 *   { role: "assistant", content: [{ type: "tool-call", toolCallId: "c1", toolName: "refund", input: {} }] },
 * ]);
 * // messages[2] is { role: "tool", content: [{ type: "tool-result", toolCallId: "c1", … }] }
 */
export function repairModelMessages(messages: readonly ModelMessage[]): ModelMessagesRepair {
  const units: Record<string, unknown>[] = [];
  const origin: { message: number; part?: number }[] = [];
  messages.forEach((m, i) => {
    if (m.role === "tool") {
      (m.content as Part[]).forEach((p, j) => {
        if (p.type !== "tool-result") return;
        units.push({ role: "tool", tool_call_id: String(p.toolCallId), content: "" });
        origin.push({ message: i, part: j });
      });
      return;
    }
    if (m.role === "assistant") {
      const parts = partsOf(m);
      const calls = parts.filter(isClientCall);
      const substance = parts.some((p) => (p.type === "text" ? String(p.text).trim() !== "" : !isClientCall(p)));
      units.push({
        role: "assistant",
        content: substance ? "(content)" : "",
        ...(calls.length > 0
          ? {
              tool_calls: calls.map((c) => ({
                id: String(c.toolCallId),
                type: "function",
                function: { name: String(c.toolName), arguments: JSON.stringify(c.input ?? {}) ?? "{}" },
              })),
            }
          : {}),
      });
      origin.push({ message: i });
      return;
    }
    units.push({ role: m.role, content: "(content)" });
    origin.push({ message: i });
  });
  const { actions: unitActions } = repairHistory("openai", units as OpenAIMessage[], "interrupted");
  const actions = unitActions.map((a) => ({ ...a, index: (origin[a.index] as { message: number }).message }));
  if (actions.length === 0) return { messages: [...messages], actions };

  const droppedMessages = new Set<number>();
  const droppedParts = new Map<number, Set<number>>();
  const droppedCalls = new Map<number, Set<string>>();
  const interrupted = new Map<number, string[]>();
  const entry = <V>(map: Map<number, V>, key: number, make: () => V): V => {
    let value = map.get(key);
    if (value === undefined) {
      value = make();
      map.set(key, value);
    }
    return value;
  };
  for (const a of unitActions) {
    const at = origin[a.index] as { message: number; part?: number };
    switch (a.kind) {
      case "orphan-result-removed":
        entry(droppedParts, at.message, () => new Set<number>()).add(at.part ?? -1);
        break;
      case "empty-assistant-removed":
        droppedMessages.add(at.message);
        break;
      case "invalid-call-removed":
        entry(droppedCalls, at.message, () => new Set<string>()).add(String(a.toolCallId));
        break;
      case "interrupted-result-added":
        entry(interrupted, at.message, (): string[] => []).push(String(a.toolCallId));
        break;
    }
  }

  const out: ModelMessage[] = [];
  // interrupted results of the last assistant message, added after its own results
  let owed: ToolResultPart[] = [];
  let toolRun = false; // out's last message is a tool message following that assistant message
  const settle = () => {
    if (owed.length === 0) return;
    const last = out[out.length - 1];
    if (toolRun && last?.role === "tool") out[out.length - 1] = { ...last, content: [...last.content, ...owed] };
    else out.push({ role: "tool", content: owed });
    owed = [];
  };
  messages.forEach((m, i) => {
    if (m.role !== "tool") {
      settle();
      toolRun = false;
    }
    if (droppedMessages.has(i)) return;
    if (m.role === "tool") {
      const dropped = droppedParts.get(i);
      const content = dropped ? m.content.filter((_, j) => !dropped.has(j)) : m.content;
      if (content.length === 0) return;
      out.push(content === m.content ? m : { ...m, content });
      toolRun = true;
      return;
    }
    const calls = droppedCalls.get(i);
    const message =
      calls && m.role === "assistant" && typeof m.content !== "string"
        ? ({
            ...m,
            content: (m.content as Part[]).filter((p) => !(isClientCall(p) && calls.has(String(p.toolCallId)))),
          } as ModelMessage)
        : m;
    out.push(message);
    const ids = interrupted.get(i);
    if (ids) {
      const names = new Map(
        partsOf(m)
          .filter(isClientCall)
          .map((p) => [String(p.toolCallId), String(p.toolName)]),
      );
      owed = ids.map((id) => ({
        type: "tool-result",
        toolCallId: id,
        toolName: names.get(id) ?? "",
        output: { type: "error-text", value: INTERRUPTED_RESULT },
        providerOptions: { dumplings: { interrupted: true } },
      }));
    }
  });
  settle();
  return { messages: out, actions };
}

/**
 * An AI SDK agent whose loop is a durable workflow.
 *
 * @example
 * const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "test" });
 * const agent = new DurableAgent({ model: provider("m"), tools: { search, refund: { ...refund, needsApproval: true } } });
 * const result = await runDurable("chat-1", agent.workflow(), { journal, input: { messages } });
 * // result.status === "waiting" → a human runs `dumplings approve chat-1 <toolCallId>`, then the run is resumed
 */
export class DurableAgent {
  readonly options: DurableAgentOptions;

  /**
   * @param options - see {@link DurableAgentOptions}
   * @throws {InvalidOptionError} for an unknown option, or when `model` is missing or not a model
   */
  constructor(options: DurableAgentOptions) {
    checkOptions("DurableAgent", options, AGENT_OPTIONS);
    const model = (options as Partial<DurableAgentOptions> | undefined)?.model as unknown;
    if (model === null || (typeof model !== "object" && typeof model !== "string")) {
      throw new InvalidOptionError(
        "DurableAgent",
        "model",
        `${model === undefined ? "is required" : `must be an AI SDK language model, got ${model === null ? "null" : typeof model}`}: new DurableAgent({ model: createOpenAICompatible({ name, baseURL })("model-id"), tools })`,
      );
    }
    checkOptions("DurableAgent settings", options.settings, SETTINGS_OPTIONS);
    if (options.name !== undefined && (typeof options.name !== "string" || options.name.length === 0)) {
      throw new InvalidOptionError("DurableAgent", "name", 'must be a non-empty string, e.g. "support-agent"');
    }
    checkEditableArgs(options);
    this.options = options;
  }

  private async toolDefs(names: string[]): Promise<JsonValue> {
    const defs: JsonValue[] = [];
    for (const [name, t] of Object.entries(this.options.tools ?? {})) {
      if (!names.includes(name)) continue;
      const schema = await toToolSchema(t.inputSchema).jsonSchema;
      defs.push({ name, description: this.describe(name, t), inputSchema: JSON.parse(JSON.stringify(schema)) });
    }
    return defs;
  }

  /** A tool's description: a string, or (AI SDK 7) a function of the tool's context. */
  private describe(name: string, t: Tool): string {
    const d = (t as { description?: unknown }).description;
    if (typeof d === "function") return String(d({ context: this.options.toolsContext?.[name] }));
    return typeof d === "string" ? d : "";
  }

  /** The options of a tool's `execute` / `needsApproval` call (AI SDK 7 adds `context`). */
  private toolCallOptions(call: ToolCallPart, sent: ModelMessage[], signal?: AbortSignal): ToolCallOptions {
    return {
      toolCallId: call.toolCallId,
      messages: sent,
      ...(signal ? { abortSignal: signal } : {}),
      context: this.options.toolsContext?.[call.toolName],
    } as ToolCallOptions;
  }

  /** The tools as sent to the model: without `execute` (the loop runs them as steps) and without approval flags. */
  private modelTools(names: string[]): ToolSet {
    const out: ToolSet = {};
    for (const [name, t] of Object.entries(this.options.tools ?? {})) {
      if (!names.includes(name)) continue;
      out[name] = aiTool({
        description: this.describe(name, t),
        inputSchema: toToolSchema(t.inputSchema),
        ...(t.providerOptions ? { providerOptions: t.providerOptions } : {}),
      } as Tool);
    }
    return out;
  }

  private async llm(req: LlmRequest, round: number, repairs: RepairAction[]): Promise<AssistantModelMessage> {
    const settings = {
      ...(this.options.settings ?? {}),
      ...(this.options.maxOutputTokens !== undefined ? { maxOutputTokens: this.options.maxOutputTokens } : {}),
    };
    const input: JsonValue = {
      model: modelJson(req.model),
      system: req.system ?? null,
      messages: req.messages as unknown as JsonValue,
      tools: req.toolDefs,
      settings: settings as JsonValue,
      // only when set, so runs recorded before these options replay with the same hash
      ...(req.toolChoice !== undefined ? { toolChoice: req.toolChoice as JsonValue } : {}),
      ...(req.providerOptions !== undefined ? { providerOptions: req.providerOptions as JsonValue } : {}),
    };
    const message = await step(
      "llm",
      async () => {
        const run = currentRun();
        const info = currentStep();
        // Which attempt streams: on the events' data too, for readers that forward only `data`.
        const origin: { [key: string]: JsonValue } = info ? { seq: info.seq, attempt: info.attempt } : {};
        if (info && info.attempt > 1) {
          // the abandoned attempt's tokens are void: readers drop them (pb-35)
          await run?.emit({ type: "reset", seq: info.seq, attempt: info.attempt - 1 });
        }
        if (repairs.length > 0)
          await run?.emit({ type: "repair", ...origin, actions: repairs as unknown as JsonValue });
        const result = streamText({
          model: req.model,
          ...(req.system ? { system: req.system } : {}),
          messages: toWellFormedDeep(req.messages), // the journal keeps strings exactly; the request never carries a lone surrogate (pb-06)
          tools: req.tools,
          ...(req.toolChoice !== undefined ? { toolChoice: req.toolChoice } : {}),
          ...(req.providerOptions !== undefined ? { providerOptions: req.providerOptions } : {}),
          maxRetries: 0, // retries are journaled step attempts, one model request each
          onError: () => undefined, // the error part below fails the attempt; nothing is logged twice
          ...settings,
          // aborted when the run is cancelled or this executor lost the lease
          ...(info ? { abortSignal: info.signal } : run ? { abortSignal: run.abortSignal } : {}),
        });
        let failure: unknown;
        for await (const part of result.fullStream) {
          if (part.type === "text-delta") await run?.emit({ type: "token", ...origin, round, text: part.text });
          else if (part.type === "error") failure = part.error;
        }
        if (failure !== undefined) throw failure;
        const response = await result.response;
        const assistant = response.messages.find((m) => m.role === "assistant");
        if (!assistant) throw new DumplingsError("MODEL_ERROR", "the model returned no assistant message");
        return assistantModelMessageSchema.parse(JSON.parse(JSON.stringify(assistant))) as unknown as JsonValue;
      },
      { input, retry: this.options.llmRetry ?? { maxAttempts: 3, backoffMs: 500 } },
    );
    // validated on the way back from the journal, too
    return assistantModelMessageSchema.parse(message) as AssistantModelMessage;
  }

  /** The request of round `round`: the options, then what `prepareStep` changes for this round. */
  private async request(round: number, messages: ModelMessage[], steps: StepResult<ToolSet>[]): Promise<LlmRequest> {
    const o = this.options;
    const prepared = o.prepareStep
      ? await o.prepareStep({ stepNumber: round, steps, model: o.model, messages, experimental_context: undefined })
      : undefined;
    if (prepared?.system !== undefined && typeof prepared.system !== "string") {
      throw new DumplingsError("INVALID_OPTION", "DurableAgent: prepareStep may set `system` only to a string");
    }
    const active = prepared?.activeTools?.map(String);
    const all = this.options.tools ?? {};
    const names = Object.keys(all).filter((n) => !active || active.includes(n));
    const toolChoice = prepared?.toolChoice ?? o.toolChoice;
    const providerOptions = prepared?.providerOptions ?? o.providerOptions;
    const system = (prepared?.system as string | undefined) ?? o.system;
    const chosen = prepared?.messages ?? messages;
    assertJson(chosen, "prepareStep messages");
    return {
      model: prepared?.model ?? o.model,
      ...(system !== undefined ? { system } : {}),
      messages: chosen,
      tools: this.modelTools(names),
      toolDefs: await this.toolDefs(names),
      ...(toolChoice !== undefined ? { toolChoice } : {}),
      ...(providerOptions !== undefined ? { providerOptions } : {}),
    };
  }

  /**
   * Whether the call waits for a human. A `needsApproval` function runs once
   * per call, as the step `needs-approval:<tool>` (input `{ toolCallId, input }`,
   * output `{ needsApproval }`): every replay reads the recorded decision and
   * never calls the policy again (pb-33).
   */
  private async needsApproval(t: Tool, call: ToolCallPart, sent: ModelMessage[]): Promise<boolean> {
    const policy = t.needsApproval;
    if (typeof policy !== "function") return policy === true;
    const decision = await step(
      `needs-approval:${call.toolName}`,
      async () => ({
        needsApproval: Boolean(await policy(call.input as never, this.toolCallOptions(call, sent))),
      }),
      {
        input: { toolCallId: call.toolCallId, input: call.input as JsonValue },
        retry: this.options.approvalPolicyRetry ?? { maxAttempts: 3, backoffMs: 200 },
      },
    );
    return decision.needsApproval === true;
  }

  /**
   * Whether the call may run, and with which arguments (see {@link Admission}): an unknown tool, or a
   * human's rejection, is refused. Waits for approval; an approval's note and corrected arguments (for a
   * tool of `editableArgs`, checked against its schema) come back with the admission.
   */
  private async admit(call: ToolCallPart, sent: ModelMessage[]): Promise<Admission> {
    const t = this.options.tools?.[call.toolName];
    if (!t?.execute) return { refused: { type: "error-text", value: `unknown tool "${call.toolName}"` } };
    if (!(await this.needsApproval(t, call, sent))) return { input: call.input };
    const editable = this.options.editableArgs?.includes(call.toolName) === true;
    const wait: Omit<ApprovalWait, "signal"> | undefined = editable
      ? { argsSchema: JSON.parse(JSON.stringify(await toToolSchema(t.inputSchema).jsonSchema)) as JsonObject }
      : undefined;
    const decision = readDecision(await waitForSignalWith<JsonValue>(approvalSignalName(call.toolCallId), wait));
    if (!decision.approved)
      return { refused: { type: "execution-denied", reason: decision.note || DEFAULT_REJECTION } };
    const review = reviewLine(decision);
    if (decision.args === undefined) return { input: call.input, ...(review ? { review } : {}) };
    // checked when sent; checked again here against the tool's own schema (refinements a JSON Schema cannot say)
    const problem = editable
      ? await argsProblem(t, decision.args)
      : `tool "${call.toolName}" does not take corrected arguments (DurableAgent editableArgs)`;
    if (problem !== undefined) {
      return {
        refused: {
          type: "error-text",
          value: `The tool did not run: a human reviewer approved this call with corrected arguments ${JSON.stringify(decision.args)}, which were refused: ${problem}.${decision.note ? ` Reviewer's note: ${decision.note}` : ""}`,
        },
      };
    }
    return { input: decision.args, ...(review ? { review } : {}) };
  }

  /**
   * Runs an admitted call as the step `tool:<name>` (input `{ toolCallId, input }`, the arguments it runs
   * with); the reviewer's words, if any, are added to what the model receives.
   * Call synchronously in call order: `step()` takes its seq before its first `await`.
   */
  private async runTool(
    call: ToolCallPart,
    sent: ModelMessage[],
    admitted: { input: unknown; review?: string },
  ): Promise<ToolRun> {
    const ran = await this.execute(call, admitted.input, sent);
    return {
      ...ran,
      input: admitted.input,
      ...(admitted.review ? { output: withReview(ran.output, admitted.review) } : {}),
    };
  }

  private async execute(call: ToolCallPart, input: unknown, sent: ModelMessage[]): Promise<ToolRun> {
    const t = this.options.tools?.[call.toolName] as Tool;
    const execute = t.execute as NonNullable<Tool["execute"]>;
    let value: JsonValue;
    try {
      value = await step(
        `tool:${call.toolName}`,
        async () => {
          const info = currentStep();
          const out = await finalValue(execute(input as never, this.toolCallOptions(call, sent, info?.signal)));
          return out === undefined ? null : (out as JsonValue);
        },
        {
          input: { toolCallId: call.toolCallId, input: input as JsonValue },
          retry: this.options.toolRetry ?? { maxAttempts: 1 },
        },
      );
    } catch (error) {
      if (error instanceof StepFailedError)
        return { output: { type: "error-text", value: error.recordedError.message } };
      throw error;
    }
    if (t.toModelOutput) {
      // a pure function of the recorded result: applied again on replay
      const output = await t.toModelOutput({ toolCallId: call.toolCallId, input, output: value });
      return { output, value };
    }
    // as the AI SDK does: a string result is sent as text, anything else as JSON
    return { output: typeof value === "string" ? { type: "text", value } : { type: "json", value }, value };
  }

  /**
   * Runs one round's calls: approvals first, in call order; then the admitted calls,
   * at most `maxParallelTools` at once, started in call order (deterministic seqs).
   */
  private async runTools(calls: ToolCallPart[], sent: ModelMessage[]): Promise<ToolRun[]> {
    const results: (ToolRun | undefined)[] = [];
    const admitted: { input: unknown; review?: string }[] = [];
    for (const [i, call] of calls.entries()) {
      const admission = await this.admit(call, sent);
      if ("refused" in admission) results.push({ output: admission.refused });
      else {
        results.push(undefined);
        admitted[i] = admission;
      }
    }
    const limit = Math.max(1, Math.floor(this.options.maxParallelTools ?? 4));
    const pending = calls.map((_, i) => i).filter((i) => results[i] === undefined);
    let next = 0;
    const failures: unknown[] = [];
    const lane = async (): Promise<void> => {
      while (next < pending.length) {
        const i = pending[next++] as number;
        try {
          results[i] = await this.runTool(calls[i] as ToolCallPart, sent, admitted[i] as { input: unknown });
        } catch (error) {
          failures.push(error);
          next = pending.length; // start nothing more; let the running calls finish
        }
      }
    };
    // each lane starts its first call synchronously, so call i takes its seq before call i + 1
    await Promise.all(Array.from({ length: Math.min(limit, pending.length) }, lane));
    if (failures.length > 0) throw failures[0];
    return results as ToolRun[];
  }

  /**
   * Runs the loop inside the current durable run (call it from a workflow
   * passed to `runDurable`, or use {@link DurableAgent.workflow}).
   *
   * @param messages - the conversation so far (AI SDK `ModelMessage`s, JSON)
   * @returns `{ messages, text, llmSteps }` (`messages` starts with the input, repaired if it needed it)
   * @throws {RunWaitingError} while a tool call waits for approval (the run is checkpointed)
   * @throws {StepFailedError} when a `needsApproval` policy failed on every attempt (the run fails)
   * @throws {NoRunContextError} outside a run
   */
  async run(messages: ModelMessage[]): Promise<DurableAgentResult> {
    assertJson(messages, "messages");
    let history: ModelMessage[] = JSON.parse(JSON.stringify(messages)) as ModelMessage[];
    const maxSteps = this.options.maxSteps ?? 20;
    const stopWhen = this.options.stopWhen;
    const stops = stopWhen === undefined ? [] : Array.isArray(stopWhen) ? stopWhen : [stopWhen];
    const steps: StepResult<ToolSet>[] = [];
    let llmSteps = 0;
    let last: AssistantModelMessage | undefined;
    while (llmSteps < maxSteps) {
      // BaseAgent's repair rules, before every model call (deterministic: a replay sends the same request)
      const repaired = repairModelMessages(history);
      if (repaired.actions.length > 0) history = repaired.messages;
      const req = await this.request(llmSteps, history.slice(), steps);
      const sent = req.messages.slice(); // the messages of this request (what tools and policies receive)
      last = await this.llm(req, llmSteps, repaired.actions);
      llmSteps++;
      history.push(last);
      const calls =
        typeof last.content === "string"
          ? []
          : (last.content.filter((p) => p.type === "tool-call") as unknown as ToolCallPart[]);
      if (calls.length === 0) break;
      const ran = await this.runTools(calls, sent);
      const results = calls.map((call, i) => ({
        type: "tool-result" as const,
        toolCallId: call.toolCallId,
        toolName: call.toolName,
        output: (ran[i] as ToolRun).output,
      }));
      const toolMessage = { role: "tool", content: results } as ModelMessage;
      history.push(toolMessage);
      steps.push(roundResult(steps.length, last, calls, ran, [last, toolMessage]));
      if (stops.length > 0 && (await Promise.all(stops.map((c) => c({ steps })))).some(Boolean)) break;
    }
    return { messages: history, text: textOf(last), llmSteps };
  }

  /**
   * The input of a run of {@link DurableAgent.workflow}, typed for `runDurable`'s
   * `input` (JSON) without a cast: `ModelMessage[]` is checked to be JSON here,
   * at run time, instead of by the type.
   *
   * @param messages - AI SDK `ModelMessage`s: plain JSON (file data as base64 strings, no `Uint8Array`/`URL`/`Date`)
   * @returns `{ messages }` (a deep copy, checked to be JSON)
   * @throws {NonJsonValueError} naming the path of the first value JSON cannot carry
   * @example
   * await runDurable("chat-1", agent.workflow(), { journal, input: agent.input([{ role: "user", content: "hi" }]) });
   */
  input(messages: ModelMessage[]): DurableAgentInput {
    const input: DurableAgentInput = { messages };
    assertJson(input, "input");
    return JSON.parse(JSON.stringify(input)) as DurableAgentInput;
  }

  /**
   * The agent as a workflow function for `runDurable` / `DurableWorker`: input `{ messages }`. The
   * function is named after the agent (`name`, default `durable-agent`), so a run it starts is
   * listed under that name.
   *
   * @returns `(input: { messages }) => Promise<DurableAgentResult>` (JSON); typed so that
   *   `runDurable(id, agent.workflow(), { input: { messages } })` takes `ModelMessage[]` without a cast
   *   (the input is checked to be JSON when the run is created)
   */
  workflow(): WorkflowFn<DurableAgentInput, DurableAgentResult> {
    const program = async (input: DurableAgentInput) => {
      const messages = (input as { messages?: unknown } | null)?.messages;
      if (!Array.isArray(messages)) {
        throw new DumplingsError("INVALID_INPUT", "a DurableAgent run needs the input { messages: ModelMessage[] }");
      }
      return await this.run(messages as ModelMessage[]);
    };
    // runDurable stores a new run under the function's name: the agent's, not "workflow"
    Object.defineProperty(program, "name", { value: this.options.name ?? DEFAULT_AGENT_NAME });
    return program;
  }
}

/**
 * Refuses an `editableArgs` option that is not a list of the names of `needsApproval` tools.
 * @throws {InvalidOptionError} (`option: "editableArgs"`)
 */
function checkEditableArgs(options: DurableAgentOptions): void {
  const names = options.editableArgs as unknown;
  if (names === undefined) return;
  if (!Array.isArray(names) || names.some((n) => typeof n !== "string")) {
    throw new InvalidOptionError("DurableAgent", "editableArgs", 'must be a list of tool names, e.g. ["refund"]');
  }
  for (const name of names as string[]) {
    const t = options.tools?.[name];
    if (!t) {
      throw new InvalidOptionError(
        "DurableAgent",
        "editableArgs",
        `names no tool: ${JSON.stringify(name)} is not in tools`,
      );
    }
    if (t.needsApproval === undefined || t.needsApproval === false) {
      throw new InvalidOptionError(
        "DurableAgent",
        "editableArgs",
        `tool ${JSON.stringify(name)} has no needsApproval, so no reviewer ever sees its arguments: tool({ ...def, needsApproval: true })`,
      );
    }
  }
}

/** Why the tool's own schema refuses corrected arguments, or undefined when it takes them (or cannot check). */
async function argsProblem(t: Tool, args: JsonObject): Promise<string | undefined> {
  const schema = toToolSchema(t.inputSchema);
  if (!schema.validate) return undefined;
  const result = await schema.validate(args);
  return result.success ? undefined : schemaProblem(result.error);
}

/** What the model is told of an approval's note and corrected arguments; undefined when there are neither. */
function reviewLine(d: { note?: string; args?: JsonObject }): string | undefined {
  if (!d.note && d.args === undefined) return undefined;
  const args = d.args === undefined ? "" : ` with corrected arguments ${JSON.stringify(d.args)}`;
  return `Approved by a human reviewer${args}.${d.note ? ` Reviewer's note: ${d.note}` : ""}`;
}

/**
 * A tool result with the reviewer's words added: a last paragraph of a text, `{ result, review }` for JSON, a
 * last text part of content, a sentence of a denial's reason.
 */
function withReview(output: ToolResultOutput, review: string): ToolResultOutput {
  switch (output.type) {
    case "text":
    case "error-text":
      return { ...output, value: `${output.value}\n\n${review}` };
    case "json":
    case "error-json":
      return { ...output, value: { result: output.value, review } };
    case "content":
      return { ...output, value: [...output.value, { type: "text", text: review }] };
    case "execution-denied":
      return { ...output, reason: output.reason ? `${output.reason}\n\n${review}` : review };
    default:
      return output;
  }
}

/** The program name of a {@link DurableAgent}'s runs when its options give none. */
const DEFAULT_AGENT_NAME = "durable-agent";

/** The final value of a tool's result: the last value an async iterable (generator) tool yields. */
async function finalValue(out: unknown): Promise<unknown> {
  const value = await out;
  if (value !== null && typeof value === "object" && Symbol.asyncIterator in value) {
    let lastValue: unknown;
    for await (const v of value as AsyncIterable<unknown>) lastValue = v;
    return lastValue;
  }
  return value;
}

/** A round as an AI SDK `StepResult` (the fields stop conditions read). */
function roundResult(
  stepNumber: number,
  assistant: AssistantModelMessage,
  calls: ToolCallPart[],
  ran: ToolRun[],
  messages: ModelMessage[],
): StepResult<ToolSet> {
  const toolCalls = calls.map((c) => ({
    type: "tool-call",
    toolCallId: c.toolCallId,
    toolName: c.toolName,
    input: c.input,
  }));
  const toolResults = calls.flatMap((c, i) =>
    ran[i]?.value === undefined
      ? []
      : [
          {
            type: "tool-result",
            toolCallId: c.toolCallId,
            toolName: c.toolName,
            input: ran[i]?.input ?? c.input,
            output: ran[i]?.value,
          },
        ],
  );
  const content = [
    ...(typeof assistant.content === "string" ? [{ type: "text", text: assistant.content }] : assistant.content),
    ...toolResults,
  ];
  return {
    stepNumber,
    content,
    text: textOf(assistant),
    toolCalls,
    staticToolCalls: toolCalls,
    dynamicToolCalls: [],
    toolResults,
    staticToolResults: toolResults,
    dynamicToolResults: [],
    finishReason: "tool-calls",
    response: { messages },
  } as unknown as StepResult<ToolSet>;
}

/**
 * Wraps an AI SDK tool so each call's body runs as a durable step
 * (`tool:<name>`, input `{ toolCallId, input }`) when called inside a run:
 * on replay the recorded result is returned without running the body. The
 * result must be JSON.
 *
 * @param t - an AI SDK tool with `execute`
 * @param options - `name` (step name suffix), `retry`
 * @returns the same tool with a durable `execute`
 * @example
 * const tools = { weather: durableTool(weatherTool, { name: "weather" }) };
 * await runDurable("r", () => generateText({ model, tools, prompt }).then((r) => r.text), { journal });
 */
export function durableTool<T extends Tool>(t: T, options: { name: string; retry?: RetryPolicy }): T {
  checkOptions("durableTool", options, TOOL_OPTIONS);
  const execute = t.execute;
  // any schema the user has (zod 3 or 4, JSON Schema, an AI SDK schema) as the AI SDK's own
  const schema = t.inputSchema === undefined ? {} : { inputSchema: toToolSchema(t.inputSchema) };
  if (!execute) return { ...t, ...schema } as T;
  return {
    ...t,
    ...schema,
    execute: (input: unknown, opts: { toolCallId: string; messages: ModelMessage[] }) =>
      step(
        `tool:${options.name}`,
        async () => {
          const out = await execute(input as never, opts as never);
          return out === undefined ? null : (out as JsonValue);
        },
        {
          input: { toolCallId: opts.toolCallId, input: input as JsonValue },
          ...(options.retry ? { retry: options.retry } : {}),
        },
      ),
  } as T;
}
