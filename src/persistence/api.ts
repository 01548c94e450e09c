/**
 * The persistence API: save, load, delete and list agent states through any
 * backend, export to and load from `.duas` text, and auto-save.
 *
 * Saving (`saveState`, `autoSave`):
 * 1. the key is the one given, else the key the agent was last loaded from
 *    or saved to, else its `uuid` or `name` (key strategy); it is checked
 *    with `validateKey` before any backend call. The backend is the one
 *    given, else — when saving under the key the agent was last loaded from
 *    or saved to (or under no key) — that key's backend, else the default
 *    backend (a new key follows `configure({ backend })`);
 * 2. the state is built: its header from `agent.toState({ history: false })`
 *    (an agent that returns a history anyway is saved with it) and the
 *    history from `agent.history`, copied in O(new messages) (see
 *    `saveSnapshot` in `tracker.ts`); its config checked for
 *    credentials ({@link assertNoCredentials}) and its values for JSON
 *    (a non-JSON value → `NonJsonValueError` naming the message index and
 *    path); nothing is written when a check fails;
 * 3. a backend with `write` gets a compare-and-set write:
 *    `expectedRevision` = the revision this agent instance last loaded or
 *    saved under that key (`null`, i.e. "create only", for an agent that
 *    never did: a fresh agent never silently overwrites a stored session;
 *    `ifRevision` overrides, `force` overwrites), and `baseLength` = the number of
 *    leading messages known to be stored unchanged (see `tracker.ts`: only
 *    those after it are sent — and JSON-checked — so a turn's save costs
 *    O(new messages)); a lost race is a `ConflictError` naming both
 *    revisions, `{ force: true }` overwrites on purpose;
 * 4. a backend with only the four seed methods gets a whole-state `save`.
 *
 * Saves of one agent instance are serialised (a save waits for the previous
 * one), so an auto-save and a manual save never race each other.
 *
 * Loading (`loadState`) resolves the saved class (`classes.ts`), re-binds
 * hooks, validates states coming from custom backends (schema, format
 * version; a missing `[STATE]` entry of an older record takes its default)
 * and never returns a partial agent.
 *
 * @module
 */

import { z } from "zod";
import { validateKey } from "../backends/keys.js";
import { isBackendNotFound, readFailure } from "../backends/not-found.js";
import { lendTexts, reclaimTexts } from "../backends/stored.js";
import type { StateBackend } from "../backends/types.js";
import { checkRevisionOption } from "../backends/write-options.js";
import { decodeState } from "../core/codec/bytes.js";
import { encodeState } from "../core/codec/encode.js";
import {
  BackendError,
  DumplingsError,
  FormatError,
  InvalidOptionError,
  InvalidStateError,
  StateNotFoundError,
} from "../core/errors.js";
import { assertJson, checkStoredJson, jsonShape } from "../core/json.js";
import { log } from "../core/logger.js";
import type { Message } from "../core/messages.js";
import { checkOptions, optionKeys, shownValue } from "../core/options.js";
import {
  AgentConfigSchema,
  AgentRuntimeStateSchema,
  type AgentState,
  checkFormatVersion,
  parseAgentState,
  StateMetaSchema,
} from "../core/state.js";
import {
  type AgentStateHeader,
  defaultWarn,
  type PersistableAgent,
  type PersistenceWarning,
  resolveAgentClass,
  resolveHooks,
} from "./classes.js";
import { backendLabel, currentSettings, resolveBackend } from "./config.js";
import {
  applyToolArgumentPolicy,
  assertNoCredentials,
  resolveApiKey,
  type ToolArgumentSecretsPolicy,
} from "./credentials.js";
import { UnsupportedOperationError } from "./errors.js";
import {
  abandonSnapshot,
  agentHome,
  computeBaseLength,
  forgetTrack,
  getTrack,
  type Home,
  type PolicyChecked,
  recordLoaded,
  recordSaved,
  saveSnapshot,
} from "./tracker.js";

/** Options of {@link saveState}. */
export interface SaveOptions {
  /** Backend name or instance. @default for the key the agent was last loaded from or saved to (or no key): that backend; for another key: the default backend */
  backend?: string | StateBackend;
  /**
   * Compare-and-set: save only if the stored revision is this one (`null`:
   * only if nothing is stored). @default the revision this agent last loaded or saved
   */
  ifRevision?: number | null;
  /** Overwrite whatever is stored, ignoring revisions. @default false */
  force?: boolean;
}

/** Result of {@link saveState}. */
export interface SaveResult {
  /** The key the state was saved under. */
  key: string;
  /** The new stored revision (backends with revisions only). */
  revision?: number;
  /** Number of history messages physically written by this save. */
  written: number;
  /** True when the whole history was (re)written rather than appended. */
  rewritten: boolean;
}

/** What to do when a loaded agent's name is already taken in `agentList` (see `resolveNameClash`). */
export type NameTakenPolicy = "refuse" | "replace" | "rename";

/** Options of {@link loadState} and {@link loadStateString}. */
export interface LoadOptions {
  /** Backend name or instance (not used by `loadStateString`). @default the configured default */
  backend?: string | StateBackend;
  /** Receives non-fatal warnings (a hook that cannot be found). @default one `warn` line to the library's logger (`configure({ logger })`; the console) */
  onWarning?: (warning: PersistenceWarning) => void;
  /** Also add the loaded agent to `agentList` (by name). @default false */
  register?: boolean;
  /** With `register`: what to do when its name is taken. @default "refuse" */
  onNameTaken?: NameTakenPolicy;
  /** Fail with `MissingSecretError` when the env var named by `apiKeyEnv` is not set. @default false */
  requireSecrets?: boolean;
}

/** Options of {@link deleteState}, {@link listStates} and {@link iterHistory}. */
export interface BackendOptions {
  /** Backend name or instance. @default the configured default */
  backend?: string | StateBackend;
}

const SAVE_OPTIONS = optionKeys<SaveOptions>({ backend: true, ifRevision: true, force: true });
const LOAD_OPTIONS = optionKeys<LoadOptions>({
  backend: true,
  onWarning: true,
  register: true,
  onNameTaken: true,
  requireSecrets: true,
});
const LOAD_STRING_OPTIONS = optionKeys<Omit<LoadOptions, "backend"> & { source?: string }>({
  onWarning: true,
  register: true,
  onNameTaken: true,
  requireSecrets: true,
  source: true,
});
const BACKEND_OPTIONS = optionKeys<BackendOptions>({ backend: true });

type Registrar = (agent: PersistableAgent, policy: NameTakenPolicy) => PersistableAgent;
let registrar: Registrar | undefined;

/**
 * Installs the function that adds loaded agents to `agentList` (the agent layer does, at import).
 * @internal
 */
export function setLoadedAgentRegistrar(fn: Registrar | undefined): void {
  registrar = fn;
}

const saving = new WeakMap<object, Promise<unknown>>();

function serialize<T>(agent: object, task: () => Promise<T>): Promise<T> {
  const previous = saving.get(agent) ?? Promise.resolve();
  const run = previous.then(task, task);
  saving.set(
    agent,
    run.catch(() => undefined),
  );
  return run;
}

function wrap(backend: StateBackend, what: string, key: string | undefined, e: unknown): never {
  if (e instanceof DumplingsError) throw e;
  throw new BackendError(backendLabel(backend), what, { key, cause: e });
}

/**
 * The agent's home backend when a call on `key` should use it: no backend
 * given, and no key or the home key (a session keeps saving where it lives).
 * A new key follows the current default backend instead.
 */
function homeBackend(home: Home | undefined, key: string | undefined, given: unknown): StateBackend | undefined {
  if (given !== undefined || home === undefined) return undefined;
  return key === undefined || key === home.key ? home.backend : undefined;
}

function defaultKey(agent: PersistableAgent): string {
  const strategy = currentSettings("keyStrategy").keyStrategy;
  return strategy === "name" ? agent.name : agent.uuid;
}

/** `toState`'s options for a save: the header only. */
const HEADER_ONLY = Object.freeze({ history: false });

function checkHeader(state: AgentStateHeader): void {
  assertNoCredentials(state.config);
  assertJson(state.meta, "meta");
  assertJson(state.config, "config");
  assertJson(state.state, "state");
}

/**
 * Refuses what is not an agent (null, a plain object, a string) before anything uses it: an
 * {@link InvalidOptionError} naming the call, not the TypeError of whatever touched it first.
 */
function assertAgent(call: string, agent: unknown): asserts agent is PersistableAgent {
  if (typeof agent !== "object" || agent === null || typeof (agent as { toState?: unknown }).toState !== "function") {
    const got = agent === null ? "null" : Array.isArray(agent) ? "an array" : typeof agent;
    throw new InvalidOptionError(
      call,
      "agent",
      `must be an agent (an object with toState(), such as a BaseAgent or what loadState returned), got ${got}`,
    );
  }
}

/** A history that is not an array (`agent.history = "oops"`): an {@link InvalidStateError}. */
function notAnArray(history: unknown): InvalidStateError {
  const got = history === null ? "null" : typeof history;
  return new InvalidStateError("history", `must be an array of messages, got ${got}`);
}

function checkHistory(history: readonly Message[], from: number): void {
  if (!Array.isArray(history)) throw notAnArray(history);
  for (let i = from; i < history.length; i++) {
    if (!(i in history)) assertJson(history, "history");
    assertJson(history[i], `history[${i}]`, i);
  }
}

/**
 * Checks the messages `from..` of a history to save (as {@link checkHistory}) and serialises them.
 *
 * @param history - the history
 * @param from - the first message to check
 * @param boundary - the known JSON text of `history[from - 1]`, put first when given
 * @returns the texts of `history[from - 1]` (when `boundary` is given) and `history[from..]`
 * @throws {NonJsonValueError} naming the message index and path of a value JSON cannot carry
 */
function encodeHistory(history: readonly Message[], from: number, boundary: string | undefined): string[] {
  if (!Array.isArray(history)) throw notAnArray(history);
  const texts: string[] = boundary === undefined ? [] : [boundary];
  for (let i = from; i < history.length; i++) {
    if (!(i in history)) assertJson(history, "history");
    assertJson(history[i], `history[${i}]`, i);
    texts.push(JSON.stringify(history[i]));
  }
  return texts;
}

/** Redacted (or checked-clean) form of each message object already scanned, per policy. */
const scanned = { redact: new WeakMap<object, Message>(), refuse: new WeakSet<object>() };

/**
 * Applies the `toolArgumentSecrets` policy to the whole history that will be
 * stored (a backend may rewrite the whole history, so every message must be
 * in its stored form): replaces `state.history` by a copy holding redacted
 * messages when something was redacted. The agent's own messages are
 * untouched. Each message object is scanned once (cached), except the last
 * one, which is rescanned at every save (it may be edited in place).
 *
 * The first `from` messages are not looked at: the caller knows them to be in
 * their stored form under `policy` already (see `Track.policyChecked`), so a
 * save with a proven stored prefix costs O(new messages) here too.
 *
 * @param state - the state about to be written (its `history` may be replaced)
 * @param policy - the policy in force
 * @param from - how many leading messages are known to be in stored form under `policy`
 * @returns how many leading messages of the history are in stored form as they are (the policy
 *   leaves them unchanged): its length, unless something was redacted
 * @throws {CredentialError} with `refuse`, naming the message and field
 */
function applySecretsPolicy(state: AgentState, policy: ToolArgumentSecretsPolicy, from = 0): number {
  const n = state.history.length;
  if (policy === "keep") return n;
  let out: Message[] | undefined;
  let unchanged = n;
  const last = n - 1;
  for (let i = from; i <= last; i++) {
    const m = state.history[i] as Message;
    let r: Message;
    if (policy === "refuse") {
      if (i < last && scanned.refuse.has(m)) continue;
      applyToolArgumentPolicy(m, i, policy);
      scanned.refuse.add(m);
      continue;
    }
    const cached = i < last ? scanned.redact.get(m) : undefined;
    if (cached !== undefined) r = cached;
    else {
      r = applyToolArgumentPolicy(m, i, policy);
      scanned.redact.set(m, r);
    }
    if (r !== m) {
      out ??= state.history.slice();
      out[i] = r;
      if (unchanged === n) unchanged = i;
    }
  }
  if (out !== undefined) state.history = out;
  return unchanged;
}

/**
 * Saves an agent's whole state.
 *
 * @param agent - the agent (a `BaseAgent` or subclass)
 * @param key - the key @default the agent's last key, else its uuid/name per the key strategy
 * @param options - `backend`, `ifRevision` (compare-and-set), `force`
 * @returns `{ key, revision?, written, rewritten }`: the key used, the new revision (backends with
 *   revisions), how many messages were physically written and whether the history was rewritten
 * @throws {InvalidKeyError} for a bad key (nothing written)
 * @throws {CredentialError} when `apiKeyEnv`/`apiProvider`/`modelName` looks like a secret (nothing written)
 * @throws {NonJsonValueError} naming the message index and path of a value JSON cannot carry (nothing written)
 * @throws {RegistrationError} when the agent's class is not registered
 * @throws {ConflictError} when another writer saved the key since this agent loaded/saved it
 * @throws {UnsupportedOperationError} for `ifRevision` on a backend without revisions
 * @throws {BackendError} wrapping a driver failure
 * @throws {InvalidOptionError} for an unknown option, an option of the wrong kind, options given twice, or an
 *   `agent` that is not one (null, a plain object: nothing with `toState()`)
 * @throws {InvalidStateError} when `agent.history` is not an array
 * @example
 * const { key, revision } = await saveState(agent, "support-42", { backend: "sqlite" });
 * await saveState(agent, { backend: "sqlite" }); // the default key
 */
export function saveState(agent: PersistableAgent, options: SaveOptions): Promise<SaveResult>;
export function saveState(agent: PersistableAgent, key?: string, options?: SaveOptions): Promise<SaveResult>;
export function saveState(
  agent: PersistableAgent,
  key?: string | SaveOptions,
  options?: SaveOptions,
): Promise<SaveResult> {
  try {
    assertAgent("saveState", agent);
  } catch (e) {
    return Promise.reject(e);
  }
  if (typeof key === "object" && key !== null) {
    if (options !== undefined) {
      return Promise.reject(
        new InvalidOptionError("saveState", "key", "pass the options once: saveState(agent, key, options)"),
      );
    }
    return serialize(agent, () => doSave(agent, undefined, key));
  }
  return serialize(agent, () => doSave(agent, key, options ?? {}));
}

async function doSave(agent: PersistableAgent, key: string | undefined, options: SaveOptions): Promise<SaveResult> {
  checkOptions("saveState", options, SAVE_OPTIONS);
  checkRevisionOption("saveState", "ifRevision", options.ifRevision);
  if (options.force !== undefined && typeof options.force !== "boolean") {
    throw new InvalidOptionError("saveState", "force", `must be true or false, got ${shownValue(options.force)}`);
  }
  const home = agentHome(agent);
  const backend = homeBackend(home, key, options.backend) ?? resolveBackend(options.backend);
  const k = validateKey(key ?? home?.key ?? defaultKey(agent));
  // The header only (no copy of a long history): the history is taken from the agent below and
  // copied in O(new messages). An agent that returns a history anyway (a custom one) saves that.
  const header = agent.toState(HEADER_ONLY) as AgentStateHeader & { history?: Message[] };
  checkHeader(header);
  const own = header.history;
  const live = own ?? agent.history;

  if (typeof backend.write === "function") {
    const track = getTrack(agent, backend, k);
    // An instance that never loaded or saved this key may only create it: saving a fresh agent over
    // someone else's session is a ConflictError, not a silent overwrite (`force: true` overwrites).
    let expectedRevision: number | null | undefined = track === undefined ? null : track.revision;
    let baseLength = track !== undefined && !options.force ? computeBaseLength(track, live) : undefined;
    if (options.ifRevision !== undefined) {
      expectedRevision = options.ifRevision;
      if (track?.revision !== options.ifRevision) baseLength = undefined;
    }
    if (expectedRevision === undefined || expectedRevision === null || options.force) baseLength = undefined;
    // Each message is serialised once per save: the new ones here (checked on the way), the boundary
    // message's text is the fingerprint that proved the stored prefix; the backend borrows them.
    const from = baseLength ?? 0;
    const boundary = from > 0 ? track?.lastText : undefined;
    const texts = encodeHistory(live, from, boundary);
    const history = own ?? saveSnapshot(track, live, baseLength);
    const state: AgentState = { meta: header.meta, config: header.config, state: header.state, history };
    // The last message as this write stores it: the tracker's fingerprint for the next save.
    const lastIndex = history.length - 1;
    const last = lastIndex < 0 ? undefined : { text: texts[texts.length - 1], shape: jsonShape(history[lastIndex]) };
    // The proven stored prefix was found in stored form under this policy by an earlier save (every
    // position holds the same object, the last one unchanged in place): only the rest is scanned.
    const policy = currentSettings().toolArgumentSecrets;
    const checked =
      baseLength !== undefined && track?.policyChecked?.policy === policy
        ? Math.min(track.policyChecked.through, baseLength)
        : 0;
    let policyChecked: PolicyChecked;
    let result: Awaited<ReturnType<NonNullable<StateBackend["write"]>>>;
    try {
      policyChecked = { policy, through: applySecretsPolicy(state, policy, checked) };
      // Redacted messages are other objects: the backend serialises those itself.
      if (state.history === history) lendTexts(history, boundary === undefined ? from : from - 1, texts);
      result = await backend.write(k, state, { expectedRevision, baseLength, force: options.force ?? false });
    } catch (e) {
      abandonSnapshot(track, history, baseLength);
      wrap(backend, `cannot save ${JSON.stringify(k)}`, k, e);
    } finally {
      reclaimTexts(history);
    }
    recordSaved(
      agent,
      backend,
      k,
      history,
      result.rewritten ? undefined : baseLength,
      result.revision,
      last,
      policyChecked,
    );
    return { key: k, revision: result.revision, written: result.written, rewritten: result.rewritten };
  }
  const history = own ?? live.slice();
  const state: AgentState = { meta: header.meta, config: header.config, state: header.state, history };

  if (options.ifRevision !== undefined) {
    throw new UnsupportedOperationError(
      `backend ${backendLabel(backend, options.backend)} has no revisions (no write method), so saveState cannot honour ifRevision for key ${JSON.stringify(k)}; nothing was written`,
    );
  }
  checkHistory(history, 0);
  applySecretsPolicy(state, currentSettings().toolArgumentSecrets);
  try {
    await backend.save(k, state);
  } catch (e) {
    wrap(backend, `cannot save ${JSON.stringify(k)}`, k, e);
  }
  recordSaved(agent, backend, k, history, undefined, undefined);
  return { key: k, written: history.length, rewritten: true };
}

/**
 * Brings a state read from a custom backend up to the current shape: a
 * record written before a `[STATE]` entry existed gets its documented
 * default (`currentTaskId: null`, `hooks: []`, `fields: {}`); config fields
 * missing take their schema defaults. Then validates it.
 */
function normalizeForeignState(raw: unknown, label: string): AgentState {
  if (raw !== null && typeof raw === "object") {
    const r = raw as { state?: Record<string, unknown>; meta?: { formatVersion?: unknown } };
    checkFormatVersion(r.meta?.formatVersion, label);
    if (r.state === undefined) r.state = {};
    if (r.state !== null && typeof r.state === "object") {
      r.state.currentTaskId ??= null;
      r.state.hooks ??= [];
      r.state.fields ??= {};
    }
    // The JSON read rule every built-in backend applies (depth, numbers in range, -0 read as 0),
    // before the schemas (whose recursion a value nested 100,000 deep would overflow).
    const parts = raw as Record<string, unknown>;
    for (const part of ["meta", "config", "state"]) {
      if (parts[part] !== undefined) checkStoredJson(parts[part], { file: label, label: part }); // missing: the schema says so
    }
    const history = parts.history;
    if (Array.isArray(history)) {
      for (let i = 0; i < history.length; i++) checkStoredJson(history[i], { file: label, label: `history[${i}]` });
    }
  }
  return parseAgentState(raw, label);
}

const HeaderShape = z.object({ meta: StateMetaSchema, config: AgentConfigSchema, state: AgentRuntimeStateSchema });

/**
 * Validates the header (meta, config, state) of a state read with `read`,
 * cheaply (the history's messages are trusted to the backend, which decodes
 * them: validating 100,000 messages on every load would double its cost).
 */
function checkHeaderShape(state: AgentState, label: string): void {
  const r = HeaderShape.safeParse(state);
  if (!r.success || !Array.isArray(state.history)) {
    const issue = r.success ? undefined : r.error.issues[0];
    const where = issue ? issue.path.map(String).join(".") : "history";
    throw new InvalidStateError(where, `${label}: ${issue?.message ?? "history must be an array"}`, {
      cause: r.success ? undefined : r.error,
    });
  }
}

async function readState(
  backend: StateBackend,
  key: string,
): Promise<{ state: AgentState; revision: number | undefined }> {
  const label = `key ${JSON.stringify(key)}`;
  try {
    if (typeof backend.read === "function") {
      const r = await backend.read(key);
      if (r === undefined || r === null) throw new StateNotFoundError(key, backendLabel(backend));
      checkFormatVersion(r.state?.meta?.formatVersion, label);
      checkHeaderShape(r.state, label);
      return { state: r.state, revision: r.revision };
    }
    const s = await backend.load(key);
    if (s === undefined || s === null) throw new StateNotFoundError(key, backendLabel(backend));
    return { state: normalizeForeignState(s, label), revision: undefined };
  } catch (e) {
    wrap(backend, `cannot load ${JSON.stringify(key)}`, key, readFailure(e, key, backendLabel(backend)));
  }
}

async function restore(state: AgentState, label: string, options: LoadOptions): Promise<PersistableAgent> {
  const onWarning = options.onWarning ?? defaultWarn;
  const cls = await resolveAgentClass(state.meta, label);
  const { hooks, unresolved } = await resolveHooks(state.state.hooks, onWarning);
  const agent = cls.fromState(state, { hooks, unresolvedHooks: unresolved, onWarning });
  if (options.requireSecrets) resolveApiKey({ apiKeyEnv: state.config.apiKeyEnv, name: state.meta.agentName });
  return agent;
}

function register(agent: PersistableAgent, options: LoadOptions): PersistableAgent {
  if (!options.register) return agent;
  if (registrar === undefined) {
    throw new UnsupportedOperationError(
      "loadState({ register: true }) needs the agent layer: import from dumplings-ai",
    );
  }
  return registrar(agent, options.onNameTaken ?? "refuse");
}

/**
 * Loads an agent from a backend.
 *
 * @param key - the key
 * @param options - `backend`, `onWarning`, `register`/`onNameTaken` (add to `agentList`), `requireSecrets`
 * @returns the agent, an instance of its saved class (`BaseAgent`, `AnthropicAgent` or a registered subclass)
 * @throws {InvalidKeyError} for a bad key
 * @throws {StateNotFoundError} when nothing is stored under the key (custom backends returning `undefined` included)
 * @throws {FormatError} for a malformed record or an unknown `format_version` (naming it)
 * @throws {AgentNotFoundError} when the saved class cannot be resolved (never a partial agent)
 * @throws {MissingSecretError} with `requireSecrets` when the API-key env var is unset
 * @throws {BackendError} wrapping a driver failure
 * @example
 * const agent = await loadState("support-42", { backend: "sqlite" });
 * agent.history.push({ role: "user", content: "still there?" });
 * await agent.saveState(); // saves back to "support-42" on sqlite, appending one message
 */
export async function loadState<A extends PersistableAgent = PersistableAgent>(
  key: string,
  options: LoadOptions = {},
): Promise<A> {
  checkOptions("loadState", options, LOAD_OPTIONS);
  const k = validateKey(key);
  const backend = resolveBackend(options.backend);
  const { state, revision } = await readState(backend, k);
  const agent = await restore(state, `key ${JSON.stringify(k)}`, options);
  recordLoaded(agent, backend, k, agent.history, revision);
  return register(agent, options) as A;
}

/**
 * Deletes a stored state.
 *
 * @param key - the key
 * @param options - `backend`
 * @returns true when something was deleted, false when nothing was stored (also when a custom
 *   backend's `delete` throws its own not-found error: `code: "ENOENT"` or a `FileNotFoundError`)
 * @throws {InvalidKeyError} for a bad key
 * @throws {BackendError} wrapping a driver failure
 * @example
 * await deleteState("support-42"); // true
 */
export async function deleteState(key: string, options: BackendOptions = {}): Promise<boolean> {
  checkOptions("deleteState", options, BACKEND_OPTIONS);
  const k = validateKey(key);
  const backend = resolveBackend(options.backend);
  try {
    return Boolean(await backend.delete(k));
  } catch (e) {
    if (isBackendNotFound(e)) return false; // a custom backend's own not-found error: nothing was stored
    wrap(backend, `cannot delete ${JSON.stringify(k)}`, k, e);
  }
}

/**
 * Lists stored keys.
 *
 * @param options - `backend`
 * @returns every key, sorted
 * @throws {BackendError} wrapping a driver failure
 * @example
 * for (const key of await listStates({ backend: "sqlite" })) console.log(key);
 */
export async function listStates(options: BackendOptions = {}): Promise<string[]> {
  checkOptions("listStates", options, BACKEND_OPTIONS);
  const backend = resolveBackend(options.backend);
  try {
    return [...(await backend.listKeys())].sort();
  } catch (e) {
    wrap(backend, "cannot list keys", undefined, e);
  }
}

/**
 * Streams the history stored under a key, in order. Uses the backend's
 * `iterHistory` (bounded memory) when it has one, else loads the state.
 *
 * @param key - the key
 * @param options - `backend`
 * @returns an async iterable of messages
 * @throws {StateNotFoundError} / {InvalidKeyError} / {BackendError} (when iterated)
 * @example
 * for await (const message of iterHistory("support-42")) console.log(message.role);
 */
export async function* iterHistory(key: string, options: BackendOptions = {}): AsyncGenerator<Message> {
  checkOptions("iterHistory", options, BACKEND_OPTIONS);
  const k = validateKey(key);
  const backend = resolveBackend(options.backend);
  if (typeof backend.iterHistory === "function") {
    try {
      yield* backend.iterHistory(k);
    } catch (e) {
      wrap(backend, `cannot read the history of ${JSON.stringify(k)}`, k, readFailure(e, k, backendLabel(backend)));
    }
    return;
  }
  const { state } = await readState(backend, k);
  yield* state.history;
}

/**
 * The `.duas` text of an agent's state (synchronous; nothing is stored).
 *
 * @param agent - the agent
 * @returns the `.duas` text
 * @throws {CredentialError} / {NonJsonValueError} / {RegistrationError} as {@link saveState}
 * @example
 * writeFileSync("session.duas", exportStateString(agent));
 */
export function exportStateString(agent: PersistableAgent): string {
  assertAgent("exportStateString", agent);
  const state = agent.toState();
  checkHeader(state);
  applySecretsPolicy(state, currentSettings().toolArgumentSecrets);
  return encodeState(state);
}

/**
 * Rebuilds an agent from `.duas` text (as written by {@link exportStateString}).
 * Asynchronous because resolving the saved class may need an (allowed) `import()`.
 *
 * @param text - the `.duas` text
 * @param options - `onWarning`, `register`/`onNameTaken`, `requireSecrets`; `source`: a label for errors
 * @returns the agent
 * @throws {FormatError} with the line number for malformed text, naming an unknown `format_version`
 * @throws {AgentNotFoundError} when the saved class cannot be resolved
 * @example
 * const agent = await loadStateString(readFileSync("session.duas", "utf8"));
 */
export async function loadStateString<A extends PersistableAgent = PersistableAgent>(
  text: string,
  options: Omit<LoadOptions, "backend"> & { source?: string } = {},
): Promise<A> {
  checkOptions("loadStateString", options, LOAD_STRING_OPTIONS);
  if (typeof text !== "string") throw new FormatError("expected .duas text (a string)", { file: options.source });
  const state = decodeState(text, { source: options.source ?? "string" });
  const agent = await restore(state, options.source ?? "the .duas string", options);
  return register(agent, options) as A;
}

const logged = new WeakMap<object, Set<string>>();

/**
 * An auto-save failure: the agent's `persistError` event; logged (once per agent and message) only
 * when no listener handles it, or when a listener throws.
 */
function report(agent: PersistableAgent, error: unknown): void {
  const fields = {
    agent: agent.name,
    code: error instanceof DumplingsError ? error.code : undefined,
  };
  try {
    if (agent.emit("persistError", error)) return;
  } catch (listenerError) {
    log("error", `a persistError listener threw: ${String(listenerError)}`, fields);
    return;
  }
  const message = error instanceof Error ? error.message : String(error);
  let seen = logged.get(agent);
  if (!seen) {
    seen = new Set();
    logged.set(agent, seen);
  }
  if (!seen.has(message)) {
    seen.add(message);
    log("error", `auto-save of agent ${JSON.stringify(agent.name)} failed: ${message}`, fields);
  }
}

/**
 * Under `keyStrategy: "name"`, lets a fresh agent continue the session stored under its name
 * instead of conflicting with it at every save: run by the agent before each outermost turn while
 * persistence is enabled (`BaseAgent` does). It does nothing when the strategy is `uuid` or the
 * agent already has a home (it was loaded or saved: its saves go there). Otherwise it reads the
 * session stored under `agent.name` on the default backend:
 *
 * - nothing stored: nothing to do (the turn's save creates it);
 * - a session of the agent's class (and protocol) whose history starts with the agent's own (a fresh
 *   agent's is usually empty): the agent continues it — `adopt` restores its history, task id and
 *   persistent fields (the agent keeps its own config, hooks, uuid and tools), and its saves append
 *   to that session under compare-and-set, as after `loadState`;
 * - anything else (another conversation, another class or protocol): nothing is merged or overwritten; the
 *   agent's own conversation is saved at once under its uuid as key, where its later saves go,
 *   and a `persistWarning` (`SESSION_KEY_TAKEN`) names both keys.
 *
 * Never throws: a failure (the backend down) is reported as auto-save reports one
 * (`persistError`, logged once) and the turn goes on.
 *
 * @internal used by `BaseAgent` (its turns' `prepare`)
 * @param agent - the agent
 * @param adopt - restores the stored state into the agent (history, task id, persistent fields)
 * @returns once decided
 * @example
 * configure({ enabled: true, backend: "sqlite", keyStrategy: "name" });
 * const agent = new BaseAgent({ name: "support" }); // "support" was saved yesterday
 * await agent.conversationWithTool("and the refund?"); // the model sees yesterday's conversation
 */
export async function continueStoredSession(
  agent: PersistableAgent,
  adopt: (state: AgentState) => void,
): Promise<void> {
  if (currentSettings("keyStrategy").keyStrategy !== "name" || agentHome(agent) !== undefined) return;
  try {
    await serialize(agent, async () => {
      if (agentHome(agent) !== undefined) return;
      let key: string;
      try {
        key = validateKey(agent.name);
      } catch {
        return; // the turn's save reports the bad key
      }
      const backend = resolveBackend(undefined);
      let stored: { state: AgentState; revision: number | undefined };
      try {
        stored = await readState(backend, key);
      } catch (e) {
        if (e instanceof StateNotFoundError) return;
        throw e;
      }
      const { meta } = agent.toState(HEADER_ONLY);
      if (
        stored.state.meta.protocol === meta.protocol &&
        stored.state.meta.class === meta.class &&
        startsWith(stored.state.history, agent.history)
      ) {
        adopt(stored.state);
        recordLoaded(agent, backend, key, agent.history, stored.revision);
        return;
      }
      const own = validateKey(agent.uuid);
      await doSave(agent, own, {});
      const warning: PersistenceWarning = {
        code: "SESSION_KEY_TAKEN",
        name: key,
        message: `key ${JSON.stringify(key)} (the name of agent ${agent.uuid}) holds another conversation; this agent's conversation is saved under its uuid, key ${JSON.stringify(own)}`,
      };
      if (!agent.emit("persistWarning", warning)) defaultWarn(warning);
    });
  } catch (error) {
    report(agent, error);
  }
}

/** Whether `history` starts with the messages of `prefix` (equal as JSON). */
function startsWith(history: readonly Message[], prefix: readonly Message[]): boolean {
  if (prefix.length > history.length) return false;
  for (let i = 0; i < prefix.length; i++) {
    if (history[i] !== prefix[i] && JSON.stringify(history[i]) !== JSON.stringify(prefix[i])) return false;
  }
  return true;
}

/**
 * Saves the agent as auto-save does after a turn: to its last key and
 * backend (else the default backend and the key strategy's key), with
 * compare-and-set against the revision it last loaded or saved. Runs
 * whether or not auto-save is enabled. Never throws: a failure is emitted
 * as `agent.on("persistError", (error) => …)` and logged once (per distinct
 * message per agent) on stderr.
 *
 * @param agent - the agent
 * @returns true when saved, false when the save failed (reported, not thrown)
 * @example
 * agent.on("persistError", (e) => metrics.count("persist_error", e.code));
 * const ok = await autoSave(agent);
 */
export async function autoSave(agent: PersistableAgent): Promise<boolean> {
  try {
    await saveState(agent);
    return true;
  } catch (error) {
    report(agent, error);
    return false;
  }
}

/**
 * The revision an agent instance last loaded or saved under a key (what its next save expects).
 *
 * @param agent - the agent
 * @param key - the key @default the agent's last key
 * @param options - `backend` @default the agent's last backend for its last key, else the default backend
 * @returns the revision, or undefined when unknown (never loaded/saved there, or no revisions)
 * @example
 * const rev = trackedRevision(agent); await saveState(agent, undefined, { ifRevision: rev });
 */
export function trackedRevision(
  agent: PersistableAgent,
  key?: string,
  options: BackendOptions = {},
): number | undefined {
  checkOptions("trackedRevision", options, BACKEND_OPTIONS);
  const home = agentHome(agent);
  const backend = homeBackend(home, key, options.backend) ?? resolveBackend(options.backend);
  const k = key ?? home?.key;
  if (k === undefined) return undefined;
  return getTrack(agent, backend, k)?.revision;
}

/**
 * Makes an agent forget what it knows about a stored key (its revision and
 * stored messages), so its next save there is an unconditional full write.
 *
 * @param agent - the agent
 * @param key - the key @default the agent's last key
 * @param options - `backend` @default the agent's last backend for its last key, else the default backend
 */
export function forgetStoredState(agent: PersistableAgent, key?: string, options: BackendOptions = {}): void {
  checkOptions("forgetStoredState", options, BACKEND_OPTIONS);
  const home = agentHome(agent);
  const backend = homeBackend(home, key, options.backend) ?? resolveBackend(options.backend);
  const k = key ?? home?.key;
  if (k !== undefined) forgetTrack(agent, backend, k);
}
