/**
 * The process-wide agent registry: `agentList` (live agents by name),
 * agent templates (`defineTemplate` / `activateTemplate`), and
 * `resolveNameClash`, the policy deciding what happens when an agent is
 * added under a name that is already taken (`checkPermission` is its
 * deprecated old name).
 *
 * Who is in `agentList`: agents created by `activateTemplate(name)`, agents
 * added with `agentList.add(agent)`, and agents loaded with
 * `loadState(key, { register: true })`. Plain `new BaseAgent(...)` and plain
 * loads are NOT added: a process-wide list that every load wrote to would
 * keep every agent alive forever and make loading the same session twice an
 * error.
 *
 * The registry also helps loading: when a saved class cannot be resolved
 * from the class registry or an allowed import, an agent in `agentList` with
 * the saved uuid (else the saved name) lends its class — so
 * `activateTemplate("support")` before `loadState(key)` restores a
 * "support" session even when its class module cannot be imported.
 *
 * @module
 */
import { DumplingsError } from "../core/errors.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { type NameTakenPolicy, setLoadedAgentRegistrar } from "../persistence/api.js";
import { type AgentClass, addClassFallback } from "../persistence/classes.js";
import { BaseAgent } from "./base-agent.js";

/** The keys of {@link AddAgentOptions}: any other is an `InvalidOptionError`. */
const REPLACE_OPTIONS = optionKeys<{ replace?: boolean }>({ replace: true });
const ADD_OPTIONS = optionKeys<AddAgentOptions>({
  onNameTaken: true,
});

/**
 * An agent name is already taken in `agentList` and the policy is `refuse`.
 *
 * Code: `AGENT_NAME_TAKEN`.
 */
export class AgentNameTakenError extends DumplingsError {
  /** The taken name. */
  readonly agentName: string;
  /** Uuid of the agent holding the name. */
  readonly existingUuid: string;
  /** Uuid of the agent that was refused. */
  readonly incomingUuid: string;
  constructor(name: string, existingUuid: string, incomingUuid: string) {
    super(
      "AGENT_NAME_TAKEN",
      `agent name ${JSON.stringify(name)} is already taken in agentList by agent ${existingUuid} (refused agent ${incomingUuid}); pass onNameTaken: "replace" or "rename", or remove the other agent first`,
    );
    this.agentName = name;
    this.existingUuid = existingUuid;
    this.incomingUuid = incomingUuid;
  }
}

/**
 * No template is defined under a name.
 *
 * Code: `TEMPLATE_NOT_FOUND`.
 */
export class TemplateNotFoundError extends DumplingsError {
  readonly templateName: string;
  constructor(name: string, known: readonly string[]) {
    super(
      "TEMPLATE_NOT_FOUND",
      `no agent template named ${JSON.stringify(name)}; defined templates: ${known.length ? known.join(", ") : "(none)"}`,
    );
    this.templateName = name;
  }
}

/** The outcome of {@link resolveNameClash}. */
export interface NameClashResolution {
  /** `add` (name free or held by the same agent), `replace` (evict the holder) or `rename` (use `name`). */
  action: "add" | "replace" | "rename";
  /** The name the incoming agent gets. */
  name: string;
}

/** Options of {@link AgentList.add} and {@link activateTemplate}. */
export interface AddAgentOptions {
  /** What to do when the name is taken by another agent. @default "refuse" */
  onNameTaken?: NameTakenPolicy;
}

/**
 * Live agents by name (a `Map`, so any name — `__proto__` included — is just a name).
 *
 * @example
 * agentList.add(agent);
 * agentList.get("support")?.history.length;
 */
export class AgentList implements Iterable<[string, BaseAgent]> {
  readonly #agents = new Map<string, BaseAgent>();

  /** Number of agents. */
  get size(): number {
    return this.#agents.size;
  }

  /** The agent of a name, if any. */
  get(name: string): BaseAgent | undefined {
    return this.#agents.get(name);
  }

  /** Whether a name is taken. */
  has(name: string): boolean {
    return this.#agents.has(name);
  }

  /** The agent with a uuid, if any. */
  findByUuid(uuid: string): BaseAgent | undefined {
    for (const a of this.#agents.values()) if (a.uuid === uuid) return a;
    return undefined;
  }

  /** Names, in insertion order. */
  keys(): IterableIterator<string> {
    return this.#agents.keys();
  }

  /** Agents, in insertion order. */
  values(): IterableIterator<BaseAgent> {
    return this.#agents.values();
  }

  /** `[name, agent]` pairs, in insertion order. */
  entries(): IterableIterator<[string, BaseAgent]> {
    return this.#agents.entries();
  }

  [Symbol.iterator](): IterableIterator<[string, BaseAgent]> {
    return this.#agents.entries();
  }

  /**
   * Adds an agent under its name, applying {@link resolveNameClash} when the name is taken.
   *
   * @param agent - the agent
   * @param options - `onNameTaken`: `refuse` (default), `replace` or `rename`
   * @returns the agent (renamed with `rename`)
   * @throws {AgentNameTakenError} with `refuse` when another agent holds the name
   * @example
   * agentList.add(agent, { onNameTaken: "rename" }); // "support" taken → becomes "support-2"
   */
  add(agent: BaseAgent, options: AddAgentOptions = {}): BaseAgent {
    if (!(agent instanceof BaseAgent)) throw new TypeError("agentList holds BaseAgent instances");
    checkOptions("agentList.add", options, ADD_OPTIONS);
    const decision = resolveNameClash(agent, options.onNameTaken ?? "refuse", this);
    agent.name = decision.name;
    this.#agents.set(decision.name, agent);
    return agent;
  }

  /**
   * Removes an agent by name, or the given agent instance.
   *
   * @returns true when something was removed
   */
  delete(nameOrAgent: string | BaseAgent): boolean {
    if (typeof nameOrAgent === "string") return this.#agents.delete(nameOrAgent);
    for (const [name, a] of this.#agents) if (a === nameOrAgent) return this.#agents.delete(name);
    return false;
  }

  /** Removes every agent. */
  clear(): void {
    this.#agents.clear();
  }
}

/** The process-wide list of live agents, by name. */
export const agentList = new AgentList();

/** Builds a fresh agent for a template; receives the template name. */
export type TemplateFactory = (name: string) => BaseAgent;

const templates = new Map<string, TemplateFactory>();

/**
 * Decides what happens when `incoming` is added under a name: free, or held
 * by the same instance → `add`; held by another agent → per `policy`:
 * `refuse` throws, `replace` evicts the holder, `rename` picks the first free
 * `name-2`, `name-3`, ….
 *
 * @param incoming - the agent being added (its `name` is the wanted name)
 * @param policy - `refuse` | `replace` | `rename` @default "refuse"
 * @param list - the list to check @default agentList
 * @returns the decision `{ action, name }`
 * @throws {AgentNameTakenError} with `refuse` when the name is held by another agent
 * @example
 * resolveNameClash(loaded, "rename") // { action: "rename", name: "support-2" }
 */
export function resolveNameClash(
  incoming: BaseAgent,
  policy: NameTakenPolicy = "refuse",
  list: AgentList = agentList,
): NameClashResolution {
  const name = incoming.name;
  const holder = list.get(name);
  if (holder === undefined || holder === incoming) return { action: "add", name };
  switch (policy) {
    case "replace":
      return { action: "replace", name };
    case "rename": {
      let i = 2;
      while (list.has(`${name}-${i}`)) i++;
      return { action: "rename", name: `${name}-${i}` };
    }
    case "refuse":
      throw new AgentNameTakenError(name, holder.uuid, incoming.uuid);
    default:
      throw new TypeError(`unknown name-taken policy ${JSON.stringify(policy)}; use "refuse", "replace" or "rename"`);
  }
}

/**
 * The old name of {@link resolveNameClash}: it never checked a permission, it resolves a name clash.
 *
 * @deprecated since 0.2, use `resolveNameClash`; removed in 0.3
 */
export const checkPermission: typeof resolveNameClash = resolveNameClash;

/**
 * The old name of {@link NameClashResolution}.
 *
 * @deprecated since 0.2, use `NameClashResolution`; removed in 0.3
 */
export type PermissionDecision = NameClashResolution;

/**
 * Defines (or with `replace`, redefines) an agent template.
 *
 * @param name - template name; the activated agent gets this name
 * @param factory - builds a fresh agent (any `BaseAgent` subclass)
 * @param options - `replace`: allow redefining @default false
 * @throws {DumplingsError} code `TEMPLATE_EXISTS` when the name is defined and `replace` is not set
 * @example
 * defineTemplate("support", () => new NotesAgent({ prompt: "You help customers." }));
 */
export function defineTemplate(name: string, factory: TemplateFactory, options: { replace?: boolean } = {}): void {
  checkOptions("defineTemplate", options, REPLACE_OPTIONS);
  if (typeof name !== "string" || name === "") throw new TypeError("a template name must be a non-empty string");
  if (typeof factory !== "function") throw new TypeError("a template factory must be a function");
  if (templates.has(name) && !options.replace) {
    throw new DumplingsError(
      "TEMPLATE_EXISTS",
      `agent template ${JSON.stringify(name)} is already defined; pass { replace: true } to redefine it`,
    );
  }
  templates.set(name, factory);
}

/**
 * Builds the template's agent, names it after the template and adds it to `agentList`.
 *
 * @param name - a defined template name
 * @param options - `onNameTaken` (see {@link resolveNameClash}) @default "refuse"
 * @returns the new agent
 * @throws {TemplateNotFoundError} listing the defined templates
 * @throws {AgentNameTakenError} when the name is taken and the policy is `refuse`
 * @example
 * const support = activateTemplate("support");
 */
export function activateTemplate(name: string, options: AddAgentOptions = {}): BaseAgent {
  checkOptions("activateTemplate", options, ADD_OPTIONS);
  const factory = templates.get(name);
  if (factory === undefined) throw new TemplateNotFoundError(name, [...templates.keys()].sort());
  const agent = factory(name);
  if (!(agent instanceof BaseAgent)) {
    throw new TypeError(`template ${JSON.stringify(name)} did not return a BaseAgent`);
  }
  agent.name = name;
  return agentList.add(agent, options);
}

/**
 * Names of the defined templates.
 *
 * @returns sorted names
 */
export function listTemplates(): string[] {
  return [...templates.keys()].sort();
}

/**
 * Forgets a template.
 *
 * @returns true when it was defined
 */
export function removeTemplate(name: string): boolean {
  return templates.delete(name);
}

// Loading: an agent in agentList lends its class to a state whose class cannot be resolved otherwise.
addClassFallback((meta) => {
  const live = agentList.findByUuid(meta.agentUuid) ?? agentList.get(meta.agentName);
  if (live === undefined || live.protocol !== meta.protocol) return undefined;
  return live.constructor as unknown as AgentClass;
});

setLoadedAgentRegistrar((agent, policy) => agentList.add(agent as BaseAgent, { onNameTaken: policy }));
