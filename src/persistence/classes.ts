/**
 * Class identity and hook identity of saved agents.
 *
 * A saved state names its agent class as `module:export` (`[META] class`)
 * and its tool-call hooks as `module:export` names (`[STATE] hooks`).
 * Built-in classes are `dumplings-ai:BaseAgent` and
 * `dumplings-ai:AnthropicAgent`. A user's class or hook is made persistable
 * with {@link registerAgentClass} / {@link registerHookFunction}, passing
 * `import.meta.url`: its saved module is then the file's path relative to
 * its package root (the nearest directory above it holding a
 * `package.json`), written `./src/agents/notes.ts` (or a package specifier
 * such as `my-pkg/agents` when a package name is passed instead).
 *
 * Loading resolves a name in this order, and runs no code the user did not
 * allow (DESIGN.md principle):
 * 1. the registry filled by `registerAgentClass` / `registerHookFunction`;
 * 2. a dynamic `import()` of the module, only when the module is listed in
 *    `configure({ allowImports })` (a file, a directory holding it, or a
 *    package name); the list is empty by default, so a stored state —
 *    a `.duas` file or a database row from elsewhere — can never make the
 *    process import a module nobody asked for, not even a file of the
 *    project itself (its top-level code would run). An allowed module may
 *    register itself when imported, or simply export the class/function
 *    under the saved name;
 * 3. for classes, the fallbacks installed by the agent layer (the
 *    `agentList` of live agents, filled by `activateTemplate(name)`);
 * 4. otherwise an {@link AgentNotFoundError} that names the class and says
 *    how to make it resolvable (classes), or a warning and the hook left
 *    unbound (hooks: the load succeeds, the name is kept and saved again).
 *
 * Saved module paths do not depend on the working directory: a worker
 * started from `/` (systemd, pm2, a container's `WORKDIR`, a monorepo root)
 * names a class as one started from the project root does. A file with no
 * `package.json` above it is named relative to the working directory. A
 * session saved by an earlier build (paths relative to the working
 * directory) still loads in a process started from that directory: the
 * registry also answers to that name. Compiling `src/x.ts` to `dist/x.js`
 * changes the path: pass a package specifier to keep one name across builds.
 * An allowed import of a file module is resolved against the package root
 * of the working directory.
 *
 * The class registry idea follows Python pickling's `module:qualname`
 * identity, with pickle's arbitrary imports replaced by an allow-list.
 *
 * @module
 */
import { existsSync, realpathSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { AgentNotFoundError } from "../core/errors.js";
import { log } from "../core/logger.js";
import type { Message, Protocol } from "../core/messages.js";
import { checkOptions, optionKeys } from "../core/options.js";
import type { AgentState, StateMeta } from "../core/state.js";
import { currentSettings } from "./config.js";
import { RegistrationError } from "./errors.js";

/** What the persistence layer needs from an agent instance. `BaseAgent` implements it. */
export interface PersistableAgent {
  /** Stable identity of the agent (a v4 UUID unless given). */
  readonly uuid: string;
  /** Agent name (`[META] agent_name`), used by the `name` key strategy. */
  name: string;
  /** The conversation, in the protocol's message shape. */
  history: Message[];
  /** Builds the complete state to store (see {@link AgentState}). */
  toState(): AgentState;
  /**
   * With `{ history: false }`, the agent may leave the history out (`BaseAgent` does): the
   * persistence layer then takes it from {@link PersistableAgent.history} and copies only the
   * messages a save adds. An agent that returns its history anyway is saved with that history.
   */
  toState(options: ToStateOptions): AgentState | AgentStateHeader;
  /** Event emitter: persistence emits `persistError` and `persistWarning` on the agent. */
  emit(event: string | symbol, ...args: unknown[]): boolean;
}

/** Options of an agent's `toState`. */
export interface ToStateOptions {
  /**
   * `false`: build the header only (meta, config, state; `meta.messageCount` is the history's
   * length), without copying the history. @default true
   */
  history?: boolean;
}

/** An agent state without its history: what `toState({ history: false })` returns. */
export type AgentStateHeader = Omit<AgentState, "history">;

/** A function saved by name in `[STATE] hooks` (a tool-call hook). */
// biome-ignore lint/suspicious/noExplicitAny: hooks of any signature can be registered by name
export type HookFunction = (...args: any[]) => unknown;

/** A non-fatal problem found while saving or loading (a hook that cannot be named or found). */
export interface PersistenceWarning {
  /**
   * `HOOK_NOT_FOUND` (load), `HOOK_NOT_REGISTERED` (save), or `SESSION_KEY_TAKEN`: under
   * `keyStrategy: "name"`, the agent's name holds another conversation, so this agent's is saved
   * under its uuid (named in the message) instead (see `continueStoredSession`); or `HISTORY_INVALID`
   * (load): the stored history holds what the provider would reject (a tool result without its call, a
   * malformed call, an empty assistant turn); the next turn sends it repaired, `agent.repairHistory()`
   * fixes it at once.
   */
  code: "HOOK_NOT_FOUND" | "HOOK_NOT_REGISTERED" | "SESSION_KEY_TAKEN" | "HISTORY_INVALID";
  /** Human-readable text, saying how to fix it. */
  message: string;
  /** The hook's saved `module:export` name, or the function's own name when unregistered; the agent's name for `HISTORY_INVALID`. */
  name: string;
}

/** Options a class's `fromState` receives from the persistence layer. */
export interface RestoreOptions {
  /** Hook functions already resolved from `state.state.hooks` (resolved from the registry when absent). */
  hooks?: HookFunction[];
  /** Saved hook names that could not be resolved: kept on the agent and saved again. */
  unresolvedHooks?: string[];
  /** Receives non-fatal warnings. @default one `warn` line to the library's logger (`configure({ logger })`; the console) */
  onWarning?: (warning: PersistenceWarning) => void;
}

/** An agent class the persistence layer can restore: a static `fromState`. `BaseAgent` and its subclasses are. */
export interface AgentClass<A extends PersistableAgent = PersistableAgent> {
  /** The class name (`Function.name`). */
  readonly name: string;
  /** The message protocol of the class's agents. */
  readonly protocol?: Protocol;
  /** Rebuilds an agent from a stored state. */
  fromState(state: AgentState, options?: RestoreOptions): A;
}

/** A fallback class resolver (installed by the agent layer): returns a class for a saved state, or undefined. */
export type ClassFallback = (meta: StateMeta) => AgentClass | undefined;

/** Options of {@link registerAgentClass} and {@link registerHookFunction}. */
export interface RegisterOptions {
  /** Replace a different class/function already registered under the same name. @default false */
  replace?: boolean;
}

const REGISTER_OPTIONS = optionKeys<RegisterOptions>({ replace: true });

const classesByName = new Map<string, AgentClass>();
const namesByClass = new Map<object, string>();
const hooksByName = new Map<string, HookFunction>();
const namesByHook = new Map<HookFunction, string>();
/** Names an earlier build saved (relative to the working directory), answered on load only. */
const classAliases = new Map<string, AgentClass>();
const hookAliases = new Map<string, HookFunction>();
const classFallbacks: ClassFallback[] = [];
const warnedHooks = new WeakSet<HookFunction>();

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const FILE_EXTENSION = /\.(?:[cm]?[jt]sx?)$/;
const PACKAGE_SPECIFIER = /^(?:@[a-z0-9][\w.~-]*\/)?[a-z0-9][\w.~-]*(?:\/[\w.~@-]+)*$/i;

function toPosix(p: string): string {
  return p.split(path.sep).join("/");
}

/** `packageRootOf` answers by directory (a process registers from a handful of them). */
const packageRoots = new Map<string, string | null>();

/**
 * The nearest directory at or above `dir` holding a `package.json`, or undefined.
 *
 * @param dir - an absolute directory
 */
function packageRootOf(dir: string): string | undefined {
  const seen: string[] = [];
  let root: string | null = null;
  for (let d = dir; ; ) {
    const known = packageRoots.get(d);
    if (known !== undefined) {
      root = known;
      break;
    }
    seen.push(d);
    if (existsSync(path.join(d, "package.json"))) {
      root = d;
      break;
    }
    const up = path.dirname(d);
    if (up === d) break;
    d = up;
  }
  for (const d of seen) packageRoots.set(d, root);
  return root ?? undefined;
}

/** The file a `file:` URL or an absolute path names, or undefined for anything else (a package specifier). */
function moduleFile(moduleUrl: string): string | undefined {
  if (moduleUrl.startsWith("file:")) return fileURLToPath(moduleUrl);
  return path.isAbsolute(moduleUrl) ? moduleUrl : undefined;
}

/** `./rel` or `../rel`: `file` relative to `base`, POSIX separators. */
function relativeModule(base: string, file: string): string {
  const rel = toPosix(path.relative(base, file));
  return rel.startsWith("../") ? rel : `./${rel}`;
}

/** True when a saved module names a file (`./x.ts`, `../x.js`, `/abs/x.ts`, `dir/x.ts`) rather than a package. */
function isFileModule(module: string): boolean {
  return module.startsWith("./") || module.startsWith("../") || path.isAbsolute(module) || FILE_EXTENSION.test(module);
}

/**
 * The saved module name for a `moduleUrl`: a `file:` URL or absolute path
 * becomes its path relative to its package root, the nearest directory above
 * it holding a `package.json` (`./src/x.ts`), whatever the working directory;
 * without one, relative to the working directory (`./x.ts`, or `../lib/x.ts`
 * outside it). Anything else must be a package specifier and is kept as is.
 *
 * @param moduleUrl - `import.meta.url` of the defining module, an absolute path, or a package specifier
 * @returns the module part of a `module:export` name
 * @throws {RegistrationError} when `moduleUrl` is neither
 * @example
 * savedModuleName(import.meta.url) // "./src/agents/notes.ts", from any working directory
 */
export function savedModuleName(moduleUrl: string): string {
  if (typeof moduleUrl !== "string" || moduleUrl === "") {
    throw new RegistrationError(String(moduleUrl), "a module URL is required: pass import.meta.url");
  }
  const file = moduleFile(moduleUrl);
  if (file !== undefined) return relativeModule(packageRootOf(path.dirname(file)) ?? process.cwd(), file);
  if (moduleUrl.startsWith("./") || moduleUrl.startsWith("../")) return moduleUrl;
  if (!PACKAGE_SPECIFIER.test(moduleUrl)) {
    throw new RegistrationError(
      moduleUrl,
      `${JSON.stringify(moduleUrl)} is neither a file URL (pass import.meta.url) nor a package specifier`,
    );
  }
  return moduleUrl;
}

function splitName(name: string): { module: string; exportName: string } | undefined {
  const at = name.lastIndexOf(":");
  if (at <= 0 || at === name.length - 1) return undefined;
  return { module: name.slice(0, at), exportName: name.slice(at + 1) };
}

/**
 * The name an earlier build saved for a file module (relative to the working directory), when it
 * differs from {@link savedModuleName}'s; undefined otherwise.
 */
function legacyName(moduleUrl: string, name: string): string | undefined {
  const file = moduleFile(moduleUrl);
  if (file === undefined) return undefined;
  const legacy = `${relativeModule(process.cwd(), file)}${name.slice(name.lastIndexOf(":"))}`;
  return legacy === name ? undefined : legacy;
}

function qualifiedName(moduleUrl: string, exportName: string, fallbackName: string): string {
  const exp = exportName || fallbackName;
  if (!IDENTIFIER.test(exp)) {
    throw new RegistrationError(
      exp || "(anonymous)",
      `export name ${JSON.stringify(exp)} is not a JavaScript identifier; pass the name it is exported under`,
    );
  }
  return `${savedModuleName(moduleUrl)}:${exp}`;
}

/**
 * Makes an agent class persistable under `module:export`.
 *
 * Built-in classes are registered as `dumplings-ai:BaseAgent` and
 * `dumplings-ai:AnthropicAgent`. Call this once in the module that defines
 * a subclass; registering the same class again under the same name is a no-op.
 *
 * @param cls - the class (it must have a static `fromState`, as `BaseAgent` subclasses do)
 * @param moduleUrl - `import.meta.url` of the defining module, or a package specifier
 * @param exportName - the name the class is exported under @default cls.name
 * @param options - `replace`: allow re-binding the name to another class
 * @returns the saved `module:export` name
 * @throws {RegistrationError} on a bad module or export name, or a name taken by another class without `replace`
 * @example
 * export class NotesAgent extends BaseAgent { static persistentFields = ["notes"]; notes: string[] = [] }
 * registerAgentClass(NotesAgent, import.meta.url); // saved as "./src/notes-agent.ts:NotesAgent"
 */
export function registerAgentClass(
  cls: AgentClass,
  moduleUrl: string,
  exportName?: string,
  options: RegisterOptions = {},
): string {
  checkOptions("registerAgentClass", options, REGISTER_OPTIONS);
  const candidate: unknown = cls;
  if (typeof candidate !== "function" || typeof (candidate as { fromState?: unknown }).fromState !== "function") {
    throw new RegistrationError(
      String((candidate as { name?: string } | undefined)?.name),
      "only classes with a static fromState (BaseAgent subclasses) can be registered",
    );
  }
  const name = qualifiedName(moduleUrl, exportName ?? "", cls.name);
  const existing = classesByName.get(name);
  if (existing !== undefined && existing !== cls && !options.replace) {
    throw new RegistrationError(
      name,
      `agent class name ${JSON.stringify(name)} is already registered to another class; pass { replace: true } to re-bind it`,
    );
  }
  if (existing !== undefined && existing !== cls) namesByClass.delete(existing);
  classesByName.set(name, cls);
  namesByClass.set(cls, name);
  const legacy = legacyName(moduleUrl, name);
  if (legacy !== undefined && !classesByName.has(legacy)) classAliases.set(legacy, cls);
  return name;
}

/**
 * Makes a hook function persistable under `module:export`, so that an agent's
 * hooks can be saved by name and re-bound on load.
 *
 * @param fn - the hook function
 * @param moduleUrl - `import.meta.url` of the defining module, or a package specifier
 * @param exportName - the name it is exported under @default fn.name
 * @param options - `replace`: allow re-binding the name to another function
 * @returns the saved `module:export` name
 * @throws {RegistrationError} on a bad name or a name taken by another function without `replace`
 * @example
 * export function auditHook(event) { console.log(event.type, event.toolName) }
 * registerHookFunction(auditHook, import.meta.url);
 * agent.registerToolHook(auditHook); // saved as "./src/hooks.ts:auditHook"
 */
export function registerHookFunction(
  fn: HookFunction,
  moduleUrl: string,
  exportName?: string,
  options: RegisterOptions = {},
): string {
  checkOptions("registerHookFunction", options, REGISTER_OPTIONS);
  if (typeof fn !== "function") throw new RegistrationError(String(fn), "a hook must be a function");
  const name = qualifiedName(moduleUrl, exportName ?? "", fn.name);
  const existing = hooksByName.get(name);
  if (existing !== undefined && existing !== fn && !options.replace) {
    throw new RegistrationError(
      name,
      `hook name ${JSON.stringify(name)} is already registered to another function; pass { replace: true } to re-bind it`,
    );
  }
  if (existing !== undefined && existing !== fn) namesByHook.delete(existing);
  hooksByName.set(name, fn);
  namesByHook.set(fn, name);
  const legacy = legacyName(moduleUrl, name);
  if (legacy !== undefined && !hooksByName.has(legacy)) hookAliases.set(legacy, fn);
  return name;
}

/**
 * The saved `module:export` name of an agent class.
 *
 * @param cls - the class
 * @returns its registered name
 * @throws {RegistrationError} when the class was never registered (nothing can be saved that could not be loaded)
 */
export function agentClassName(cls: { readonly name: string }): string {
  const name = namesByClass.get(cls);
  if (name === undefined) {
    throw new RegistrationError(
      cls.name,
      `agent class ${cls.name} is not registered, so a saved state could not be loaded back into it; call registerAgentClass(${cls.name}, import.meta.url) in the module that defines it`,
    );
  }
  return name;
}

/**
 * The saved `module:export` name of a hook function, or `undefined` when it was never registered.
 *
 * @param fn - the hook
 * @returns the name, or undefined
 */
export function hookFunctionName(fn: HookFunction): string | undefined {
  return namesByHook.get(fn);
}

/**
 * Reports (once per function) that a hook cannot be saved because it is not registered.
 * @internal used by `BaseAgent.toState`
 */
export function unregisteredHookWarning(fn: HookFunction): PersistenceWarning | undefined {
  if (warnedHooks.has(fn)) return undefined;
  warnedHooks.add(fn);
  const label = fn.name || "(anonymous)";
  return {
    code: "HOOK_NOT_REGISTERED",
    name: label,
    message: `tool hook ${label} is not saved with the agent because it is not registered; export it and call registerHookFunction(${fn.name || "fn"}, import.meta.url)`,
  };
}

/** The registered class for a `module:export` name (registry only, no import; an earlier build's name too). */
export function registeredAgentClass(name: string): AgentClass | undefined {
  return classesByName.get(name) ?? classAliases.get(name);
}

/** The registered hook function for a `module:export` name (registry only, no import; an earlier build's name too). */
export function registeredHookFunction(name: string): HookFunction | undefined {
  return hooksByName.get(name) ?? hookAliases.get(name);
}

/**
 * Installs a fallback class resolver, consulted after the registry and the
 * allowed imports (the agent layer installs the `agentList` lookup).
 *
 * @param fallback - returns a class for a saved state's meta, or undefined
 * @returns a function that removes the fallback
 */
export function addClassFallback(fallback: ClassFallback): () => void {
  classFallbacks.push(fallback);
  return () => {
    const i = classFallbacks.indexOf(fallback);
    if (i >= 0) classFallbacks.splice(i, 1);
  };
}

function isUnder(child: string, parent: string): boolean {
  const rel = path.relative(parent, child);
  return rel === "" || (!rel.startsWith("..") && !path.isAbsolute(rel));
}

function real(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return path.resolve(p);
  }
}

/** Where a saved module would be imported from, or why it may not be. */
type ImportDecision = { allowed: true; specifier: string } | { allowed: false; reason: string };

/**
 * Decides whether a saved module may be imported: only modules listed in
 * `configure({ allowImports })` — a file, a directory that holds it (paths
 * absolute or starting with `.`, resolved against the working directory and
 * through symlinks), or a package name (which also allows its subpaths).
 * Nothing else, not even a file of the project: the decision is made before
 * anything touches the module, so a refused module's code never runs.
 */
export function importDecision(module: string): ImportDecision {
  const allow = currentSettings().allowImports;
  if (isFileModule(module)) {
    const cwd = process.cwd();
    const abs = path.resolve(packageRootOf(cwd) ?? cwd, module);
    const listed = allow.some((entry) => {
      if (!(entry.startsWith(".") || path.isAbsolute(entry))) return false;
      return isUnder(real(abs), real(path.resolve(process.cwd(), entry)));
    });
    if (!listed) {
      return {
        allowed: false,
        reason: `module ${module} is not listed in configure({ allowImports }), so it was not imported`,
      };
    }
    if (!existsSync(abs)) return { allowed: false, reason: `module file ${abs} does not exist` };
    return { allowed: true, specifier: pathToFileURL(real(abs)).href };
  }
  if (allow.some((entry) => module === entry || module.startsWith(`${entry}/`))) {
    return { allowed: true, specifier: module };
  }
  return { allowed: false, reason: `package ${module} is not listed in configure({ allowImports })` };
}

async function importExport(
  name: string,
): Promise<{ value: unknown; found: boolean; reason?: string; cause?: unknown } | undefined> {
  const parts = splitName(name);
  if (parts === undefined) return { value: undefined, found: false, reason: "it is not a module:export name" };
  const decision = importDecision(parts.module);
  if (!decision.allowed) return { value: undefined, found: false, reason: decision.reason };
  let mod: Record<string, unknown>;
  try {
    mod = (await import(decision.specifier)) as Record<string, unknown>;
  } catch (cause) {
    return {
      value: undefined,
      found: false,
      reason: `importing ${parts.module} failed: ${(cause as Error)?.message ?? String(cause)}`,
      cause,
    };
  }
  if (!Object.hasOwn(mod, parts.exportName)) {
    return { value: undefined, found: false, reason: `module ${parts.module} has no export ${parts.exportName}` };
  }
  return { value: mod[parts.exportName], found: true };
}

/**
 * Resolves a saved class name to a class (registry → allowed import → fallbacks).
 *
 * @param meta - the saved state's meta (`class`, `agentUuid`, `agentName`)
 * @param label - what is being loaded, for the error (e.g. `key "s1"`)
 * @returns the class
 * @throws {AgentNotFoundError} naming the class and how to make it resolvable; never a partial agent
 */
export async function resolveAgentClass(meta: StateMeta, label = "state"): Promise<AgentClass> {
  const name = meta.class;
  const registered = registeredAgentClass(name);
  if (registered !== undefined) return registered;
  const imported = await importExport(name);
  // The module may have registered itself when imported.
  const afterImport = registeredAgentClass(name);
  if (afterImport !== undefined) return afterImport;
  let importProblem = imported?.reason;
  if (imported?.found) {
    const value = imported.value;
    if (typeof value === "function" && typeof (value as Partial<AgentClass>).fromState === "function") {
      const cls = value as unknown as AgentClass;
      if (!namesByClass.has(cls)) namesByClass.set(cls, name);
      classesByName.set(name, cls);
      return cls;
    }
    importProblem = `export ${name} is not an agent class (it has no static fromState)`;
  }
  for (const fallback of classFallbacks) {
    const cls = fallback(meta);
    if (cls !== undefined) return cls;
  }
  const parts = splitName(name);
  const exportName = parts?.exportName ?? name;
  throw new AgentNotFoundError(
    name,
    `cannot load ${label}: agent class ${JSON.stringify(name)} is not registered` +
      (importProblem ? `, ${importProblem}` : "") +
      `, and no agent in agentList has uuid ${meta.agentUuid} or name ${JSON.stringify(meta.agentName)}. ` +
      `Fix: import the module that defines ${exportName} and call registerAgentClass(${exportName}, import.meta.url) there before loading, ` +
      `or let loading import its module with configure({ allowImports: [${JSON.stringify(parts?.module ?? name)}] }), ` +
      `or activateTemplate(${JSON.stringify(meta.agentName)}) for an agent template of that name`,
    { cause: imported?.cause },
  );
}

/** Default warning sink: one line at `warn` to the library's logger (`configure({ logger })`; default the console). */
export function defaultWarn(warning: PersistenceWarning): void {
  log("warn", warning.message, { code: warning.code, name: warning.name });
}

/**
 * Resolves saved hook names synchronously (registry only).
 *
 * @param names - saved `module:export` names
 * @param onWarning - receives a `HOOK_NOT_FOUND` warning per missing hook
 * @returns the bound functions and the names that stay unresolved
 */
export function resolveHooksSync(
  names: readonly string[],
  onWarning: (w: PersistenceWarning) => void = defaultWarn,
): { hooks: HookFunction[]; unresolved: string[] } {
  const hooks: HookFunction[] = [];
  const unresolved: string[] = [];
  for (const name of names) {
    const fn = registeredHookFunction(name);
    if (fn !== undefined) hooks.push(fn);
    else {
      unresolved.push(name);
      onWarning(hookNotFound(name, "it is not registered"));
    }
  }
  return { hooks, unresolved };
}

function hookNotFound(name: string, reason: string): PersistenceWarning {
  const exportName = splitName(name)?.exportName ?? name;
  return {
    code: "HOOK_NOT_FOUND",
    name,
    message: `tool hook ${JSON.stringify(name)} was skipped: ${reason}; the agent loads without it and keeps the name for its next save. Call registerHookFunction(${exportName}, import.meta.url) in its module and import that module before loading, or let loading import it with configure({ allowImports: [${JSON.stringify(splitName(name)?.module ?? name)}] })`,
  };
}

/**
 * Resolves saved hook names: registry, then allowed imports. A hook that
 * cannot be found is skipped with a `HOOK_NOT_FOUND` warning; the load goes on.
 *
 * @param names - saved `module:export` names
 * @param onWarning - warning sink @default console.warn
 * @returns the bound functions and the names left unresolved
 */
export async function resolveHooks(
  names: readonly string[],
  onWarning: (w: PersistenceWarning) => void = defaultWarn,
): Promise<{ hooks: HookFunction[]; unresolved: string[] }> {
  const hooks: HookFunction[] = [];
  const unresolved: string[] = [];
  for (const name of names) {
    let fn = registeredHookFunction(name);
    let reason = "it is not registered";
    if (fn === undefined) {
      const imported = await importExport(name);
      fn = registeredHookFunction(name);
      if (fn === undefined && imported?.found) {
        if (typeof imported.value === "function") {
          fn = imported.value as HookFunction;
          hooksByName.set(name, fn);
          if (!namesByHook.has(fn)) namesByHook.set(fn, name);
        } else reason = `export ${name} is not a function`;
      } else if (fn === undefined && imported?.reason) reason = `it is not registered and ${imported.reason}`;
    }
    if (fn !== undefined) hooks.push(fn);
    else {
      unresolved.push(name);
      onWarning(hookNotFound(name, reason));
    }
  }
  return { hooks, unresolved };
}
