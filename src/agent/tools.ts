/**
 * Tools an agent can call: their definition (zod 3 or 4, JSON Schema or AI
 * SDK schema parameters), a process-wide registry, the conversion to AI SDK tool
 * declarations, and the execution of one round of tool calls — in parallel,
 * at most `maxWorkers` at a time, each bounded by a timeout, with tool-call
 * hooks around every call.
 *
 * A tool never crashes a turn: a timeout, a thrown error, an unknown tool or
 * arguments that are not valid JSON / do not match the parameters all become
 * a result text saying so, which the model sees (as OpenAI's and Anthropic's
 * own agent SDKs do with `is_error` results).
 *
 * @module
 */
import { tool as aiTool, type FlexibleSchema, type Tool } from "ai";
import { DumplingsError, InvalidOptionError } from "../core/errors.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { schemaProblem, toToolSchema } from "../core/tool-schema.js";

/** JSON Schema of a tool's parameters (an object schema). */
export type JsonSchemaObject = { type?: "object"; properties?: Record<string, unknown>; required?: string[] } & Record<
  string,
  unknown
>;

/** What a tool's `execute` receives besides its arguments. */
export interface ToolContext {
  /** Id of the tool call being answered. */
  toolCallId: string;
  /** Task id of the turn (`agent.currentTaskId`). */
  taskId: string;
  /** Aborted when the call times out or the turn is aborted. */
  signal: AbortSignal;
  /** The same signal under the AI SDK's name (`ToolExecutionOptions.abortSignal`), for AI SDK tools. */
  abortSignal: AbortSignal;
  /**
   * The AI SDK's `ToolExecutionOptions.messages`, for AI SDK tools: always empty here
   * (the agent's history is `agent.history`; it is not converted for every tool call).
   */
  messages: [];
}

/**
 * A tool the model can call.
 *
 * An AI SDK `tool({ description, inputSchema, execute })` is one too, given a
 * name: `agent.registerTool({ name: "weather", ...weatherTool })` or
 * `agent.registerTool("weather", weatherTool)` (see {@link fromAiSdkTool}).
 * Its `inputSchema` (zod, `jsonSchema(…)`, any AI SDK schema) is what the
 * model gets as the parameter list, and what arguments are validated against.
 * Besides the keys below, `title`, `strict`, `providerOptions`,
 * `inputExamples`, `metadata` and `type: "function" | "dynamic"` are passed on to the AI
 * SDK; any other key (`needsApproval`, `toModelOutput`, `outputSchema`,
 * `onInputStart`, a typo) is refused with a {@link ToolRegistrationError}:
 * nothing is silently dropped.
 *
 * @example
 * const add: ToolDefinition<{ a: number; b: number }> = {
 *   name: "add", description: "Adds two numbers",
 *   parameters: z.object({ a: z.number(), b: z.number() }),
 *   execute: ({ a, b }) => a + b,
 * };
 */
// biome-ignore lint/suspicious/noExplicitAny: tools of any argument type live in one registry
export interface ToolDefinition<Args = any> {
  /** Name the model calls it by (letters, digits, `_`, `-`; at most 64 characters). */
  name: string;
  /** What the tool does, for the model. @default "" */
  description?: string;
  /**
   * Parameters: a zod 3 or zod 4 object schema (any copy of zod), another Standard Schema, a JSON Schema
   * object, or an AI SDK schema (`jsonSchema(…)`, `zodSchema(…)`). @default an empty object schema
   */
  parameters?: FlexibleSchema<Args> | JsonSchemaObject;
  /**
   * Parameters under the AI SDK's name (the `inputSchema` of `tool()`): the same schemas as `parameters`.
   * Give `parameters` or `inputSchema`, not both.
   */
  inputSchema?: FlexibleSchema<Args> | JsonSchemaObject;
  /**
   * Runs the tool. The return value is sent to the model (strings as-is, anything else as JSON);
   * an async iterable (an AI SDK streaming tool) is read to its end and its last value is the result.
   */
  execute(args: Args, context: ToolContext): unknown;
  /** AI SDK: a display title. */
  title?: string;
  /** AI SDK: strict schema adherence, for providers that support it. */
  strict?: boolean;
  /** AI SDK: provider-specific tool options. */
  providerOptions?: Tool["providerOptions"];
  /** AI SDK: example inputs, for providers that support them. */
  inputExamples?: Array<{ input: Args }>;
  /** AI SDK: metadata about the tool (passed on to the AI SDK declaration). */
  metadata?: Tool["metadata"];
  /** AI SDK: `"function"` (default) or `"dynamic"`; `"provider"` (provider-executed) is refused: it cannot run in an agent's loop. */
  type?: "function" | "dynamic" | "provider";
}

/** An AI SDK `tool()` spread with a name (`{ name: "weather", ...weatherTool }`), as `registerTool` takes it. */
export type NamedAiSdkTool = Tool & { name: string };

/** The keys a {@link ToolDefinition} may have. */
const TOOL_KEYS = optionKeys<ToolDefinition>({
  name: true,
  description: true,
  parameters: true,
  inputSchema: true,
  execute: true,
  title: true,
  strict: true,
  providerOptions: true,
  inputExamples: true,
  type: true,
  metadata: true,
});

/** Why an AI SDK tool key is refused (for the error message). */
const UNSUPPORTED: Record<string, string> = {
  needsApproval: "tool approvals are not supported by the agent loop (use dumplings-ai/durable's approvals)",
  toModelOutput: "the result is sent to the model as text (strings as-is, anything else as JSON)",
  outputSchema: "tool outputs are not validated by the agent loop",
  onInputStart: "tool input streaming callbacks are not supported by the agent loop",
  onInputDelta: "tool input streaming callbacks are not supported by the agent loop",
  onInputAvailable: "tool input streaming callbacks are not supported by the agent loop",
  id: "provider-executed tools cannot run in the agent loop",
  args: "provider-executed tools cannot run in the agent loop",
};

/** A tool-call hook event. */
export interface ToolHookEvent {
  /** `before` the call, `after` a successful call, `error` after a failed one (throw, timeout, bad arguments). */
  type: "before" | "after" | "error";
  /** Tool name. */
  toolName: string;
  /** Tool call id. */
  toolCallId: string;
  /** Parsed arguments (the raw text when they were not JSON). */
  args: unknown;
  /** The tool's return value (`after` only). */
  result?: unknown;
  /** The error (`error` only). */
  error?: Error;
  /** Task id of the turn. */
  taskId: string;
  /** Time the call took, in ms (`after`/`error`; 0 for `before`). */
  durationMs: number;
}

/** A tool-call hook. It may be async; a hook that throws is reported and does not break the turn. */
export type ToolHook = (event: ToolHookEvent) => unknown;

/** A tool name is invalid or already registered. Code `TOOL_REGISTRATION`. */
export class ToolRegistrationError extends DumplingsError {
  readonly toolName: string;
  constructor(toolName: string, message: string) {
    super("TOOL_REGISTRATION", `tool ${JSON.stringify(toolName)}: ${message}`);
    this.toolName = toolName;
  }
}

const NAME = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Checks a tool definition.
 *
 * @param tool - the definition
 * @throws {ToolRegistrationError} when the name is not 1–64 of `[A-Za-z0-9_-]` or `execute` is not a function
 */
export function assertTool(tool: ToolDefinition): void {
  if (typeof tool?.name !== "string" || !NAME.test(tool.name)) {
    throw new ToolRegistrationError(String(tool?.name), "name must be 1-64 characters of letters, digits, _ or -");
  }
  for (const key of Object.keys(tool)) {
    const why = UNSUPPORTED[key];
    if (why !== undefined && (tool as unknown as Record<string, unknown>)[key] !== undefined) {
      throw new ToolRegistrationError(tool.name, `${key} is not supported: ${why}`);
    }
  }
  try {
    checkOptions(`tool ${tool.name}`, tool, TOOL_KEYS, Object.keys(UNSUPPORTED));
  } catch (e) {
    if (!(e instanceof InvalidOptionError)) throw e;
    const hint = /\(did you mean [^)]*\)/.exec(e.message)?.[0];
    throw new ToolRegistrationError(
      tool.name,
      `unknown key ${JSON.stringify(e.option)}${hint ? ` ${hint}` : ""}; accepted: ${[...TOOL_KEYS.keys].join(", ")}`,
    );
  }
  if (tool.parameters !== undefined && tool.inputSchema !== undefined) {
    throw new ToolRegistrationError(tool.name, "give parameters or inputSchema, not both");
  }
  for (const key of ["parameters", "inputSchema"] as const) {
    const schema = tool[key];
    if (schema === undefined) continue;
    if (schema === null || (typeof schema !== "object" && typeof schema !== "function")) {
      throw new ToolRegistrationError(
        tool.name,
        `${key} is not a schema (zod 3 or 4, JSON Schema, jsonSchema(…), zodSchema(…)), got ${schema === null ? "null" : typeof schema}`,
      );
    }
    try {
      toToolSchema(schema);
    } catch (cause) {
      throw new ToolRegistrationError(
        tool.name,
        `${key} is not a schema (zod 3 or 4, JSON Schema, jsonSchema(…), zodSchema(…)): ${(cause as Error).message}`,
      );
    }
  }
  if (tool.type !== undefined && tool.type !== "function" && tool.type !== "dynamic") {
    throw new ToolRegistrationError(
      tool.name,
      `type ${JSON.stringify(tool.type)} is not supported (provider-executed tools cannot run in the agent loop)`,
    );
  }
  if (typeof tool.execute !== "function") throw new ToolRegistrationError(tool.name, "execute must be a function");
}

/**
 * Names an AI SDK `tool()` as a {@link ToolDefinition} (checked by the same rules).
 *
 * @param name - the name the model calls it by
 * @param tool - the AI SDK tool (`tool({ description, inputSchema, execute })`)
 * @returns the definition `{ name, ...tool }`
 * @throws {ToolRegistrationError} for a bad name, a missing `execute`, or a key the agent loop cannot honour
 * @example
 * const weather = tool({ description: "Weather", inputSchema: z.object({ city: z.string() }), execute: ({ city }) => `sunny in ${city}` });
 * agent.registerTool(fromAiSdkTool("weather", weather));
 */
export function fromAiSdkTool(name: string, tool: Tool): ToolDefinition {
  if (tool === null || typeof tool !== "object")
    throw new ToolRegistrationError(String(name), "expected an AI SDK tool object");
  const definition = { ...(tool as object), name } as ToolDefinition;
  assertTool(definition);
  return definition;
}

const globalTools = new Map<string, ToolDefinition>();

/**
 * Registers a tool process-wide: every agent can call it (an agent's own
 * tools, registered with `agent.registerTool`, take precedence).
 *
 * @param tool - the definition
 * @param options - `replace`: overwrite a tool of the same name @default false
 * @throws {ToolRegistrationError} for an invalid definition or a taken name without `replace`
 * @example
 * registerGlobalTool({ name: "now", execute: () => new Date().toISOString() });
 */
export function registerGlobalTool(tool: ToolDefinition, options: { replace?: boolean } = {}): void {
  assertTool(tool);
  if (globalTools.has(tool.name) && !options.replace) {
    throw new ToolRegistrationError(tool.name, "already registered process-wide; pass { replace: true } to replace it");
  }
  globalTools.set(tool.name, tool);
}

/**
 * Removes a process-wide tool.
 *
 * @param name - tool name
 * @returns true when a tool was removed
 */
export function unregisterGlobalTool(name: string): boolean {
  return globalTools.delete(name);
}

/**
 * The process-wide tools.
 *
 * @returns a snapshot map by name
 */
export function globalToolRegistry(): Map<string, ToolDefinition> {
  return new Map(globalTools);
}

/**
 * The tools an agent can call: process-wide ones overlaid by the agent's own.
 *
 * @param own - the agent's tools by name
 * @returns the merged map by name
 */
export function effectiveTools(own: ReadonlyMap<string, ToolDefinition>): Map<string, ToolDefinition> {
  return new Map([...globalTools, ...own]);
}

/**
 * Declares tools to the AI SDK, WITHOUT `execute`: the conversation loop runs
 * them itself so that each message is appended to the history as it happens.
 *
 * @param tools - tools by name
 * @returns an AI SDK `ToolSet`
 */
export function toAiSdkTools(tools: ReadonlyMap<string, ToolDefinition>): Record<string, Tool> {
  const out: Record<string, Tool> = {};
  for (const [name, t] of tools) {
    const inputSchema = toToolSchema(t.inputSchema ?? t.parameters);
    const declaration: Tool = { description: t.description ?? "", inputSchema };
    if (t.title !== undefined) declaration.title = t.title;
    if (t.strict !== undefined) declaration.strict = t.strict;
    if (t.providerOptions !== undefined) declaration.providerOptions = t.providerOptions;
    if (t.inputExamples !== undefined) declaration.inputExamples = t.inputExamples;
    if (t.metadata !== undefined) declaration.metadata = t.metadata;
    out[name] = aiTool(declaration);
  }
  return out;
}

/** One tool call to run. */
export interface ToolCallRequest {
  /** Call id. */
  id: string;
  /** Tool name. */
  name: string;
  /** Arguments as JSON text (as the model sent them). */
  arguments: string;
}

/** Outcome of one tool call. */
export interface ToolCallOutcome {
  /** Call id. */
  id: string;
  /** Tool name. */
  name: string;
  /** `ok`, or why it failed. */
  status: "ok" | "error" | "timeout" | "invalid-arguments" | "unknown-tool";
  /** Text sent to the model as the tool result. */
  content: string;
  /** Raw return value (`ok` only). */
  result?: unknown;
  /** Time taken, in ms. */
  durationMs: number;
}

/** Options of {@link runToolCalls}. */
export interface RunToolCallsOptions {
  /** Tools by name. */
  tools: ReadonlyMap<string, ToolDefinition>;
  /** At most this many calls run at once. @default 4 */
  maxWorkers?: number;
  /** Per-call limit, in ms. @default 60000 */
  timeoutMs?: number;
  /** Task id passed to tools and hooks. */
  taskId: string;
  /** Hooks called around every call. @default [] */
  hooks?: readonly ToolHook[];
  /** Called when a hook throws (the turn goes on). */
  onHookError?: (error: unknown, event: ToolHookEvent) => void;
  /** Aborts every running call (they resolve as errors). */
  signal?: AbortSignal;
  /**
   * Calls already known to be invalid (by id), with the reason — e.g. the AI
   * SDK's own JSON parse or schema error. They are not run; the reason is their result.
   */
  rejected?: ReadonlyMap<string, string>;
}

async function validationProblem(tool: ToolDefinition, args: unknown): Promise<{ problem?: string; value: unknown }> {
  // the schema's own validation (zod 3 or 4, any Standard Schema, jsonSchema(…) with validate)
  const resolved = toToolSchema(tool.inputSchema ?? tool.parameters);
  if (resolved.validate !== undefined) {
    const r = await resolved.validate(args);
    return r.success ? { value: r.value } : { value: args, problem: schemaProblem(r.error) };
  }
  // a JSON Schema without a validate function: the checks below, on the schema
  return jsonSchemaProblem((await resolved.jsonSchema) as JsonSchemaObject, args);
}

/** JSON Schema: the checks every provider's own validation makes (object, required keys, primitive types). */
function jsonSchemaProblem(schema: JsonSchemaObject | undefined, args: unknown): { problem?: string; value: unknown } {
  if (typeof args !== "object" || args === null || Array.isArray(args))
    return { value: args, problem: "arguments must be a JSON object" };
  const s = (schema ?? {}) as JsonSchemaObject;
  const obj = args as Record<string, unknown>;
  for (const key of s.required ?? []) {
    if (!(key in obj)) return { value: args, problem: `missing required property ${JSON.stringify(key)}` };
  }
  for (const [key, prop] of Object.entries(s.properties ?? {})) {
    if (!(key in obj)) continue;
    const type = (prop as { type?: unknown }).type;
    const v = obj[key];
    const ok =
      typeof type !== "string" ||
      (type === "string" && typeof v === "string") ||
      (type === "number" && typeof v === "number") ||
      (type === "integer" && Number.isInteger(v)) ||
      (type === "boolean" && typeof v === "boolean") ||
      (type === "array" && Array.isArray(v)) ||
      (type === "object" && typeof v === "object" && v !== null && !Array.isArray(v)) ||
      (type === "null" && v === null);
    if (!ok) return { value: args, problem: `property ${JSON.stringify(key)} must be of type ${type}` };
  }
  return { value: args };
}

/**
 * Serialises a tool's return value for the model.
 *
 * @param value - what `execute` returned
 * @returns strings as-is, `undefined` as `""`, anything else as JSON (falling back to `String(value)`)
 */
export function toolResultText(value: unknown): string {
  if (typeof value === "string") return value;
  if (value === undefined) return "";
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

async function callHooks(
  hooks: readonly ToolHook[],
  event: ToolHookEvent,
  onError?: RunToolCallsOptions["onHookError"],
) {
  for (const hook of hooks) {
    try {
      await hook(event);
    } catch (error) {
      onError?.(error, event);
    }
  }
}

/**
 * Runs one round of tool calls: in parallel, at most `maxWorkers` at a
 * time, each bounded by `timeoutMs`, with hooks around every call. Never
 * throws for a tool's failure.
 *
 * @param calls - the calls, in the order the model made them
 * @param options - tools, worker limit, timeout (ms), task id, hooks
 * @returns one outcome per call, in the same order as `calls`
 * @example
 * const outcomes = await runToolCalls([{ id: "c1", name: "add", arguments: '{"a":1,"b":2}' }],
 *   { tools: new Map([["add", add]]), taskId: "t1", maxWorkers: 2, timeoutMs: 5000 });
 * outcomes[0].content // "3"
 */
export async function runToolCalls(
  calls: readonly ToolCallRequest[],
  options: RunToolCallsOptions,
): Promise<ToolCallOutcome[]> {
  const maxWorkers = Math.max(1, options.maxWorkers ?? 4);
  const timeoutMs = options.timeoutMs ?? 60_000;
  const hooks = options.hooks ?? [];
  const results: ToolCallOutcome[] = new Array(calls.length);
  let next = 0;

  const runOne = async (call: ToolCallRequest): Promise<ToolCallOutcome> => {
    const started = performance.now();
    const elapsed = () => Math.round((performance.now() - started) * 1000) / 1000;
    let args: unknown = call.arguments;
    const fail = async (status: ToolCallOutcome["status"], message: string, error?: Error) => {
      const event: ToolHookEvent = {
        type: "error",
        toolName: call.name,
        toolCallId: call.id,
        args,
        error: error ?? new Error(message),
        taskId: options.taskId,
        durationMs: elapsed(),
      };
      await callHooks(hooks, event, options.onHookError);
      return { id: call.id, name: call.name, status, content: `Error: ${message}`, durationMs: event.durationMs };
    };
    const tool = options.tools.get(call.name);
    try {
      args = call.arguments.trim() === "" ? {} : JSON.parse(call.arguments);
    } catch (e) {
      await callHooks(
        hooks,
        { type: "before", toolName: call.name, toolCallId: call.id, args, taskId: options.taskId, durationMs: 0 },
        options.onHookError,
      );
      return fail("invalid-arguments", `arguments of ${call.name} are not valid JSON: ${(e as Error).message}`);
    }
    await callHooks(
      hooks,
      { type: "before", toolName: call.name, toolCallId: call.id, args, taskId: options.taskId, durationMs: 0 },
      options.onHookError,
    );
    if (!tool) return fail("unknown-tool", `no tool named ${JSON.stringify(call.name)} is registered`);
    const rejected = options.rejected?.get(call.id);
    if (rejected !== undefined) return fail("invalid-arguments", rejected);
    const checked = await validationProblem(tool, args);
    if (checked.problem) return fail("invalid-arguments", `invalid arguments for ${call.name}: ${checked.problem}`);

    const controller = new AbortController();
    const onOuterAbort = () => controller.abort(options.signal?.reason);
    options.signal?.addEventListener("abort", onOuterAbort, { once: true });
    let timer: NodeJS.Timeout | undefined;
    try {
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          const error = new ToolTimeoutError(call.name, timeoutMs);
          controller.abort(error);
          reject(error);
        }, timeoutMs);
      });
      const aborted = new Promise<never>((_, reject) => {
        if (controller.signal.aborted) reject(controller.signal.reason);
        controller.signal.addEventListener("abort", () => reject(controller.signal.reason), { once: true });
      });
      const context: ToolContext = {
        toolCallId: call.id,
        taskId: options.taskId,
        signal: controller.signal,
        abortSignal: controller.signal,
        messages: [],
      };
      const run = Promise.resolve()
        .then(() => tool.execute(checked.value, context))
        .then(lastOfStream);
      const result = await Promise.race([run, timeout, aborted]);
      const event: ToolHookEvent = {
        type: "after",
        toolName: call.name,
        toolCallId: call.id,
        args,
        result,
        taskId: options.taskId,
        durationMs: elapsed(),
      };
      await callHooks(hooks, event, options.onHookError);
      return {
        id: call.id,
        name: call.name,
        status: "ok",
        content: toolResultText(result),
        result,
        durationMs: event.durationMs,
      };
    } catch (e) {
      const error = e instanceof Error ? e : new Error(String(e));
      if (error instanceof ToolTimeoutError) return fail("timeout", error.message, error);
      return fail("error", `${call.name} failed: ${error.message}`, error);
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", onOuterAbort);
    }
  };

  const worker = async () => {
    while (next < calls.length) {
      const i = next++;
      results[i] = await runOne(calls[i] as ToolCallRequest);
    }
  };
  await Promise.all(Array.from({ length: Math.min(maxWorkers, calls.length) }, worker));
  return results;
}

/** An AI SDK streaming tool returns an async iterable of preliminary results: its last value is the result. */
async function lastOfStream(value: unknown): Promise<unknown> {
  if (value === null || typeof value !== "object" || !(Symbol.asyncIterator in value)) return value;
  let last: unknown;
  for await (const item of value as AsyncIterable<unknown>) last = item;
  return last;
}

/** A tool call exceeded its time limit. Code `TOOL_TIMEOUT` (reported to the model, not thrown from a turn). */
export class ToolTimeoutError extends DumplingsError {
  readonly toolName: string;
  /** The limit, in ms. */
  readonly timeoutMs: number;
  constructor(toolName: string, timeoutMs: number) {
    super("TOOL_TIMEOUT", `tool ${toolName} timed out after ${timeoutMs / 1000}s`);
    this.toolName = toolName;
    this.timeoutMs = timeoutMs;
  }
}
