/**
 * A durable agent loop over the AI SDK (`ai@6`): {@link DurableAgent} runs
 * "call the model; run the tools it asked for; repeat" where every model call
 * and every tool call is a journaled step, and tools marked `needsApproval`
 * wait durably for a human (`approval:<toolCallId>` signal). After a crash the
 * loop replays: recorded model answers and tool results are returned from the
 * journal, so the model is not called (or paid) twice for a completed step.
 *
 * Model tokens travel on the run's side channel (`{ type: "token", text }`
 * events); the journal stores one complete assistant message per `llm` step.
 *
 * {@link durableTool} wraps a single AI SDK tool so its body is a durable step
 * inside a user's own loop.
 *
 * @module
 */
import {
  type AssistantModelMessage,
  tool as aiTool,
  asSchema,
  assistantModelMessageSchema,
  type LanguageModel,
  type ModelMessage,
  streamText,
  type Tool,
  type ToolSet,
} from "ai";
import { toWellFormedDeep } from "../agent/well-formed.js";
import { DumplingsError } from "../core/errors.js";
import { assertJson, type JsonValue } from "../core/json.js";
import { currentRun, type RetryPolicy, step, waitForSignal } from "./context.js";
import { StepFailedError } from "./errors.js";
import { type ApprovalDecision, approvalSignalName } from "./signals.js";

/** Options of {@link DurableAgent}. */
export interface DurableAgentOptions {
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
type ToolResultOutput =
  | { type: "json"; value: JsonValue }
  | { type: "text"; value: string }
  | { type: "error-text"; value: string }
  | { type: "execution-denied"; reason?: string };

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

  /** @param options - see {@link DurableAgentOptions} */
  constructor(options: DurableAgentOptions) {
    this.options = options;
  }

  private async toolDefs(): Promise<JsonValue> {
    const defs: JsonValue[] = [];
    for (const [name, t] of Object.entries(this.options.tools ?? {})) {
      const schema = await asSchema(t.inputSchema).jsonSchema;
      defs.push({ name, description: t.description ?? "", inputSchema: JSON.parse(JSON.stringify(schema)) });
    }
    return defs;
  }

  /** The tools as sent to the model: without `execute` (the loop runs them as steps) and without approval flags. */
  private modelTools(): ToolSet {
    const out: ToolSet = {};
    for (const [name, t] of Object.entries(this.options.tools ?? {})) {
      out[name] = aiTool({
        description: t.description,
        inputSchema: t.inputSchema,
        ...(t.providerOptions ? { providerOptions: t.providerOptions } : {}),
      } as Tool);
    }
    return out;
  }

  private async llm(history: ModelMessage[], tools: JsonValue, round: number): Promise<AssistantModelMessage> {
    const input: JsonValue = {
      model: modelJson(this.options.model),
      system: this.options.system ?? null,
      messages: history as unknown as JsonValue,
      tools,
      settings: (this.options.settings ?? {}) as JsonValue,
    };
    const message = await step(
      "llm",
      async () => {
        const run = currentRun();
        const result = streamText({
          model: this.options.model,
          ...(this.options.system ? { system: this.options.system } : {}),
          messages: toWellFormedDeep(history), // the journal keeps strings exactly; the request never carries a lone surrogate (pb-06)
          tools: this.modelTools(),
          maxRetries: 0, // retries are journaled step attempts, one model request each
          onError: () => undefined, // the error part below fails the attempt; nothing is logged twice
          ...(this.options.settings ?? {}),
          ...(run ? { abortSignal: run.abortSignal } : {}),
        });
        let failure: unknown;
        for await (const part of result.fullStream) {
          if (part.type === "text-delta") await run?.emit({ type: "token", round, text: part.text });
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

  private async needsApproval(t: Tool, call: ToolCallPart, history: ModelMessage[]): Promise<boolean> {
    const flag = t.needsApproval;
    if (typeof flag === "function") {
      return await flag(call.input as never, { toolCallId: call.toolCallId, messages: history });
    }
    return flag === true;
  }

  private async runTool(call: ToolCallPart, history: ModelMessage[]): Promise<ToolResultOutput> {
    const t = this.options.tools?.[call.toolName];
    if (!t?.execute) return { type: "error-text", value: `unknown tool "${call.toolName}"` };
    if (await this.needsApproval(t, call, history)) {
      const decision = await waitForSignal<ApprovalDecision>(approvalSignalName(call.toolCallId));
      if (!decision?.approved) {
        return { type: "execution-denied", reason: decision?.reason ?? "rejected by a human reviewer" };
      }
    }
    const execute = t.execute;
    try {
      const value = await step(
        `tool:${call.toolName}`,
        async () => {
          const out = await execute(call.input as never, { toolCallId: call.toolCallId, messages: history });
          return out === undefined ? null : (out as JsonValue);
        },
        {
          input: { toolCallId: call.toolCallId, input: call.input as JsonValue },
          retry: this.options.toolRetry ?? { maxAttempts: 1 },
        },
      );
      // as the AI SDK does: a string result is sent as text, anything else as JSON
      return typeof value === "string" ? { type: "text", value } : { type: "json", value };
    } catch (error) {
      if (error instanceof StepFailedError) return { type: "error-text", value: error.recordedError.message };
      throw error;
    }
  }

  /**
   * Runs the loop inside the current durable run (call it from a workflow
   * passed to `runDurable`, or use {@link DurableAgent.workflow}).
   *
   * @param messages - the conversation so far (AI SDK `ModelMessage`s, JSON)
   * @returns `{ messages, text, llmSteps }`
   * @throws {RunWaitingError} while a tool call waits for approval (the run is checkpointed)
   * @throws {NoRunContextError} outside a run
   */
  async run(messages: ModelMessage[]): Promise<DurableAgentResult> {
    assertJson(messages, "messages");
    const history: ModelMessage[] = JSON.parse(JSON.stringify(messages)) as ModelMessage[];
    const tools = await this.toolDefs();
    const maxSteps = this.options.maxSteps ?? 20;
    let llmSteps = 0;
    let last: AssistantModelMessage | undefined;
    while (llmSteps < maxSteps) {
      last = await this.llm(history, tools, llmSteps);
      llmSteps++;
      history.push(last);
      const calls =
        typeof last.content === "string"
          ? []
          : (last.content.filter((p) => p.type === "tool-call") as unknown as ToolCallPart[]);
      if (calls.length === 0) break;
      const results = [];
      for (const call of calls) {
        const output = await this.runTool(call, history);
        results.push({ type: "tool-result" as const, toolCallId: call.toolCallId, toolName: call.toolName, output });
      }
      history.push({ role: "tool", content: results } as ModelMessage);
    }
    return { messages: history, text: textOf(last), llmSteps };
  }

  /**
   * The agent as a workflow function for `runDurable` / `DurableWorker`: input `{ messages }`.
   *
   * @returns `(input: { messages }) => Promise<DurableAgentResult>` (JSON)
   */
  workflow(): (input: JsonValue) => Promise<JsonValue> {
    return async (input: JsonValue) => {
      const messages = (input as { messages?: unknown } | null)?.messages;
      if (!Array.isArray(messages)) {
        throw new DumplingsError("INVALID_INPUT", "a DurableAgent run needs the input { messages: ModelMessage[] }");
      }
      return (await this.run(messages as ModelMessage[])) as unknown as JsonValue;
    };
  }
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
  const execute = t.execute;
  if (!execute) return t;
  return {
    ...t,
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
