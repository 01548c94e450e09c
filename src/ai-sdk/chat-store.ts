/**
 * `createChatStore`: AI SDK chats (`UIMessage[]` from `useChat`, or
 * `ModelMessage[]` for `generateText`/`streamText`) on any session backend.
 *
 * Storage: a chat is one stored state under `keyPrefix + chatId`, one history
 * entry per chat message. Each entry is an OpenAI-shaped envelope so every
 * backend, `dumplings ls` and `dumplings show` read it:
 * `{ "role": "user", "content": null, "aiSdk": <the message, tagged JSON> }`
 * (a `tool` model message also carries `tool_call_id`, the id of its first
 * part). The message itself is in `aiSdk`, encoded by the rule of
 * `encoding.ts` (Uint8Array, ArrayBuffer, URL, Date, undefined tagged), so a
 * round trip is deep-equal and keeps types. The header's `class` is
 * {@link CHAT_CLASS}; `loadState` on a chat key refuses it (no such agent class).
 *
 * Writes (backends with `write`/`read`, i.e. every built-in one): a save is a
 * compare-and-set against the revision this store instance last loaded or
 * saved for the chat, with `baseLength` = the number of leading messages
 * known to be stored unchanged, so a chat that grew by one message writes
 * one message, and the work is O(new messages) even though every request
 * brings the whole chat as new objects (`req.json()`).
 *
 * What counts as a change (the AI SDK's message identity: `useChat` treats a
 * message with the same `id` as the same message; `sendMessage({ messageId })`
 * edits a message and drops what followed it, `regenerate()` replaces an
 * answer by a message with a new id, a streamed answer, a tool output or an
 * approval changes the last message in place):
 * - a stored message other than the last one is unchanged when the message
 *   at its position has the same `id` (a non-empty string); its content is not
 *   read (one id comparison per message: no encoding, no hashing);
 * - the last stored message, and every message without an id (a
 *   `ModelMessage`), is compared by content: the SHA-256 of its encoded
 *   canonical JSON (keys sorted, so key order does not matter) against what
 *   was stored (for a `ModelMessage` chat that is O(messages) CPU per save);
 * - anything else is a change: a shorter chat (a removed message or an edit
 *   that dropped what followed), another id at a stored position (a
 *   regeneration, an inserted or removed message), a changed last message.
 *   The whole chat is then rewritten in one atomic write (`rewritten: true`),
 *   never refused: the caller's array is the chat.
 * So an older message changed in place with its id kept (a client's
 * `setMessages` edit) is not written; give it a new id, or `delete` and save
 * the chat, to store it.
 *
 * A save of a chat this instance never loaded or saved reads the stored chat
 * first (to append rather than rewrite). What is remembered per chat is its
 * revision, a SHA-256 and the id per message (and the set of those ids), for
 * the 1000 chats used most recently (an older one is read again before its next save). A backend with
 * only the four seed methods gets whole-state `save`s.
 *
 * @module
 */
import { createHash } from "node:crypto";
import type { ModelMessage, UIMessage } from "ai";
import { validateKey } from "../backends/keys.js";
import { isBackendNotFound } from "../backends/not-found.js";
import { backendFromSpec } from "../backends/spec.js";
import { backendLabel, envelopeState } from "../backends/stored.js";
import type { StateBackend } from "../backends/types.js";
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
import { canonicalJson, decodeTagged, encodeTagged, TAG } from "../core/tagged-json.js";

/** The `meta.class` of a stored chat. */
export const CHAT_CLASS = "dumplings-ai/ai-sdk:Chat";

/** The envelope field holding the encoded message. */
export const CHAT_FIELD = "aiSdk";

/** A message a chat store keeps: an AI SDK `UIMessage` or `ModelMessage`. */
export type ChatMessage = UIMessage | ModelMessage;

/** Options of {@link createChatStore}. */
export interface ChatStoreOptions {
  /**
   * The session backend: `MemoryBackend`, `FileBackend`, `SQLiteBackend`, `RedisBackend`,
   * `PostgresBackend` or any `StateBackend`; or a SPEC string as the CLI takes it (`file:DIR`,
   * `sqlite:PATH`, `postgres://URL?schema=S`, `redis://URL?prefix=P`, `memory:`), opened with
   * {@link backendFromSpec} (close it through `chats.store.close?.()`).
   */
  store: StateBackend | string;
  /** Prefix of the stored keys (`keyPrefix + chatId`); `list()` returns the chats under it. @default "chat-" */
  keyPrefix?: string;
}

/** Result of {@link ChatStore.save}. */
export interface ChatSaveResult {
  /** The new stored revision (backends with revisions), or the unchanged one when nothing needed writing. */
  revision?: number;
  /** Messages physically written: 1 for a chat that grew by one message. */
  written: number;
  /** True when the whole chat was rewritten (first save, a changed older message, a backend without `write`). */
  rewritten: boolean;
}

/** Options of {@link ChatStore.save}. */
export interface ChatSaveOptions {
  /**
   * The revision the caller's messages are based on (what {@link ChatStore.read} returned; `null`:
   * the chat must not exist yet). When the chat is stored at another revision (another request saved
   * it meanwhile), the save is a `ConflictError` and nothing is written — unless the stored chat
   * already holds exactly these messages (a save repeated after a crash), which is a no-op.
   * Without it, the save is compared with what this store instance last loaded or saved.
   */
  expectedRevision?: number | null;
}

/** A chat read with its revision ({@link ChatStore.read}). */
export interface ChatRead<M extends ChatMessage = ChatMessage> {
  /** The messages, as {@link ChatStore.load} returns them. */
  messages: M[];
  /** The stored revision (backends with revisions): pass it to `save` as `expectedRevision`. */
  revision?: number;
}

/** A store of AI SDK chats; made by {@link createChatStore}. */
export interface ChatStore<M extends ChatMessage = ChatMessage> {
  /** The backend. */
  readonly store: StateBackend;
  /**
   * Stores the chat's messages (the whole list; only what changed is written). A `UIMessage` whose
   * `id` appears earlier in the list is a re-sent message (a retry, an edit, a regeneration): it
   * replaces the earlier one and the messages between them are dropped, as the AI SDK's `useChat`
   * does, so a message is never stored twice.
   *
   * What is a change (the AI SDK's message identity; see the module comment): a stored message other
   * than the last is unchanged when the message at its position has the same `id` (its content is not
   * read, so the save costs O(new messages) with fresh objects from `JSON.parse`); the last stored
   * message and messages without an id (`ModelMessage`s) are compared by content. A shorter chat,
   * another id at a stored position or a changed last message rewrites the whole chat atomically
   * (`rewritten: true`). An older message changed in place with its id kept is not written.
   *
   * @param chatId - the chat id (a key: no `/`, `\`, control characters, leading `.`; ≤ 200 bytes with the prefix)
   * @param messages - the chat's messages, in order
   * @returns `{ revision, written, rewritten }`
   * @throws {InvalidKeyError} for a bad chat id; {InvalidStateError} for a message without a valid `role`;
   *   {NonJsonValueError} naming `messages[i]…` for a value the encoding cannot carry (nothing written)
   * @param options - `expectedRevision`: the revision the messages are based on (see {@link ChatSaveOptions});
   *   two requests that each read the chat and save their own turn must pass it, or the later save wins
   * @throws {ConflictError} when the chat is stored at another revision than `options.expectedRevision`, or
   *   another writer saved it since this store loaded or saved it (nothing written; read again)
   * @throws {InvalidOptionError} for an unknown option or an `expectedRevision` that is not an integer >= 1 or null
   * @throws {BackendError} wrapping a driver failure
   */
  save(chatId: string, messages: readonly M[], options?: ChatSaveOptions): Promise<ChatSaveResult>;
  /**
   * Reads a chat with its stored revision, for a later `save(…, { expectedRevision })`.
   *
   * @param chatId - the chat id
   * @returns `{ messages, revision }`, or `undefined` when none is stored
   * @throws {FormatError} when the key holds something that is not a chat
   * @throws {BackendError} wrapping a driver failure
   */
  read(chatId: string): Promise<ChatRead<M> | undefined>;
  /**
   * Reads a chat.
   *
   * @param chatId - the chat id
   * @returns its messages (deep-equal to what was saved; `Uint8Array`/`URL` restored), or `undefined` when none is stored
   * @throws {FormatError} when the key holds something that is not a chat
   * @throws {BackendError} wrapping a driver failure
   */
  load(chatId: string): Promise<M[] | undefined>;
  /**
   * Deletes a chat.
   *
   * @param chatId - the chat id
   * @returns true when a chat was deleted
   */
  delete(chatId: string): Promise<boolean>;
  /**
   * The stored chat ids (keys under the prefix), sorted.
   *
   * @returns chat ids
   */
  list(): Promise<string[]>;
}

const OPTIONS = optionKeys<ChatStoreOptions>({ store: true, keyPrefix: true });
const SAVE_OPTIONS = optionKeys<ChatSaveOptions>({ expectedRevision: true });

/** What this store instance knows is stored for a chat. */
interface Track {
  revision: number | undefined;
  /** SHA-256 of the canonical JSON of each stored envelope, in order. */
  fingerprints: string[];
  /** The `id` of each stored message (a non-empty string), or undefined for a message without one. */
  ids: (string | undefined)[];
  /** The set of `ids` when every stored message has a distinct id (built on first use), else null. */
  idSet?: Set<string> | null;
  /**
   * The first and last stored envelopes as stored (their key order): sent in place of the caller's
   * copies when appending, since a backend checks those messages byte for byte ("stored unchanged"
   * is verified, not assumed) and a caller's copy may order its keys differently.
   */
  first: Envelope | undefined;
  last: Envelope | undefined;
}

/**
 * The chat a list of messages stands for when a message is re-sent: a `UIMessage` whose `id` appears
 * earlier in the list replaces that earlier message, and the messages between the two are dropped (the
 * AI SDK's own identity rule: `useChat`'s `sendMessage({ messageId })` edits a message and
 * `regenerate()` replaces an answer, each discarding what followed it). So a route that appends the
 * request's message to the stored chat (`[...stored, message]`) never stores a retried or edited message
 * twice. Messages without a string `id` (`ModelMessage`s) are kept as they are.
 *
 * @returns `messages` itself when no id repeats, else a new array
 */
function withoutResent<M>(messages: readonly M[]): readonly M[] {
  const seen = new Set<string>();
  let repeated = false;
  for (const m of messages) {
    const id = idOf(m);
    if (id === undefined) continue;
    if (seen.has(id)) {
      repeated = true;
      break;
    }
    seen.add(id);
  }
  if (!repeated) return messages;
  const out: M[] = [];
  const at = new Map<string, number>();
  for (const m of messages) {
    const id = idOf(m);
    const earlier = id === undefined ? undefined : at.get(id);
    if (earlier !== undefined) {
      for (const dropped of out.splice(earlier)) {
        const d = idOf(dropped);
        if (d !== undefined) at.delete(d);
      }
    }
    if (id !== undefined) at.set(id, out.length);
    out.push(m);
  }
  return out;
}

/** A message's identity: its `id` when that is a non-empty string (a `UIMessage`), else undefined. */
function idOf(m: unknown): string | undefined {
  const id = m !== null && typeof m === "object" ? (m as { id?: unknown }).id : undefined;
  return typeof id === "string" && id !== "" ? id : undefined;
}

/** The id of a stored message, read from its envelope (undefined for a tag-wrapped or id-less one). */
function envelopeId(e: Envelope): string | undefined {
  const v = e?.[CHAT_FIELD];
  if (v === null || typeof v !== "object" || Array.isArray(v) || Object.hasOwn(v, TAG)) return undefined;
  return idOf(v);
}

/** Whether `m` is an object whose `role` is a chat role (the fast path of {@link roleOf}). */
function hasRole(m: unknown): boolean {
  if (m === null || typeof m !== "object" || Array.isArray(m)) return false;
  const role = (m as { role?: unknown }).role;
  return typeof role === "string" && ROLES.has(role);
}

/**
 * Checks every message's role ({@link InvalidStateError} naming the first bad one) and tells whether
 * `messages` provably re-sends no id, known from what is stored with one id comparison per stored
 * message and a set look-up per later one: the stored messages all have distinct ids, `messages`
 * starts with those very ids in order, and no later message repeats a stored id or another later
 * one. False means "not proven" (then {@link withoutResent} looks at every id).
 */
function checkMessages(track: Track | undefined, messages: readonly unknown[]): boolean {
  let proven = track !== undefined;
  let set: Set<string> | null | undefined;
  if (track !== undefined) {
    if (track.idSet === undefined) {
      const all = new Set<string>();
      for (const id of track.ids) if (id !== undefined) all.add(id);
      track.idSet = all.size === track.ids.length ? all : null;
    }
    set = track.idSet;
    if (set === null || messages.length < track.ids.length) proven = false;
  }
  const ids = proven ? (track as Track).ids : [];
  const n = ids.length;
  // A message with a stored message's id at its position is that message (its role, like its content,
  // is the stored one and is not read). The first one that is not ends the proof; every message is then checked.
  for (let i = 0; i < n; i++) {
    const m = messages[i] as { id?: unknown } | null | undefined;
    if (m?.id !== ids[i]) {
      for (let j = 0; j < messages.length; j++) if (!hasRole(messages[j])) roleOf(messages[j], j);
      return false;
    }
  }
  let later: Set<string> | undefined;
  for (let i = n; i < messages.length; i++) {
    const m = messages[i];
    if (!hasRole(m)) roleOf(m, i);
    if (!proven) continue;
    const id = idOf(m);
    if (id === undefined) continue;
    later ??= new Set();
    if ((set as Set<string>).has(id) || later.has(id)) proven = false;
    else later.add(id);
  }
  return proven;
}

/** Chats whose stored state one store instance remembers (least recently used forgotten first). */
const MAX_TRACKED_CHATS = 1000;

function fingerprint(envelope: Envelope): string {
  return createHash("sha256")
    .update(canonicalJson(envelope as unknown as JsonValue))
    .digest("base64");
}

function trackOf(revision: number | undefined, history: readonly Envelope[], fingerprints?: string[]): Track {
  return {
    revision,
    fingerprints: fingerprints ?? history.map(fingerprint),
    ids: history.map(envelopeId),
    first: history[0],
    last: history.at(-1),
  };
}

type Envelope = { role: string; content: null; tool_call_id?: string; [CHAT_FIELD]: JsonValue };

const ROLES = new Set(["system", "user", "assistant", "tool"]);

/** Checks that `message` is an object with a chat role; returns the role. */
function roleOf(message: unknown, index: number): string {
  if (message === null || typeof message !== "object" || Array.isArray(message)) {
    throw new InvalidStateError(`messages[${index}]`, "a chat message must be an object");
  }
  const role = (message as { role?: unknown }).role;
  if (typeof role !== "string" || !ROLES.has(role)) {
    throw new InvalidStateError(
      `messages[${index}].role`,
      `role ${JSON.stringify(role)} is not one of system, user, assistant, tool`,
    );
  }
  return role;
}

function envelope(message: unknown, index: number): Envelope {
  const role = roleOf(message, index);
  const out: Envelope = { role, content: null, [CHAT_FIELD]: null };
  if (role === "tool") {
    const content = (message as { content?: unknown }).content;
    const first = Array.isArray(content) ? (content[0] as { toolCallId?: unknown; approvalId?: unknown }) : undefined;
    const id = first?.toolCallId ?? first?.approvalId;
    out.tool_call_id = typeof id === "string" ? id : "";
  }
  out[CHAT_FIELD] = encodeTagged(message, `messages[${index}]`, index);
  return out;
}

/**
 * One save's messages, encoded on demand: a message the stored prefix accounts for is never encoded
 * or hashed (see {@link storedPrefix}).
 */
class Pending {
  readonly #envelopes = new Map<number, Envelope>();
  readonly #fingerprints = new Map<number, string>();
  constructor(readonly messages: readonly unknown[]) {}
  envelope(i: number): Envelope {
    let e = this.#envelopes.get(i);
    if (e === undefined) {
      e = envelope(this.messages[i], i);
      this.#envelopes.set(i, e);
    }
    return e;
  }
  fingerprint(i: number): string {
    let f = this.#fingerprints.get(i);
    if (f === undefined) {
      f = fingerprint(this.envelope(i));
      this.#fingerprints.set(i, f);
    }
    return f;
  }
  /** Encodes messages `from` … end (so an encoding error surfaces before any write). */
  encodeFrom(from: number): void {
    for (let i = from; i < this.messages.length; i++) this.envelope(i);
  }
  /** Every message encoded: the history of a whole rewrite. */
  all(): Envelope[] {
    return this.messages.map((_, i) => this.envelope(i));
  }
  /** Fingerprints of every message. */
  allFingerprints(): string[] {
    return this.messages.map((_, i) => this.fingerprint(i));
  }
  /**
   * The history of an append on `base` stored messages: the stored first and last envelopes at 0 and
   * `base - 1` (a backend checks them byte for byte), the new messages encoded, and the messages in
   * between encoded only if a backend reads them (it does not when it appends; it would on a rewrite).
   */
  appended(track: Track, base: number): Envelope[] {
    const out: Envelope[] = new Array(this.messages.length);
    for (let i = base; i < out.length; i++) out[i] = this.envelope(i);
    if (base === 0) return out;
    out[0] = track.first as Envelope;
    out[base - 1] = track.last as Envelope;
    if (base <= 2) return out;
    const lazy = (prop: string | symbol): number | undefined => {
      if (typeof prop !== "string") return undefined;
      const i = Number(prop);
      return Number.isInteger(i) && i > 0 && i < base - 1 && String(i) === prop ? i : undefined;
    };
    return new Proxy(out, {
      get: (target, prop, receiver) => {
        const i = lazy(prop);
        if (i !== undefined && target[i] === undefined) target[i] = this.envelope(i);
        return Reflect.get(target, prop, receiver);
      },
      has: (target, prop) => lazy(prop) !== undefined || Reflect.has(target, prop),
      getOwnPropertyDescriptor: (target, prop) => {
        const i = lazy(prop);
        if (i !== undefined && target[i] === undefined) target[i] = this.envelope(i);
        return Reflect.getOwnPropertyDescriptor(target, prop);
      },
    });
  }
}

/**
 * How many leading messages of `pending` are the stored chat unchanged (then only the rest is
 * written), or undefined when the stored chat is not a prefix of them (then the chat is rewritten).
 * The rule (the AI SDK's message identity): a stored message other than the last is unchanged when
 * the message at its position has the same `id` (a non-empty string) — its content is not compared;
 * the last stored message, and every message without an id (`ModelMessage`s), is compared by content
 * (SHA-256 of its canonical encoded JSON).
 */
function storedPrefix(track: Track, pending: Pending, idsMatch: boolean): number | undefined {
  const n = track.fingerprints.length;
  const messages = pending.messages;
  if (track.revision === undefined || messages.length < n) return undefined;
  const ids = track.ids;
  // `idsMatch` ({@link checkMessages}): every stored message has an id, and the same one is at its position.
  for (let i = idsMatch ? Math.max(0, n - 1) : 0; i < n; i++) {
    const id = ids[i];
    if (id !== undefined && i < n - 1 && id === idOf(messages[i])) continue;
    if (pending.fingerprint(i) !== track.fingerprints[i]) return undefined;
  }
  return n;
}

/**
 * Creates a store of AI SDK chats on a session backend.
 *
 * @param options - `store`: the backend instance; `keyPrefix` @default "chat-"
 * @returns `{ save, read, load, delete, list }`
 * @throws {InvalidOptionError} for an unknown option, a missing `store` or a non-string `keyPrefix`
 * @example
 * import { createChatStore } from "dumplings-ai/ai-sdk";
 * import { SQLiteBackend } from "dumplings-ai/sqlite";
 * const chats = createChatStore<UIMessage>({ store: new SQLiteBackend({ dbPath: "./chats.db" }) });
 * await chats.save("c1", messages);               // first save: writes every message
 * await chats.save("c1", [...messages, answer]);  // writes one message
 * const again = await chats.load("c1");           // deep-equal to [...messages, answer]
 */
export function createChatStore<M extends ChatMessage = ChatMessage>(options: ChatStoreOptions): ChatStore<M> {
  checkOptions("createChatStore", options, OPTIONS);
  const store = typeof options?.store === "string" ? backendFromSpec(options.store, "store") : options?.store;
  if (store === null || typeof store !== "object" || typeof store.load !== "function") {
    throw new InvalidOptionError("createChatStore", "store", "a session backend instance is required");
  }
  const prefix = options.keyPrefix ?? "chat-";
  if (typeof prefix !== "string") {
    throw new InvalidOptionError("createChatStore", "keyPrefix", "must be a string");
  }
  const tracks = new Map<string, Track>();
  const queues = new Map<string, Promise<unknown>>();
  const remember = (chatId: string, track: Track): void => {
    tracks.delete(chatId); // re-inserted last: Map order is recency
    tracks.set(chatId, track);
    if (tracks.size > MAX_TRACKED_CHATS) tracks.delete(tracks.keys().next().value as string);
  };

  const keyOf = (chatId: string): string => {
    if (typeof chatId !== "string" || chatId === "") validateKey(chatId);
    return validateKey(prefix + chatId);
  };

  function wrap(what: string, key: string | undefined, e: unknown): never {
    if (e instanceof DumplingsError) throw e;
    throw new BackendError(backendLabel(store as StateBackend), what, { key, cause: e });
  }

  /** Runs the chat's operations one at a time (a save waits for the previous one). */
  const serial = <T>(chatId: string, task: () => Promise<T>): Promise<T> => {
    const previous = queues.get(chatId) ?? Promise.resolve();
    const run = previous.then(task, task);
    const settled = run.catch(() => undefined);
    queues.set(chatId, settled);
    void settled.then(() => {
      if (queues.get(chatId) === settled) queues.delete(chatId);
    });
    return run;
  };

  /** Reads the stored envelopes and revision; `undefined` when nothing is stored. */
  const readChat = async (
    chatId: string,
    key: string,
  ): Promise<{ history: Envelope[]; revision?: number } | undefined> => {
    let state: AgentState | undefined;
    let revision: number | undefined;
    try {
      if (typeof store.read === "function") {
        const r = await store.read(key);
        state = r?.state;
        revision = r?.revision;
      } else {
        state = (await store.load(key)) ?? undefined;
      }
    } catch (e) {
      if ((e instanceof DumplingsError && e.code === "STATE_NOT_FOUND") || isBackendNotFound(e)) return undefined;
      wrap(`cannot load chat ${JSON.stringify(chatId)}`, key, e);
    }
    if (state === undefined || state === null) return undefined;
    if (state.meta?.class !== CHAT_CLASS) {
      throw new FormatError(`key ${JSON.stringify(key)} holds a ${String(state.meta?.class)} session, not a chat`, {
        file: `${backendLabel(store)} key ${JSON.stringify(key)}`,
      });
    }
    return { history: state.history as unknown as Envelope[], revision };
  };

  const decodeHistory = (key: string, history: Envelope[]): M[] =>
    history.map((e, i) => {
      const source = `${backendLabel(store)} key ${JSON.stringify(key)} message ${i}`;
      if (e === null || typeof e !== "object" || !Object.hasOwn(e, CHAT_FIELD)) {
        throw new FormatError(`history entry is not a chat message (no ${CHAT_FIELD} field)`, { file: source });
      }
      return decodeTagged(e[CHAT_FIELD], source) as M;
    });

  /** The stored chat and its revision (the one path of `read` and `load`). */
  const read = async (chatId: string): Promise<ChatRead<M> | undefined> => {
    const key = keyOf(chatId);
    return serial(chatId, async () => {
      const stored = await readChat(chatId, key);
      if (stored === undefined) {
        tracks.delete(chatId);
        return undefined;
      }
      const messages = decodeHistory(key, stored.history);
      remember(chatId, trackOf(stored.revision, stored.history));
      return stored.revision === undefined ? { messages } : { messages, revision: stored.revision };
    });
  };

  return {
    store,

    async save(chatId, messages, options = {}) {
      checkOptions("chat save", options, SAVE_OPTIONS);
      const expected = options.expectedRevision;
      if (expected !== undefined && expected !== null && !(Number.isSafeInteger(expected) && expected >= 1)) {
        throw new InvalidOptionError(
          "chat save",
          "expectedRevision",
          `must be an integer >= 1 or null, got ${String(expected)}`,
        );
      }
      const key = keyOf(chatId);
      if (!Array.isArray(messages)) throw new InvalidStateError("messages", "messages must be an array");
      // Check (and encode what the save will write) before any I/O: bad input never changes stored data.
      const seen = typeof store.write === "function" ? tracks.get(chatId) : undefined;
      const proven = checkMessages(seen, messages);
      const list = proven ? messages : withoutResent(messages);
      const pending = new Pending(list);
      const seenBase = seen === undefined ? undefined : storedPrefix(seen, pending, proven);
      pending.encodeFrom(seenBase ?? 0);
      return serial(chatId, async () => {
        if (typeof store.write !== "function") {
          const history = pending.all();
          try {
            await store.save(key, envelopeState(chatId, CHAT_CLASS, history));
          } catch (e) {
            wrap(`cannot save chat ${JSON.stringify(chatId)}`, key, e);
          }
          remember(chatId, trackOf(undefined, history));
          return { written: history.length, rewritten: true };
        }
        let track = tracks.get(chatId);
        const pinned = expected !== undefined && typeof store.read === "function";
        if (track === undefined || (pinned && (track.revision ?? null) !== expected)) {
          const stored = await readChat(chatId, key);
          track = trackOf(stored?.revision, stored?.history ?? []);
          remember(chatId, track);
        }
        if (pinned && (track.revision ?? null) !== expected) {
          // Another request saved the chat since the caller read it. Saving again exactly what is stored
          // (a step re-run after a crash) is a no-op; anything else would drop that request's turn.
          const same =
            track.fingerprints.length === list.length &&
            track.fingerprints.every((f, i) => f === pending.fingerprint(i));
          if (same) return { revision: track.revision, written: 0, rewritten: false };
          throw new ConflictError(key, expected ?? null, track.revision ?? null, backendLabel(store));
        }
        const baseLength = track === seen ? seenBase : storedPrefix(track, pending, false);
        if (baseLength !== undefined && baseLength === list.length) {
          return { revision: track.revision, written: 0, rewritten: false }; // nothing changed
        }
        const history = baseLength === undefined ? pending.all() : pending.appended(track, baseLength);
        let result: Awaited<ReturnType<NonNullable<StateBackend["write"]>>>;
        try {
          // No revision known: "create only" (never overwrite a chat stored meanwhile); a backend
          // without `read` cannot tell us the revision, so its writes are plain upserts.
          const expectedRevision = track.revision ?? (typeof store.read === "function" ? null : undefined);
          result = await store.write(key, envelopeState(chatId, CHAT_CLASS, history), {
            expectedRevision,
            baseLength,
          });
        } catch (e) {
          wrap(`cannot save chat ${JSON.stringify(chatId)}`, key, e);
        }
        if (baseLength !== undefined && !result.rewritten && tracks.get(chatId) === track) {
          // Appended: the stored prefix is the tracked one (its fingerprints and ids are kept as they are).
          for (let i = baseLength; i < list.length; i++) {
            track.fingerprints.push(pending.fingerprint(i));
            const id = envelopeId(pending.envelope(i));
            track.ids.push(id);
            const set = track.idSet;
            if (set) {
              if (id !== undefined && !set.has(id)) set.add(id);
              else track.idSet = null; // no longer every id distinct
            }
          }
          track.revision = result.revision;
          track.last = pending.envelope(list.length - 1);
          if (baseLength === 0) track.first = pending.envelope(0);
          remember(chatId, track);
        } else {
          remember(chatId, trackOf(result.revision, pending.all(), pending.allFingerprints()));
        }
        return { revision: result.revision, written: result.written, rewritten: result.rewritten };
      });
    },

    read,

    async load(chatId) {
      return (await read(chatId))?.messages;
    },

    async delete(chatId) {
      const key = keyOf(chatId);
      return serial(chatId, async () => {
        tracks.delete(chatId);
        try {
          return Boolean(await store.delete(key));
        } catch (e) {
          wrap(`cannot delete chat ${JSON.stringify(chatId)}`, key, e);
        }
      });
    },

    async list() {
      let keys: string[];
      try {
        keys = [...(await store.listKeys())];
      } catch (e) {
        wrap("cannot list chats", undefined, e);
      }
      return keys
        .filter((k) => k.startsWith(prefix) && k.length > prefix.length)
        .map((k) => k.slice(prefix.length))
        .sort();
    },
  };
}
