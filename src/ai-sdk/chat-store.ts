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
 * one message. "Unchanged" is checked by content, not identity (messages
 * arrive as new objects with every HTTP request): each message's canonical
 * JSON (keys sorted) is compared with what was stored — O(messages) CPU,
 * O(new messages) writes. A changed older message (an edited or regenerated
 * message, a removed one) is detected and the whole chat is rewritten in
 * one atomic write (`rewritten: true`), never refused: the caller's array is
 * the chat. A save of a chat this instance never loaded or saved reads the
 * stored chat first (to append rather than rewrite). What is remembered per
 * chat is its revision and a SHA-256 per message, for the 1000 chats used
 * most recently (an older one is read again before its next save). A backend with only the
 * four seed methods gets whole-state `save`s.
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
import { canonicalJson, decodeTagged, encodeTagged } from "../core/tagged-json.js";

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
  const idOf = (m: unknown): string | undefined => {
    const id = m !== null && typeof m === "object" ? (m as { id?: unknown }).id : undefined;
    return typeof id === "string" && id !== "" ? id : undefined;
  };
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

/** Chats whose stored state one store instance remembers (least recently used forgotten first). */
const MAX_TRACKED_CHATS = 1000;

function fingerprint(envelope: Envelope): string {
  return createHash("sha256")
    .update(canonicalJson(envelope as unknown as JsonValue))
    .digest("base64");
}

function trackOf(revision: number | undefined, history: Envelope[], fingerprints?: string[]): Track {
  return { revision, fingerprints: fingerprints ?? history.map(fingerprint), first: history[0], last: history.at(-1) };
}

type Envelope = { role: string; content: null; tool_call_id?: string; [CHAT_FIELD]: JsonValue };

const ROLES = new Set(["system", "user", "assistant", "tool"]);

function envelope(message: unknown, index: number): Envelope {
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
      // Encode (and check) everything before any I/O: bad input never changes stored data.
      const history = Array.from(withoutResent(messages), (m, i) => envelope(m, i));
      const fingerprints = history.map(fingerprint);
      return serial(chatId, async () => {
        const state = envelopeState(chatId, CHAT_CLASS, history);
        if (typeof store.write !== "function") {
          try {
            await store.save(key, state);
          } catch (e) {
            wrap(`cannot save chat ${JSON.stringify(chatId)}`, key, e);
          }
          remember(chatId, trackOf(undefined, history, fingerprints));
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
            track.fingerprints.length === fingerprints.length &&
            track.fingerprints.every((f, i) => f === fingerprints[i]);
          if (same) return { revision: track.revision, written: 0, rewritten: false };
          throw new ConflictError(key, expected ?? null, track.revision ?? null, backendLabel(store));
        }
        const n = track.fingerprints.length;
        let baseLength: number | undefined;
        if (track.revision !== undefined && history.length >= n) {
          baseLength = n;
          for (let i = 0; i < n; i++) {
            if (fingerprints[i] !== track.fingerprints[i]) {
              baseLength = undefined;
              break;
            }
          }
        }
        if (baseLength !== undefined && baseLength === history.length) {
          return { revision: track.revision, written: 0, rewritten: false }; // nothing changed
        }
        if (baseLength !== undefined && baseLength > 0 && track.first !== undefined && track.last !== undefined) {
          history[0] = track.first; // the same content, as stored
          history[baseLength - 1] = track.last;
        }
        let result: Awaited<ReturnType<NonNullable<StateBackend["write"]>>>;
        try {
          // No revision known: "create only" (never overwrite a chat stored meanwhile); a backend
          // without `read` cannot tell us the revision, so its writes are plain upserts.
          const expectedRevision = track.revision ?? (typeof store.read === "function" ? null : undefined);
          result = await store.write(key, state, { expectedRevision, baseLength });
        } catch (e) {
          wrap(`cannot save chat ${JSON.stringify(chatId)}`, key, e);
        }
        remember(chatId, trackOf(result.revision, history, fingerprints));
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
