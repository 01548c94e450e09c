/**
 * `MemoryBackend`: sessions kept in the process's memory, for tests, demos and
 * short-lived agents. Nothing survives the process.
 *
 * It implements the whole contract, optional capabilities included, with the
 * same semantics as the durable built-in backends, so code tested against it
 * behaves the same on SQLite or files:
 * - every value is stored as JSON text (the header as one JSON document, each
 *   history message as its own JSON line), so a stored state never shares an
 *   object with the caller and every load returns a fresh deep copy;
 * - `write` keeps a revision per key with compare-and-set, appends only
 *   `history.slice(baseLength)` when the stored prefix is known to match
 *   (O(new messages)), and never resurrects a deleted key for a writer that
 *   expected a revision.
 *
 * Revisions: a key's first write gets revision 1 in a store where nothing was
 * ever deleted; every write adds 1. After a delete, a re-created key starts
 * above every revision ever deleted in this store, so a stale writer holding
 * a revision of the deleted session can never match the new one (ABA guard).
 *
 * @module
 */
import { ConflictError, InvalidStateError, StateNotFoundError } from "../core/errors.js";
import { assertJson, sameFlatObject } from "../core/json.js";
import type { Message } from "../core/messages.js";
import { AgentConfigSchema, AgentRuntimeStateSchema, type AgentState, StateMetaSchema } from "../core/state.js";
import { validateKey } from "./keys.js";
import { decodeStoredMessage, messageText, parseHeaderField } from "./stored.js";
import type { HistoryReadOptions, ReadResult, StateBackend, WriteOptions, WriteResult } from "./types.js";
import { checkHistoryReadOptions, checkWriteOptions } from "./write-options.js";

interface StoredSession {
  /** `JSON.stringify` of `meta`, `config` and `state`. */
  meta: string;
  config: string;
  state: string;
  /** A shallow copy of the config written as `config` (an unchanged config is not serialised again). */
  configSnapshot: Record<string, unknown>;
  /** One JSON text per history message, in order. */
  history: string[];
  revision: number;
}

/**
 * Checks the header of a state (meta, config, state) for JSON-only values and
 * serialises each part. A config equal to the one stored (`sameFlatObject`) is
 * not checked or serialised again: a save with a huge prompt costs O(new messages).
 * @internal
 */
function headerJson(
  state: AgentState,
  stored: StoredSession | undefined,
): Pick<StoredSession, "meta" | "config" | "state" | "configSnapshot"> {
  if (state === null || typeof state !== "object") throw new InvalidStateError("", "a state must be an object");
  if (!Array.isArray(state.history)) throw new InvalidStateError("history", "history must be an array");
  for (const name of ["meta", "config", "state"] as const) {
    const part = state[name] as unknown;
    if (part === null || typeof part !== "object" || Array.isArray(part)) {
      throw new InvalidStateError(name, `${name} must be an object`);
    }
  }
  assertJson(state.meta, "meta");
  assertJson(state.state, "state");
  let config: string;
  if (stored !== undefined && sameFlatObject(state.config, stored.configSnapshot)) config = stored.config;
  else {
    assertJson(state.config, "config");
    config = JSON.stringify(state.config);
  }
  return {
    meta: JSON.stringify(state.meta),
    config,
    state: JSON.stringify(state.state),
    configSnapshot: { ...state.config },
  };
}

/** Serialises history messages `from..end`, refusing non-JSON values with the message index. */
function messagesJson(history: readonly Message[], from: number): string[] {
  const out = new Array<string>(history.length - from);
  for (let i = from; i < history.length; i++) {
    const m = history[i];
    if (m === null || typeof m !== "object" || Array.isArray(m)) {
      assertJson(m, `history[${i}]`, i);
      throw new InvalidStateError(`history[${i}]`, "a message must be a JSON object");
    }
    out[i - from] = messageText(history, i); // checked and serialised, or the text the caller lent
  }
  return out;
}

/**
 * Stores agent states in a `Map` in memory (keyed by the validated key).
 *
 * @example
 * import { MemoryBackend } from "dumplings-ai";
 * const backend = new MemoryBackend();
 * backend.save("demo", state);
 * const { state: copy, revision } = (await backend.read("demo"))!;
 * await backend.write("demo", { ...copy, history: [...copy.history, msg] },
 *   { expectedRevision: revision, baseLength: copy.history.length });
 */
export class MemoryBackend implements StateBackend {
  /** Registry and error-message name. */
  readonly name = "memory";
  readonly #sessions = new Map<string, StoredSession>();
  /** Highest revision ever deleted: re-created keys start above it. */
  #revisionFloor = 0;

  /** Creates an empty store. */
  // biome-ignore lint/complexity/noUselessConstructor: documents the public no-argument constructor
  constructor() {}

  /**
   * Stores the whole state under `key` (upsert; the revision is incremented).
   *
   * @param key - state key (validated)
   * @param state - the agent state; only JSON values are accepted
   * @throws {InvalidKeyError} for a bad key (nothing stored)
   * @throws {NonJsonValueError} naming the path (`history[3].content`) of a value JSON cannot carry
   */
  save(key: string, state: AgentState): void {
    this.#write(key, state, {});
  }

  /**
   * Loads the state under `key` as a fresh deep copy.
   *
   * @param key - state key
   * @returns the state
   * @throws {StateNotFoundError} when nothing is stored under `key`
   * @throws {InvalidKeyError} for a bad key
   */
  load(key: string): AgentState {
    const found = this.#read(key);
    if (!found) throw new StateNotFoundError(key, this.name);
    return found.state;
  }

  /**
   * Deletes `key`.
   *
   * @param key - state key
   * @returns true when a state was deleted, false when none was stored
   * @throws {InvalidKeyError} for a bad key
   */
  delete(key: string): boolean {
    validateKey(key);
    const stored = this.#sessions.get(key);
    if (!stored) return false;
    this.#revisionFloor = Math.max(this.#revisionFloor, stored.revision);
    return this.#sessions.delete(key);
  }

  /**
   * Lists stored keys.
   *
   * @returns every key, in insertion order
   */
  listKeys(): string[] {
    return [...this.#sessions.keys()];
  }

  /**
   * Revision-aware write with compare-and-set and O(new messages) appends
   * (see {@link WriteOptions}).
   *
   * @param key - state key (validated)
   * @param state - the whole new state
   * @param options - `expectedRevision` (CAS; `null`: must not exist), `baseLength` (stored prefix length), `force`
   * @returns `{ revision, written, rewritten }`
   * @throws {ConflictError} when the stored revision is not `expectedRevision` (nothing written)
   * @throws {InvalidKeyError} / {NonJsonValueError} for bad input (nothing written)
   */
  async write(key: string, state: AgentState, options: WriteOptions = {}): Promise<WriteResult> {
    checkWriteOptions("memory", options);
    return this.#write(key, state, options);
  }

  /**
   * Loads the state under `key` with its revision.
   *
   * @param key - state key
   * @returns `{ state, revision }`, or `undefined` when nothing is stored
   */
  async read(key: string): Promise<ReadResult | undefined> {
    return this.#read(key);
  }

  /**
   * Yields the history of `key` message by message (each a fresh copy).
   * The history is the one stored when iteration starts.
   *
   * @param key - state key
   * @param options - `revision`: the stored revision the stream must be (see {@link HistoryReadOptions})
   * @throws {StateNotFoundError} when nothing is stored under `key`
   * @throws {ConflictError} when `options.revision` is not the stored revision
   */
  async *iterHistory(key: string, options: HistoryReadOptions = {}): AsyncGenerator<Message> {
    checkHistoryReadOptions(this.name, options);
    validateKey(key);
    const stored = this.#sessions.get(key);
    if (!stored) throw new StateNotFoundError(key, this.name);
    if (options.revision !== undefined && options.revision !== stored.revision) {
      throw new ConflictError(key, options.revision, stored.revision, this.name);
    }
    const lines = stored.history; // arrays are replaced or appended to, never edited in place below a reader's length
    const { protocol } = parseHeaderField(key, "memory", "meta", stored.meta, StateMetaSchema);
    const n = lines.length;
    for (let i = 0; i < n; i++) yield decodeStoredMessage(key, "memory", lines[i], protocol, i);
  }

  /** Drops every stored state. */
  close(): void {
    this.#sessions.clear();
  }

  /** Every value read is checked by the rules every backend applies (`parseHeaderField`, `decodeStoredMessage`). */
  #read(key: string): ReadResult | undefined {
    validateKey(key);
    const stored = this.#sessions.get(key);
    if (!stored) return undefined;
    const meta = parseHeaderField(key, "memory", "meta", stored.meta, StateMetaSchema);
    const config = parseHeaderField(key, "memory", "config", stored.config, AgentConfigSchema);
    const state = parseHeaderField(key, "memory", "state", stored.state, AgentRuntimeStateSchema);
    const history = stored.history.map((line, i) => decodeStoredMessage(key, "memory", line, meta.protocol, i));
    return { state: { meta, config, state, history }, revision: stored.revision };
  }

  #write(key: string, state: AgentState, options: WriteOptions): WriteResult {
    validateKey(key);
    const stored = this.#sessions.get(key);
    const header = headerJson(state, stored);
    const actual = stored ? stored.revision : null;
    const { expectedRevision, baseLength, force = false } = options;
    if (!force && expectedRevision !== undefined && expectedRevision !== actual) {
      throw new ConflictError(key, expectedRevision, actual, this.name);
    }
    const history = state.history;
    const canAppend =
      stored !== undefined &&
      !force &&
      typeof expectedRevision === "number" &&
      Number.isInteger(baseLength) &&
      (baseLength as number) >= 0 &&
      (baseLength as number) <= stored.history.length &&
      (baseLength as number) <= history.length;
    if (canAppend && stored) {
      const base = baseLength as number;
      const added = messagesJson(history, base);
      // Detect (not assume) a matching prefix at the boundary: the last message the writer
      // says is stored must be byte-identical; otherwise rewrite everything.
      const boundaryOk = base === 0 || stored.history[base - 1] === messageText(history, base - 1);
      if (boundaryOk) {
        const kept = base === stored.history.length ? stored.history : stored.history.slice(0, base);
        for (const line of added) kept.push(line);
        const revision = stored.revision + 1;
        this.#sessions.set(key, { ...header, history: kept, revision });
        return { revision, written: added.length, rewritten: false };
      }
    }
    const lines = messagesJson(history, 0);
    const revision = stored ? stored.revision + 1 : this.#revisionFloor + 1;
    this.#sessions.set(key, { ...header, history: lines, revision });
    return { revision, written: lines.length, rewritten: true };
  }
}
