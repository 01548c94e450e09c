/**
 * `BaseAgent`: an agent speaking the OpenAI chat-completions protocol, with
 * its complete, typed, persistable state — identity (`uuid`, `name`),
 * configuration (`config`, the `.duas` `[CONFIG]` fields in camelCase),
 * conversation (`history`, protocol messages with unknown extra fields
 * kept), progress (`currentTaskId`) and tool-call hooks (`hooks`).
 *
 * Subclasses add persistent fields, saved in `[STATE]` and restored on load,
 * by declaring their names (`static persistentFields = ["notes"]`, values
 * must be JSON) or a zod object schema (`static persistentSchema`, whose
 * codecs may turn e.g. a `Date` into an ISO string and back). A subclass is
 * made loadable with `registerAgentClass(MyAgent, import.meta.url)`; its
 * constructor must accept the {@link AgentOptions} object as first argument.
 *
 * The agent is an `EventEmitter`. Events emitted by the persistence layer:
 * - `persistError` `(error: DumplingsError)`: an auto-save failed (the turn goes on);
 * - `persistWarning` `(warning: PersistenceWarning)`: e.g. a hook that cannot be saved by name.
 *
 * The conversation loop (`conversationWithTool`, tools) is layered on top
 * of this class by the agent runtime modules.
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { EventEmitter } from "node:events";
import type { Tool } from "ai";
import type { z } from "zod";
import { AgentNotFoundError, InvalidStateError } from "../core/errors.js";
import { assertJson, type JsonValue, sameFlatObject } from "../core/json.js";
import { type Message, messageSchemaFor, type Protocol } from "../core/messages.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { type AgentConfig, type AgentConfigInput, AgentConfigSchema, type AgentState } from "../core/state.js";
import { FORMAT_VERSION, packageVersion } from "../core/version.js";
import {
  autoSave,
  continueStoredSession,
  exportStateString,
  type LoadOptions,
  loadState,
  loadStateString,
  type SaveOptions,
  type SaveResult,
  saveState,
} from "../persistence/api.js";
import {
  type AgentStateHeader,
  agentClassName,
  defaultWarn,
  hookFunctionName,
  type PersistenceWarning,
  type RestoreOptions,
  registerAgentClass,
  resolveHooksSync,
  type ToStateOptions,
  unregisteredHookWarning,
} from "../persistence/classes.js";
import { isEnabled } from "../persistence/config.js";
import { assertNoCredentials } from "../persistence/credentials.js";
import { conversationWithTool, streamTurn, type TurnOptions, type TurnResult } from "./conversation.js";
import {
  findPendingToolCalls,
  type PendingToolCall,
  type RepairAction,
  type RepairPolicy,
  repairHistory,
} from "./repair.js";
import {
  assertTool,
  effectiveTools,
  fromAiSdkTool,
  type NamedAiSdkTool,
  type ToolDefinition,
  type ToolHook,
  ToolRegistrationError,
} from "./tools.js";

/**
 * Classes whose constructor refuses an unknown option (the built-in agents): a user's subclass
 * may take options of its own and pass them on to `super`, so its options are not checked here.
 * @internal
 */
export const STRICT_OPTIONS = new WeakSet<object>();

/** The keys of {@link RestoreOptions}: any other is an `InvalidOptionError`. */
const RESTORE_OPTIONS = optionKeys<RestoreOptions>({ hooks: true, unresolvedHooks: true, onWarning: true });

/** The keys of {@link ToStateOptions}: any other is an `InvalidOptionError`. */
const TO_STATE_OPTIONS = optionKeys<ToStateOptions>({ history: true });

/** The keys of `registerTool`'s options. */
const REGISTER_TOOL_OPTIONS = optionKeys<{ replace?: boolean }>({ replace: true });

/** The keys of {@link AgentOptions}: any other is an `InvalidOptionError` (built-in agent classes). */
const AGENT_OPTIONS = optionKeys<AgentOptions>({
  name: true,
  uuid: true,
  history: true,
  currentTaskId: true,
  hooks: true,
  prompt: true,
  apiProvider: true,
  apiKeyEnv: true,
  modelName: true,
  maxTokens: true,
  stream: true,
  fcModel: true,
  toolTimeout: true,
  toolMaxWorkers: true,
});

/** Tool-call hooks and their events are defined with the tool runner that calls them. */
export type { ToolHook, ToolHookEvent } from "./tools.js";

/** Options of the agent constructors: the `[CONFIG]` fields plus identity and initial state. */
export interface AgentOptions extends AgentConfigInput {
  /**
   * Agent name (`[META] agent_name`; the key under the `name` key strategy, where a fresh agent
   * continues the session already stored under its name: see `configure({ keyStrategy })`). @default "agent"
   */
  name?: string;
  /** Agent identity. @default a random v4 UUID */
  uuid?: string;
  /** Initial history, in the protocol's message shape (validated). @default [] */
  history?: Message[];
  /** Initial task id. @default null */
  currentTaskId?: string | null;
  /** Initial tool-call hooks. @default [] */
  hooks?: ToolHook[];
}

/** The static side of an agent class, as `fromState` / `loadState` use it. */
export interface AgentConstructor<T extends BaseAgent = BaseAgent> {
  new (options?: AgentOptions): T;
  readonly name: string;
  readonly protocol: Protocol;
  readonly persistentFields?: readonly string[];
  readonly persistentSchema?: z.ZodObject | undefined;
}

/** Above 0 while `fromState` constructs an agent from a stored state (no credential check at construction). */
let restoring = 0;

/** Properties of `BaseAgent` that a subclass may not declare as persistent fields (they are saved already). */
const RESERVED_FIELDS = new Set([
  "uuid",
  "name",
  "config",
  "history",
  "currentTaskId",
  "hooks",
  "protocol",
  "constructor",
  "__proto__",
  "prototype",
]);

function configError(error: z.ZodError, prefix: string): InvalidStateError {
  const issue = error.issues[0];
  const where = [prefix, ...(issue?.path ?? []).map(String)].filter((x) => x !== "").join(".");
  return new InvalidStateError(where, issue?.message ?? "invalid value", { cause: error });
}

/**
 * {@link declaredFieldNames}' last answer per class, with the `persistentFields` lists it was built
 * from (each list and a copy of its names, from the class up): asked at every save, it is rebuilt
 * only when a class of the chain declares other names.
 */
const fieldNames = new WeakMap<AgentConstructor, { lists: unknown[]; copies: unknown[][]; names: string[] }>();

/** The own `persistentFields` lists of a class and its ancestors, from the class up (absent ones skipped). */
function ownFieldLists(ctor: AgentConstructor): unknown[] {
  const lists: unknown[] = [];
  for (let c: unknown = ctor; typeof c === "function" && c !== Function.prototype; c = Object.getPrototypeOf(c)) {
    if (Object.hasOwn(c, "persistentFields")) lists.push((c as AgentConstructor).persistentFields);
  }
  return lists;
}

/**
 * Every persistent field name declared on a class and its ancestors (the array is shared: not to be changed).
 *
 * @throws {InvalidStateError} for a name a subclass may not persist
 */
function declaredFieldNames(ctor: AgentConstructor): string[] {
  const lists = ownFieldLists(ctor);
  const memo = fieldNames.get(ctor);
  if (memo !== undefined && sameFieldLists(lists, memo)) return memo.names;
  const names = computeFieldNames(ctor);
  fieldNames.set(ctor, {
    lists,
    copies: lists.map((l) => (Array.isArray(l) ? [...(l as unknown[])] : [])),
    names,
  });
  return names;
}

function sameFieldLists(lists: unknown[], memo: { lists: unknown[]; copies: unknown[][] }): boolean {
  if (lists.length !== memo.lists.length) return false;
  for (let i = 0; i < lists.length; i++) {
    const list = lists[i];
    const copy = memo.copies[i] as unknown[];
    if (list !== memo.lists[i] || !Array.isArray(list) || list.length !== copy.length) return false;
    for (let j = 0; j < copy.length; j++) if (list[j] !== copy[j]) return false;
  }
  return true;
}

function computeFieldNames(ctor: AgentConstructor): string[] {
  const names = new Set<string>();
  const chain: AgentConstructor[] = [];
  for (let c: unknown = ctor; typeof c === "function" && c !== Function.prototype; c = Object.getPrototypeOf(c)) {
    chain.unshift(c as AgentConstructor);
  }
  for (const c of chain) {
    if (!Object.hasOwn(c, "persistentFields")) continue;
    for (const n of c.persistentFields ?? []) {
      if (typeof n !== "string" || n === "" || RESERVED_FIELDS.has(n)) {
        throw new InvalidStateError(
          `state.fields.${String(n)}`,
          `${c.name}.persistentFields lists ${JSON.stringify(n)}, which is not a name a subclass may persist`,
        );
      }
      names.add(n);
    }
  }
  return [...names];
}

/**
 * An agent speaking the OpenAI chat-completions protocol (`protocol: "openai"`),
 * saved as class `dumplings-ai:BaseAgent`.
 *
 * @example
 * const agent = new BaseAgent({ name: "weather", prompt: "You are terse.", apiProvider: "https://api.openai.com/v1",
 *   apiKeyEnv: "OPENAI_API_KEY", modelName: "gpt-4o-mini" });
 * agent.history.push({ role: "user", content: "hi" });
 * await agent.saveState("weather-1");
 * const again = await BaseAgent.loadState("weather-1");
 *
 * @example
 * // A subclass with persistent fields
 * export class NotesAgent extends BaseAgent {
 *   static override persistentFields = ["notes"];
 *   notes: string[] = [];
 * }
 * registerAgentClass(NotesAgent, import.meta.url);
 */
export class BaseAgent extends EventEmitter {
  /** The message protocol of this class's history. */
  static readonly protocol: Protocol = "openai";
  /** Names of instance properties saved in `[STATE]` (JSON values), in addition to the ancestors'. @default [] */
  static readonly persistentFields: readonly string[] = [];
  /** A zod object schema of persistent fields, encoded to JSON on save and decoded on load. @default undefined */
  static readonly persistentSchema: z.ZodObject | undefined = undefined;

  /** Stable identity (a v4 UUID unless given). */
  readonly uuid: string;
  /** Agent name. */
  name: string;
  /** Configuration (the `.duas` `[CONFIG]` section). The API key itself is never here: only `apiKeyEnv`. */
  config: AgentConfig;
  /** The conversation in the protocol's own message shape. Treat stored messages as immutable: replace one to edit it. */
  history: Message[];
  /** Id of the current (or last) turn, or null. */
  currentTaskId: string | null;
  /** Tool-call hooks, called around every tool call. */
  hooks: ToolHook[];
  /** This agent's own tools by name (process-wide tools from `registerGlobalTool` are added at call time). */
  readonly tools: Map<string, ToolDefinition> = new Map();
  /** Saved hook names that could not be resolved on load: kept and saved again. */
  protected unresolvedHookNames: string[] = [];
  /** Saved `[STATE]` fields this class does not declare: kept and saved again, never dropped. */
  protected undeclaredFields: Record<string, JsonValue> = {};

  /**
   * @param options - config fields (`prompt`, `apiProvider`, `apiKeyEnv`, `modelName`, `maxTokens`, `stream`,
   *   `fcModel`, `toolTimeout` in seconds, `toolMaxWorkers`) plus `name`, `uuid`, `history`, `currentTaskId`, `hooks`
   * @throws {InvalidStateError} naming the field (`config.maxTokens`, `history[2]`, …) for an invalid option
   * @throws {CredentialError} (`CREDENTIAL_REFUSED`) naming `config.apiKeyEnv`, `config.apiProvider` or
   *   `config.modelName` when it looks like a credential (`apiKeyEnv: "sk-…"`: the key where the NAME of
   *   its env var belongs), or when `apiKeyEnv` is not an env-var name; the value is never in the message
   */
  constructor(options: AgentOptions = {}) {
    super();
    if (STRICT_OPTIONS.has(new.target)) checkOptions(new.target.name, options, AGENT_OPTIONS);
    const { name, uuid, history, currentTaskId, hooks, ...config } = options;
    const parsed = AgentConfigSchema.safeParse(config);
    if (!parsed.success) throw configError(parsed.error, "config");
    // A key where the NAME of its env var belongs is refused now, not at the first save. A stored
    // state is restored as it is (fromState): its save refuses it, naming the field.
    if (restoring === 0) assertNoCredentials(parsed.data);
    this.config = parsed.data;
    if (name !== undefined && typeof name !== "string") throw new InvalidStateError("name", "must be a string");
    this.name = name ?? "agent";
    if (uuid !== undefined && (typeof uuid !== "string" || uuid === "")) {
      throw new InvalidStateError("uuid", "must be a non-empty string");
    }
    this.uuid = uuid ?? randomUUID();
    this.currentTaskId = currentTaskId ?? null;
    this.hooks = [...(hooks ?? [])];
    this.history = [];
    if (history !== undefined) {
      const schema = messageSchemaFor(this.protocol);
      history.forEach((m, i) => {
        const r = schema.safeParse(m);
        if (!r.success) throw configError(r.error, `history[${i}]`);
      });
      this.history = [...history];
    }
  }

  /** The message protocol of this agent's history (`openai` or `anthropic`). */
  get protocol(): Protocol {
    return (this.constructor as AgentConstructor).protocol;
  }

  /**
   * Adds a tool-call hook.
   *
   * @param hook - called with a {@link ToolHookEvent} before/after/on error of every tool call
   * @returns a function that removes the hook
   * @example
   * const off = agent.registerToolHook((e) => console.log(e.type, e.toolName, e.durationMs));
   */
  registerToolHook(hook: ToolHook): () => void {
    if (typeof hook !== "function") throw new TypeError("a tool hook must be a function");
    this.hooks.push(hook);
    return () => {
      const i = this.hooks.indexOf(hook);
      if (i >= 0) this.hooks.splice(i, 1);
    };
  }

  /**
   * Adds a tool this agent's model may call (it overrides a process-wide tool of the same name).
   * An AI SDK `tool()` is accepted, named: `registerTool("weather", weatherTool)` or
   * `registerTool({ name: "weather", ...weatherTool })`; its `inputSchema` is the parameter list the
   * model gets. A key the agent loop cannot honour (`needsApproval`, `toModelOutput`, a typo) is refused.
   *
   * @param tool - `{ name, description, parameters (zod or JSON Schema) | inputSchema (AI SDK schema),
   *   execute(args, { toolCallId, taskId, signal, abortSignal }) }`, or the tool's name followed by an AI SDK tool
   * @param options - `replace`: overwrite this agent's tool of the same name @default false
   * @returns the agent (chainable)
   * @throws {ToolRegistrationError} for an invalid definition, an unknown or unsupported key, or a name this agent already has
   * @example
   * agent.registerTool({ name: "add", parameters: z.object({ a: z.number(), b: z.number() }), execute: ({ a, b }) => a + b });
   * agent.registerTool("weather", tool({ description: "Weather", inputSchema: z.object({ city: z.string() }), execute: ({ city }) => `sunny in ${city}` }));
   */
  registerTool(name: string, tool: Tool, options?: { replace?: boolean }): this;
  registerTool<Args>(tool: ToolDefinition<Args>, options?: { replace?: boolean }): this;
  registerTool(tool: NamedAiSdkTool, options?: { replace?: boolean }): this;
  registerTool(
    toolOrName: ToolDefinition | NamedAiSdkTool | string,
    toolOrOptions?: Tool | { replace?: boolean },
    maybeOptions?: { replace?: boolean },
  ): this {
    const named = typeof toolOrName === "string";
    const tool = named ? fromAiSdkTool(toolOrName, toolOrOptions as Tool) : (toolOrName as ToolDefinition);
    const options = (named ? maybeOptions : (toolOrOptions as { replace?: boolean } | undefined)) ?? {};
    checkOptions("registerTool", options, REGISTER_TOOL_OPTIONS);
    assertTool(tool);
    if (this.tools.has(tool.name) && !options.replace) {
      throw new ToolRegistrationError(
        tool.name,
        "already registered on this agent; pass { replace: true } to replace it",
      );
    }
    this.tools.set(tool.name, tool);
    return this;
  }

  /**
   * Runs one conversation turn: appends the user message, calls the model, runs the tools it asks for
   * (function-calling mode) and calls it again until it answers. The outermost call saves the agent
   * once (auto-save, when persistence is enabled) when it returns or throws; a failed save is emitted
   * as `persistError` and never fails the turn. See `conversation.ts` for the crash-safety rules.
   *
   * @param input - the user's text or a user message in the protocol's shape
   * @param options - `stream`, `onToken`, `maxRounds` (default 16), `signal`, `repair` (`"interrupted"`|`"rerun"`),
   *   `checkpoint` (`"turn"`|`"message"`), `maxRetries`
   * @returns `{ message, text, taskId, rounds, toolCalls, usage }`
   * @throws {MaxRoundsError} / {ModelCallError} / {StreamInterruptedError} / {ModelConfigError} (after the auto-save)
   * @example
   * const { text } = await agent.conversationWithTool("What's the weather in Paris?");
   */
  conversationWithTool(input: string | Message, options: TurnOptions = {}): Promise<TurnResult> {
    return conversationWithTool(this, input, options, this.turnRuntime());
  }

  /**
   * Continues the conversation without a new user message — after a crash, a resumed session calls
   * this to finish the interrupted turn (with `repair: "rerun"` the missing tool results are
   * produced by running the tools again). Saves like {@link BaseAgent.conversationWithTool}.
   *
   * @param options - as for `conversationWithTool`
   * @returns the turn result
   * @example
   * const agent = await loadState("s1"); if (agent.pendingToolCalls().length) await agent.resumeTurn({ repair: "rerun" });
   */
  resumeTurn(options: TurnOptions = {}): Promise<TurnResult> {
    return conversationWithTool(this, null, options, this.turnRuntime());
  }

  /**
   * Runs a streamed turn and exposes the tokens as an async iterator.
   *
   * @param input - the user's text or message
   * @param options - as for `conversationWithTool` (`stream` is forced on)
   * @returns `{ tokens: AsyncIterable<string>, result: Promise<TurnResult> }`
   * @example
   * const { tokens, result } = agent.conversationStream("Tell me a story");
   * for await (const t of tokens) process.stdout.write(t);
   */
  conversationStream(
    input: string | Message,
    options: Omit<TurnOptions, "stream" | "onToken"> = {},
  ): { tokens: AsyncIterable<string>; result: Promise<TurnResult> } {
    return streamTurn((onToken) => this.conversationWithTool(input, { ...options, stream: true, onToken }));
  }

  /**
   * Tool calls in the history that have no result (left by a crash). A turn repairs them by policy.
   *
   * @returns the unanswered calls (`index` of their assistant message, `id`, `name`, `arguments`)
   */
  pendingToolCalls(): PendingToolCall[] {
    return findPendingToolCalls(this.protocol, this.history);
  }

  /**
   * Repairs the history now (as the next turn would) and emits `repair` when something changed.
   *
   * @param policy - `"interrupted"` (default) answers unanswered calls as interrupted
   * @returns the actions taken (empty when the history was valid)
   */
  repairHistory(policy: RepairPolicy = "interrupted"): RepairAction[] {
    const r = repairHistory(this.protocol, this.history, policy);
    if (r.actions.length > 0) {
      this.history = r.history;
      this.emit("repair", r.actions);
    }
    return r.actions;
  }

  /** Tools, hooks and the auto-save callback the conversation loop uses for this agent. */
  protected turnRuntime() {
    return {
      tools: effectiveTools(this.tools),
      hooks: this.hooks,
      persist: async (): Promise<boolean> => (isEnabled() ? autoSave(this) : true),
      // Under keyStrategy "name", a fresh agent whose name holds a stored session continues it.
      prepare: async (): Promise<void> => {
        if (!isEnabled()) return;
        await continueStoredSession(this, (state) =>
          this.restoreState(state, { hooks: this.hooks, unresolvedHooks: this.unresolvedHookNames }),
        );
      },
    };
  }

  /** Saved names of the hooks (registered ones), plus unresolved names kept from a load. */
  protected hookNames(): string[] {
    const names: string[] = [];
    for (const fn of this.hooks) {
      const name = hookFunctionName(fn);
      if (name !== undefined) {
        if (!names.includes(name)) names.push(name);
        continue;
      }
      const warning = unregisteredHookWarning(fn);
      if (warning !== undefined) this.warn(warning);
    }
    for (const name of this.unresolvedHookNames) if (!names.includes(name)) names.push(name);
    return names;
  }

  /** Emits `persistWarning`; logged (the library's logger, default the console) only when nobody listens. */
  protected warn(warning: PersistenceWarning): void {
    if (!this.emit("persistWarning", warning)) defaultWarn(warning);
  }

  /**
   * The values of the persistent fields, as JSON.
   *
   * @returns field name → JSON value (undeclared fields from a load included)
   * @throws {NonJsonValueError} naming `state.fields.<name>…` for a value JSON cannot carry
   * @throws {InvalidStateError} when a `persistentSchema` rejects a value
   */
  protected persistentFieldValues(): Record<string, JsonValue> {
    const ctor = this.constructor as AgentConstructor;
    const fields: Record<string, JsonValue> = { ...this.undeclaredFields };
    const self = this as unknown as Record<string, unknown>;
    const schema = ctor.persistentSchema;
    if (schema !== undefined) {
      const input: Record<string, unknown> = {};
      for (const k of Object.keys(schema.shape)) input[k] = self[k];
      const r = schema.safeEncode(input);
      if (!r.success) throw configError(r.error, "state.fields");
      for (const [k, v] of Object.entries(r.data as Record<string, unknown>)) {
        if (v === undefined) continue;
        assertJson(v, `state.fields.${k}`);
        fields[k] = structuredClone(v);
      }
    }
    for (const f of declaredFieldNames(ctor)) {
      const v = self[f];
      if (v === undefined) {
        delete fields[f];
        continue;
      }
      assertJson(v, `state.fields.${f}`);
      fields[f] = structuredClone(v);
    }
    return fields;
  }

  /**
   * The complete state of the agent, as stored by every backend.
   *
   * @returns `{ meta, config, state: { currentTaskId, hooks, fields }, history }`; `history` is a shallow copy
   * @throws {RegistrationError} when the agent's class is not registered (see `registerAgentClass`)
   * @throws {NonJsonValueError} for a persistent field JSON cannot carry
   * @throws {InvalidStateError} for an invalid config value, or a `history` that is not an array
   * @example
   * const state = agent.toState(); state.meta.class // "dumplings-ai:BaseAgent"
   */
  toState(): AgentState;
  /**
   * The state without its history (`{ history: false }`): meta (its `messageCount` is the
   * history's length), config and state, with no copy of a long history. The persistence layer
   * saves this way and copies only the messages a save adds.
   *
   * @param options - `{ history: false }`
   * @returns `{ meta, config, state }`
   * @throws {InvalidOptionError} for an unknown option; otherwise as `toState()`
   * @example
   * const { meta } = agent.toState({ history: false }); meta.messageCount // agent.history.length
   */
  toState(options: ToStateOptions): AgentState | AgentStateHeader;
  toState(options?: ToStateOptions): AgentState | AgentStateHeader {
    checkOptions("toState", options, TO_STATE_OPTIONS);
    const history: unknown = this.history;
    if (!Array.isArray(history)) {
      // `agent.history = null` (or a string): a typed error, not the TypeError of reading its length
      const got = history === null ? "null" : typeof history;
      throw new InvalidStateError("history", `must be an array of messages, got ${got}`);
    }
    const ctor = this.constructor as AgentConstructor;
    const className = agentClassName(ctor);
    const config = this.validatedConfig();
    const header: AgentStateHeader = {
      meta: {
        formatVersion: FORMAT_VERSION,
        schemaVersion: packageVersion(),
        agentUuid: this.uuid,
        agentName: this.name,
        protocol: ctor.protocol,
        class: className,
        savedAt: new Date().toISOString(),
        messageCount: this.history.length,
      },
      config,
      state: {
        currentTaskId: this.currentTaskId,
        hooks: this.hookNames(),
        fields: this.persistentFieldValues(),
      },
    };
    return options?.history === false ? header : { ...header, history: [...this.history] };
  }

  /** Last config validated by {@link BaseAgent.validatedConfig}: a shallow copy of it, and its parsed form. */
  #configCache: { input: Record<string, unknown>; data: AgentConfig } | undefined;

  /**
   * The config, validated (re-validated only when it changed since the last call: every
   * field compared, O(fields), so a 50 MB prompt is not serialised again at every save).
   *
   * @returns a copy of the config with every field present
   * @throws {InvalidStateError} naming the invalid field
   */
  protected validatedConfig(): AgentConfig {
    if (this.#configCache === undefined || !sameFlatObject(this.config, this.#configCache.input)) {
      const parsed = AgentConfigSchema.safeParse(this.config);
      if (!parsed.success) throw configError(parsed.error, "config");
      this.#configCache = { input: { ...this.config }, data: parsed.data };
    }
    return { ...this.#configCache.data };
  }

  /**
   * Rebuilds an agent of this class from a stored state (no storage involved).
   *
   * @param state - a validated state (e.g. from a backend or `decodeState`)
   * @param options - pre-resolved `hooks`, `unresolvedHooks`, `onWarning`; without `hooks`, saved hook
   *   names are resolved from the hook registry (a missing one is skipped with a warning)
   * @returns the agent, with the saved uuid, name, config, history, task id, hooks and persistent fields
   * @throws {InvalidStateError} when the state's protocol is not this class's, or a persistent field fails its schema
   * @example
   * const copy = BaseAgent.fromState(agent.toState());
   */
  static fromState<T extends BaseAgent>(this: AgentConstructor<T>, state: AgentState, options: RestoreOptions = {}): T {
    checkOptions("fromState", options, RESTORE_OPTIONS);
    if (state.meta.protocol !== this.protocol) {
      throw new InvalidStateError(
        "meta.protocol",
        `the state of agent ${JSON.stringify(state.meta.agentName)} uses protocol ${state.meta.protocol}, but ${this.name} speaks ${this.protocol}`,
      );
    }
    let agent: T;
    restoring++;
    try {
      agent = new this({ ...state.config, name: state.meta.agentName, uuid: state.meta.agentUuid });
    } finally {
      restoring--;
    }
    agent.restoreState(state, options);
    return agent;
  }

  /**
   * Fills this freshly constructed agent from a state (history, task id, hooks, persistent fields).
   * Subclasses may override it to restore more, calling `super.restoreState` first.
   *
   * @param state - the stored state
   * @param options - see {@link BaseAgent.fromState}
   */
  protected restoreState(state: AgentState, options: RestoreOptions = {}): void {
    this.history = [...state.history];
    this.currentTaskId = state.state.currentTaskId;
    if (options.hooks !== undefined) {
      this.hooks = [...(options.hooks as ToolHook[])];
      this.unresolvedHookNames = [...(options.unresolvedHooks ?? [])];
    } else {
      const r = resolveHooksSync(state.state.hooks, options.onWarning ?? defaultWarn);
      this.hooks = r.hooks as ToolHook[];
      this.unresolvedHookNames = r.unresolved;
    }
    const ctor = this.constructor as AgentConstructor;
    const saved = state.state.fields;
    const declared = new Set(declaredFieldNames(ctor));
    const schema = ctor.persistentSchema;
    const schemaKeys = new Set(schema ? Object.keys(schema.shape) : []);
    const self = this as unknown as Record<string, unknown>;
    if (schema !== undefined) {
      const input: Record<string, unknown> = {};
      for (const k of schemaKeys) if (Object.hasOwn(saved, k)) input[k] = saved[k];
      const r = schema.partial().safeDecode(input);
      if (!r.success) throw configError(r.error, "state.fields");
      for (const [k, v] of Object.entries(r.data as Record<string, unknown>)) if (v !== undefined) self[k] = v;
    }
    this.undeclaredFields = {};
    for (const [k, v] of Object.entries(saved)) {
      if (schemaKeys.has(k)) continue;
      if (declared.has(k)) self[k] = v;
      else this.undeclaredFields[k] = v;
    }
    // A history the provider would reject (a tool result without its call, a malformed call, an empty
    // assistant turn) is reported now, not at the first request; the next turn repairs it before sending.
    // Calls without results are not reported: they are a turn cut by a crash (see pendingToolCalls).
    const problems = repairHistory(this.protocol, this.history, "rerun").actions.filter(
      (a) => a.kind !== "interrupted-result-added",
    );
    if (problems.length > 0) {
      const listed = problems
        .slice(0, 5)
        .map((a) => `${a.kind} at message ${a.index}${a.toolCallId ? ` (${a.toolCallId})` : ""}`)
        .join(", ");
      (options.onWarning ?? defaultWarn)({
        code: "HISTORY_INVALID",
        name: this.name,
        message: `the history of agent ${JSON.stringify(this.name)} would be rejected by the provider as stored: ${listed}${problems.length > 5 ? `, and ${problems.length - 5} more` : ""}; the next turn sends it repaired (agent.repairHistory() fixes it now)`,
      });
    }
  }

  /**
   * Saves this agent (see `saveState` of the persistence API).
   *
   * @param key - the key @default its last key, else its uuid/name per the key strategy
   * @param options - `backend`, `ifRevision`, `force`
   * @returns `{ key, revision?, written, rewritten }`
   * @throws {ConflictError} / {CredentialError} / {NonJsonValueError} / {InvalidKeyError} / {BackendError}
   * @example
   * await agent.saveState("support-42");
   * await agent.saveState({ backend: "sqlite" }); // the default key
   */
  saveState(options: SaveOptions): Promise<SaveResult>;
  saveState(key?: string, options?: SaveOptions): Promise<SaveResult>;
  saveState(key?: string | SaveOptions, options?: SaveOptions): Promise<SaveResult> {
    if (typeof key === "object" && key !== null) return saveState(this, key as never, options);
    return saveState(this, key, options);
  }

  /**
   * The `.duas` text of this agent's state.
   *
   * @returns the text
   * @throws {CredentialError} / {NonJsonValueError} / {RegistrationError}
   */
  exportStateString(): string {
    return exportStateString(this);
  }

  /**
   * Loads an agent saved under `key` and checks that it is an instance of this class.
   *
   * @param key - the key
   * @param options - `backend`, `onWarning`, `register`, `onNameTaken`, `requireSecrets`
   * @returns the agent
   * @throws {StateNotFoundError} / {FormatError} / {AgentNotFoundError} (also when the stored agent is of another class)
   * @example
   * const agent = await AnthropicAgent.loadState("claude-session");
   */
  static async loadState<T extends BaseAgent>(
    this: AgentConstructor<T>,
    key: string,
    options?: LoadOptions,
  ): Promise<T> {
    const agent = await loadState(key, options);
    return checkClass(this, agent, `key ${JSON.stringify(key)}`);
  }

  /**
   * Rebuilds an agent from `.duas` text and checks that it is an instance of this class.
   *
   * @param text - the `.duas` text
   * @param options - `onWarning`, `register`, `onNameTaken`, `requireSecrets`, `source`
   * @returns the agent
   * @throws {FormatError} / {AgentNotFoundError}
   */
  static async loadStateString<T extends BaseAgent>(
    this: AgentConstructor<T>,
    text: string,
    options?: Omit<LoadOptions, "backend"> & { source?: string },
  ): Promise<T> {
    const agent = await loadStateString(text, options);
    return checkClass(this, agent, options?.source ?? "the .duas string");
  }
}

function checkClass<T extends BaseAgent>(cls: AgentConstructor<T>, agent: unknown, label: string): T {
  if (agent instanceof cls) return agent as T;
  const actual = (agent as { constructor?: { name?: string } })?.constructor?.name ?? typeof agent;
  throw new AgentNotFoundError(
    cls.name,
    `${label} holds an agent of class ${actual}, not a ${cls.name}; load it with loadState(key) or ${actual}.loadState(key)`,
  );
}

registerAgentClass(BaseAgent, "dumplings-ai", "BaseAgent");
STRICT_OPTIONS.add(BaseAgent);
