/**
 * `DumplingsSession`: an OpenAI Agents SDK `Session` (conversation memory for
 * `run(agent, input, { session })`) on any session backend.
 *
 * Storage: a session is one stored state under `keyPrefix + sessionId`, one
 * history entry per item, as the chat store of `dumplings-ai/ai-sdk` keeps
 * its messages: an OpenAI-shaped envelope every backend, `dumplings ls` and
 * `dumplings show` read, `{ "role": "assistant", "content": null,
 * "openaiAgents": <the item, tagged JSON> }`. The role is the item's own for
 * a message (`user`, `assistant`, `system`, `developer`), `tool` (with
 * `tool_call_id`) for a tool's output (`function_call_result`,
 * `computer_call_result`, `shell_call_output`, …), else `assistant` (function
 * calls, reasoning, hosted tool calls, compaction, …). The item itself is
 * encoded by the tagged JSON rule of `dumplings-ai/ai-sdk` (`Uint8Array`,
 * `undefined`, `NaN`… kept), so every item type reads back deep-equal. The
 * header's `class` is {@link SESSION_CLASS}.
 *
 * Cost: `addItems` is one compare-and-set append (`write` with
 * `expectedRevision` and `baseLength`) writing only the new items. The
 * session keeps what it last read or wrote (its revision and items) in
 * memory; `getItems`/`popItem` first read the stored revision (`readHeader`,
 * O(1)) and read the whole history only when another writer changed it. When
 * another writer appended meanwhile, `addItems` gets `ConflictError` from the
 * store, reads the session again and appends after the other writer's items
 * (an append never overwrites anyone's items). A backend with only the seed's
 * four methods gets a whole-state `save` per change.
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import type { AgentInputItem, Session } from "@openai/agents-core";
import { validateKey } from "../backends/keys.js";
import { isBackendNotFound } from "../backends/not-found.js";
import { backendFromSpec } from "../backends/spec.js";
import { backendLabel, envelopeState } from "../backends/stored.js";
import type { StateBackend, WriteResult } from "../backends/types.js";
import {
  BackendError,
  ConflictError,
  DumplingsError,
  FormatError,
  InvalidOptionError,
  InvalidStateError,
} from "../core/errors.js";
import type { JsonValue } from "../core/json.js";
import { checkOptions, optionKeys } from "../core/options.js";
import type { AgentState } from "../core/state.js";
import { decodeTagged, encodeTagged } from "../core/tagged-json.js";

/** The `meta.class` of a stored OpenAI Agents session. */
export const SESSION_CLASS = "dumplings-ai/openai-agents:Session";

/** The envelope field holding the encoded item. */
export const SESSION_FIELD = "openaiAgents";

/** Options of {@link DumplingsSession}. */
export interface DumplingsSessionOptions {
  /**
   * The session id (part of the stored key: no `/`, `\`, control characters, leading `.`;
   * ≤ 200 bytes with the prefix). @default a random UUID (as the SDK's `MemorySession`)
   */
  sessionId?: string;
  /**
   * The session backend: `MemoryBackend`, `FileBackend`, `SQLiteBackend`, `RedisBackend`,
   * `PostgresBackend` or any `StateBackend`; or a SPEC string as the CLI takes it (`file:DIR`,
   * `sqlite:PATH`, `postgres://URL?schema=S`, `redis://URL?prefix=P`, `memory:`), opened with
   * `backendFromSpec` (close it through `session.store.close?.()`).
   */
  store: StateBackend | string;
  /** Prefix of the stored key (`keyPrefix + sessionId`). @default "agents-" */
  keyPrefix?: string;
}

const OPTIONS = optionKeys<DumplingsSessionOptions>({ sessionId: true, store: true, keyPrefix: true });

/** How many times `addItems`/`popItem` read again and retry after another writer changed the session. */
const MAX_ATTEMPTS = 8;

type Envelope = { role: string; content: null; tool_call_id?: string; [SESSION_FIELD]: JsonValue };

/** What this instance knows is stored: `revision` null = known absent, undefined = a backend without revisions. */
interface Snapshot {
  revision: number | null | undefined;
  history: Envelope[];
}

const MESSAGE_ROLES = new Set(["system", "developer", "user", "assistant"]);

function envelope(item: unknown, index: number): Envelope {
  if (item === null || typeof item !== "object" || Array.isArray(item)) {
    throw new InvalidStateError(`items[${index}]`, "a session item must be an object");
  }
  const { type, role, callId } = item as { type?: unknown; role?: unknown; callId?: unknown };
  if (type !== undefined && typeof type !== "string") {
    throw new InvalidStateError(`items[${index}].type`, `type ${JSON.stringify(type)} is not a string`);
  }
  let out: Envelope;
  if ((type === undefined || type === "message") && typeof role === "string" && MESSAGE_ROLES.has(role)) {
    out = { role, content: null, [SESSION_FIELD]: null };
  } else if (type === undefined || type === "message") {
    throw new InvalidStateError(
      `items[${index}].role`,
      `a message item's role ${JSON.stringify(role)} is not one of user, assistant, system, developer`,
    );
  } else if (/_(result|output)$/.test(type)) {
    out = {
      role: "tool",
      content: null,
      tool_call_id: typeof callId === "string" ? callId : "",
      [SESSION_FIELD]: null,
    };
  } else {
    out = { role: "assistant", content: null, [SESSION_FIELD]: null };
  }
  out[SESSION_FIELD] = encodeTagged(item, `items[${index}]`, index);
  return out;
}

/**
 * An OpenAI Agents SDK `Session` stored on a session backend: pass it as
 * `run(agent, input, { session })` and the conversation survives restarts and
 * moves between processes and machines (with a shared store).
 *
 * One instance serialises its own operations; several instances (processes)
 * may share a session: appends never overwrite each other (compare-and-set,
 * read again and retry on conflict).
 *
 * @example
 * import { Agent, run } from "@openai/agents";
 * import { DumplingsSession } from "dumplings-ai/openai-agents";
 * const session = new DumplingsSession({ sessionId: "user-42", store: "sqlite:./agents.db" });
 * const agent = new Agent({ name: "Assistant", instructions: "Be brief." });
 * await run(agent, "My name is Ada.", { session });
 * const result = await run(agent, "What is my name?", { session }); // the model sees the first turn
 * await session.store.close?.();
 */
export class DumplingsSession implements Session {
  /** The backend. */
  readonly store: StateBackend;
  /** The session id. */
  readonly sessionId: string;
  /** The stored key (`keyPrefix + sessionId`). */
  readonly key: string;
  #known: Snapshot | undefined;
  #queue: Promise<unknown> = Promise.resolve();

  /**
   * @param options - `store` (a backend or a SPEC string), `sessionId` (@default a random UUID),
   *   `keyPrefix` (@default "agents-")
   * @throws {InvalidOptionError} for an unknown option, a missing or bad `store`, a non-string `keyPrefix`
   *   or `sessionId`, or a SPEC string that cannot be parsed
   * @throws {InvalidKeyError} when `keyPrefix + sessionId` is not a valid key
   */
  constructor(options: DumplingsSessionOptions) {
    checkOptions("DumplingsSession", options, OPTIONS);
    const store = typeof options?.store === "string" ? backendFromSpec(options.store, "store") : options?.store;
    if (store === null || typeof store !== "object" || typeof store.load !== "function") {
      throw new InvalidOptionError(
        "DumplingsSession",
        "store",
        "a session backend instance or a SPEC string is required",
      );
    }
    const prefix = options.keyPrefix ?? "agents-";
    if (typeof prefix !== "string") throw new InvalidOptionError("DumplingsSession", "keyPrefix", "must be a string");
    const sessionId = options.sessionId ?? randomUUID();
    if (typeof sessionId !== "string" || sessionId === "") {
      throw new InvalidOptionError("DumplingsSession", "sessionId", "must be a non-empty string");
    }
    this.store = store;
    this.sessionId = sessionId;
    this.key = validateKey(prefix + sessionId);
  }

  /**
   * The session id.
   *
   * @returns the `sessionId` given (or generated)
   */
  async getSessionId(): Promise<string> {
    return this.sessionId;
  }

  /**
   * The session's items, oldest first.
   *
   * @param limit - return only the latest `limit` items (still oldest first); `0` or less: none
   * @returns the items, deep-equal to what was added
   * @throws {InvalidOptionError} for a `limit` that is not a number
   * @throws {FormatError} when the key holds something that is not an agents session (or a damaged item)
   * @throws {BackendError} wrapping a driver failure
   */
  async getItems(limit?: number): Promise<AgentInputItem[]> {
    if (limit !== undefined && (typeof limit !== "number" || Number.isNaN(limit))) {
      throw new InvalidOptionError("DumplingsSession.getItems", "limit", `must be a number (got ${String(limit)})`);
    }
    return this.#serial(async () => {
      const { history } = await this.#current();
      if (limit === undefined) return this.#decode(history, 0);
      if (limit <= 0) return [];
      return this.#decode(history, Math.max(0, history.length - Math.floor(limit)));
    });
  }

  /**
   * Appends items; only these items are written (O(new items)).
   *
   * @param items - items in order (messages, function calls and outputs, reasoning, … any `AgentInputItem`)
   * @throws {InvalidStateError} for an item that is not an object or a message without a valid role;
   *   {NonJsonValueError} naming `items[i]…` for a value the encoding cannot carry (a BigInt, a function, a
   *   cycle, a class instance): nothing is written
   * @throws {ConflictError} when other writers kept changing the session through 8 attempts
   * @throws {BackendError} wrapping a driver failure
   */
  async addItems(items: AgentInputItem[]): Promise<void> {
    if (!Array.isArray(items)) throw new InvalidStateError("items", "items must be an array");
    // Encode (and check) everything before any I/O: bad input never changes stored data.
    const added = Array.from(items, (item, i) => envelope(item, i));
    if (added.length === 0) return;
    await this.#serial(() => this.#change("add items to", (history) => [...history, ...added]));
  }

  /**
   * Removes and returns the latest item.
   *
   * @returns the removed item, or `undefined` when the session is empty
   * @throws {ConflictError} when other writers kept changing the session through 8 attempts
   * @throws {FormatError} when the key holds something that is not an agents session
   * @throws {BackendError} wrapping a driver failure
   */
  async popItem(): Promise<AgentInputItem | undefined> {
    return this.#serial(async () => {
      let popped: Envelope | undefined;
      await this.#change("pop an item from", (history) => {
        popped = history.at(-1);
        return popped === undefined ? undefined : history.slice(0, -1);
      });
      return popped === undefined ? undefined : this.#decode([popped], 0, this.#known?.history.length)[0];
    });
  }

  /**
   * Deletes the session's items (the stored key). The id stays; the next `addItems` starts a new history.
   *
   * @throws {BackendError} wrapping a driver failure
   */
  async clearSession(): Promise<void> {
    await this.#serial(async () => {
      this.#known = undefined;
      try {
        await this.store.delete(this.key);
      } catch (e) {
        this.#wrap("cannot clear", e);
      }
      this.#known = { revision: typeof this.store.read === "function" ? null : undefined, history: [] };
    });
  }

  /** Runs this session's operations one at a time. */
  #serial<T>(task: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(task, task);
    this.#queue = run.catch(() => undefined);
    return run;
  }

  #wrap(what: string, e: unknown): never {
    if (e instanceof DumplingsError) throw e;
    throw new BackendError(backendLabel(this.store), `${what} session ${JSON.stringify(this.sessionId)}`, {
      key: this.key,
      cause: e,
    });
  }

  /**
   * Applies `next` to the stored history (compare-and-set; read again and retry on conflict).
   * `next` returning `undefined` means nothing to write.
   */
  async #change(what: string, next: (history: Envelope[]) => Envelope[] | undefined): Promise<void> {
    const store = this.store;
    for (let attempt = 1; ; attempt++) {
      // addItems trusts what it knows (the write's compare-and-set checks it); popItem must see the latest item.
      const known = what === "add items to" && this.#known !== undefined ? this.#known : await this.#current();
      const history = next(known.history);
      if (history === undefined) return;
      const state = envelopeState(this.sessionId, SESSION_CLASS, history);
      if (typeof store.write !== "function") {
        try {
          await store.save(this.key, state);
        } catch (e) {
          this.#known = undefined;
          this.#wrap(`cannot ${what}`, e);
        }
        this.#known = { revision: undefined, history };
        return;
      }
      const baseLength = Math.min(known.history.length, history.length);
      let result: WriteResult;
      try {
        result = await store.write(this.key, state, { expectedRevision: known.revision, baseLength });
      } catch (e) {
        this.#known = undefined;
        if (e instanceof ConflictError && attempt < MAX_ATTEMPTS) continue; // another writer: read again
        this.#wrap(`cannot ${what}`, e);
      }
      this.#known = { revision: result.revision, history };
      return;
    }
  }

  /** What is stored now: the known snapshot when the stored revision still matches it, else a fresh read. */
  async #current(): Promise<Snapshot> {
    const store = this.store;
    const known = this.#known;
    if (known !== undefined && typeof known.revision !== "undefined" && typeof store.readHeader === "function") {
      let header: Awaited<ReturnType<NonNullable<StateBackend["readHeader"]>>>;
      try {
        header = await store.readHeader(this.key);
      } catch (e) {
        if (!isBackendNotFound(e)) this.#wrap("cannot read", e);
        header = undefined; // the backend's own not-found error: nothing stored
      }
      const revision = header === undefined ? null : (header.revision ?? undefined);
      if (
        revision === known.revision &&
        (header === undefined || header.header.meta?.messageCount === known.history.length)
      ) {
        return known;
      }
    }
    this.#known = await this.#read();
    return this.#known;
  }

  async #read(): Promise<Snapshot> {
    const store = this.store;
    const none: Snapshot = { revision: typeof store.read === "function" ? null : undefined, history: [] };
    let state: AgentState | undefined;
    let revision: number | undefined;
    try {
      if (typeof store.read === "function") {
        const r = await store.read(this.key);
        state = r?.state;
        revision = r?.revision;
      } else {
        state = (await store.load(this.key)) ?? undefined;
      }
    } catch (e) {
      if ((e instanceof DumplingsError && e.code === "STATE_NOT_FOUND") || isBackendNotFound(e)) return none;
      this.#wrap("cannot read", e);
    }
    if (state === undefined || state === null) return none;
    if (state.meta?.class !== SESSION_CLASS) {
      throw new FormatError(
        `key ${JSON.stringify(this.key)} holds a ${String(state.meta?.class)} session, not an OpenAI Agents session`,
        { file: `${backendLabel(store)} key ${JSON.stringify(this.key)}` },
      );
    }
    return { revision, history: state.history as unknown as Envelope[] };
  }

  /** Decodes `history.slice(from)`; `offset` numbers the items in errors when `history` is a slice. */
  #decode(history: Envelope[], from: number, offset = 0): AgentInputItem[] {
    const out: AgentInputItem[] = [];
    for (let i = from; i < history.length; i++) {
      const e = history[i];
      const source = `${backendLabel(this.store)} key ${JSON.stringify(this.key)} item ${offset + i}`;
      if (e === null || typeof e !== "object" || !Object.hasOwn(e, SESSION_FIELD)) {
        throw new FormatError(`history entry is not an OpenAI Agents item (no ${SESSION_FIELD} field)`, {
          file: source,
        });
      }
      out.push(decodeTagged(e[SESSION_FIELD], source) as AgentInputItem);
    }
    return out;
  }
}
