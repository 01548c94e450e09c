/**
 * Helpers shared by the database backends (SQLite, Redis, PostgreSQL) to
 * check what a caller writes and what a store returns: one rule in one place,
 * so the backends cannot drift apart.
 *
 * @module
 */
import * as crypto from "node:crypto";
import { FormatError, InvalidStateError } from "../core/errors.js";
import { assertJson, parseStoredJson, sameFlatObject } from "../core/json.js";
import type { Message, Protocol } from "../core/messages.js";
import {
  AgentConfigSchema,
  type AgentState,
  checkFormatVersion,
  checkStoredMessage,
  isStoredMessage,
} from "../core/state.js";
import { FORMAT_VERSION, packageVersion } from "../core/version.js";

/**
 * Checks a `WriteOptions.expectedRevision`.
 *
 * @param revision - `undefined`, `null` or a non-negative safe integer
 * @throws {TypeError} for anything else
 */
export function checkRevision(revision: unknown): void {
  if (revision === undefined || revision === null) return;
  if (typeof revision !== "number" || !Number.isSafeInteger(revision) || revision < 0) {
    throw new TypeError(`expectedRevision must be null or a non-negative integer, got ${String(revision)}`);
  }
}

/**
 * Checks that a state to write has a history array.
 *
 * @throws {InvalidStateError} when `state` is not an object with a `history` array
 */
export function checkStateShape(state: AgentState): void {
  if (typeof state !== "object" || state === null || !Array.isArray(state.history)) {
    throw new InvalidStateError("history", "a state must be an object with meta, config, state and a history array");
  }
}

/**
 * The JSON text of a header part (`meta`, `config` or `state`).
 *
 * @param value - must be a JSON object
 * @param path - its name in errors
 * @returns `JSON.stringify(value)`
 * @throws {NonJsonValueError} when a value inside is not JSON
 * @throws {InvalidStateError} when `value` is not an object
 */
export function jsonText(value: unknown, path: string): string {
  assertJson(value, path);
  if (typeof value !== "object" || value === null) throw new InvalidStateError(path, "must be a JSON object");
  return JSON.stringify(value);
}

/**
 * Parses a stored header part and validates it: the JSON read rule of
 * `core/json.ts` (depth limit, numbers in range), for `meta` the format
 * version ({@link checkFormatVersion}: an unknown one is refused before
 * anything else), then its schema.
 *
 * @param key - the session key (for the message)
 * @param file - where it is stored, e.g. `postgres:dumplings.sessions["k"]`
 * @param field - `meta`, `config` or `state`
 * @param text - the stored text
 * @param schema - a zod schema (anything with `safeParse`)
 * @returns the parsed value
 * @throws {FormatError} naming the key, the place and the field when the text is not JSON, breaks the
 *   read rule, names an unknown format version or does not match its schema
 */
export function parseHeaderField<T>(
  key: string,
  file: string,
  field: string,
  text: unknown,
  schema: { safeParse(v: unknown): { success: true; data: T } | { success: false; error: unknown } },
): T {
  const value = parseStoredJson(text, { file, label: `header field ${field} of ${JSON.stringify(key)}` });
  if (field === "meta" && typeof value === "object" && value !== null) {
    checkFormatVersion((value as { formatVersion?: unknown }).formatVersion, file);
  }
  const r = schema.safeParse(value);
  if (!r.success) {
    throw new FormatError(`header field ${field} of ${JSON.stringify(key)} does not match its schema`, {
      file,
      cause: r.error,
    });
  }
  return r.data;
}

/**
 * Decodes one stored history message by the rules a save applies (see
 * `checkStoredMessage` in `core/state.ts`): JSON, the read rule (depth,
 * numbers), a JSON object of the history's protocol.
 *
 * @param key - the session key (for the message)
 * @param file - where it is stored
 * @param text - the stored JSON text
 * @param protocol - the history's protocol (`meta.protocol`)
 * @param index - its index in the history
 * @returns the message
 * @throws {FormatError} naming the key, the place and `history[index]`
 */
export function decodeStoredMessage(
  key: string,
  file: string,
  text: unknown,
  protocol: Protocol,
  index: number,
): Message {
  let value: unknown;
  try {
    if (typeof text !== "string") throw new TypeError("not text");
    value = JSON.parse(text);
  } catch (cause) {
    throw new FormatError(`key ${JSON.stringify(key)}: history[${index}] is not valid JSON`, { file, cause });
  }
  // A load checks thousands of messages: the usual one passes without a label or a source object made for it.
  if (isStoredMessage(value, protocol)) return value as Message;
  return checkStoredMessage(value, protocol, index, { file, label: `key ${JSON.stringify(key)}` }); // the JSON read rule, then the schema
}

/** The keys of a meta in the order `toState` writes them (what {@link metaJson}'s fast path expects). */
const META_KEYS = [
  "formatVersion",
  "schemaVersion",
  "agentUuid",
  "agentName",
  "protocol",
  "class",
  "savedAt",
  "messageCount",
] as const;

/**
 * Per `agentUuid` (sessions saved in turn each keep theirs; at most {@link META_MEMO_MAX}), the last
 * meta {@link metaJson} encoded in full: its six values before `savedAt`, and its text up to `savedAt`'s value.
 */
const metaMemo = new Map<unknown, { values: unknown[]; head: string }>();
const META_MEMO_MAX = 1024;

/** True when `v` is a plain object (`Object.prototype`) without symbol keys, as the JSON rule requires. */
function plainRecord(v: object): boolean {
  return Object.getPrototypeOf(v) === Object.prototype && Object.getOwnPropertySymbols(v).length === 0;
}

/**
 * `JSON.stringify(meta)`, checked by the JSON rule (`assertJson`, path `meta`), as a backend writes
 * it. A session's saves change only `savedAt` and `messageCount`: when the meta has exactly the keys
 * `toState` writes, in its order, the six others equal to those of the last meta of its `agentUuid`
 * encoded (checked then), a string `savedAt` and a finite `messageCount` (not -0), the text is that meta's head and
 * the two values: nothing else is walked or serialised. Anything else is checked and serialised whole.
 *
 * @param meta - the state's meta (an object)
 * @returns its JSON text
 * @throws {NonJsonValueError} as `assertJson`
 */
export function metaJson(meta: object): string {
  const last = metaMemo.get((meta as Record<string, unknown>).agentUuid);
  if (last !== undefined && plainRecord(meta)) {
    const m = meta as Record<string, unknown>;
    let i = 0;
    let same = true;
    for (const key in m) {
      if (i >= 8 || key !== META_KEYS[i] || (i < 6 && m[key] !== last.values[i])) {
        same = false;
        break;
      }
      i++;
    }
    const { savedAt, messageCount } = m;
    if (
      same &&
      i === 8 &&
      typeof savedAt === "string" &&
      typeof messageCount === "number" &&
      Number.isFinite(messageCount) &&
      !Object.is(messageCount, -0)
    ) {
      return `${last.head}${JSON.stringify(savedAt)},"messageCount":${messageCount}}`;
    }
  }
  assertJson(meta, "meta");
  const text = JSON.stringify(meta);
  const m = meta as Record<string, unknown>;
  const keys = Object.keys(m);
  if (plainRecord(meta) && keys.length === 8 && META_KEYS.every((k, i) => keys[i] === k)) {
    const values = META_KEYS.slice(0, 6).map((k) => m[k]);
    if (values.every((v) => typeof v === "string")) {
      const head = `${JSON.stringify(Object.fromEntries(META_KEYS.slice(0, 6).map((k, i) => [k, values[i]]))).slice(0, -1)},"savedAt":`;
      if (metaMemo.size >= META_MEMO_MAX) metaMemo.clear();
      metaMemo.set(values[2], { values, head });
    }
  }
  return text;
}

/**
 * `JSON.stringify(state)` of a state's `[STATE]` part, checked by the JSON rule (`assertJson`, path
 * `state`). The common one — exactly `currentTaskId` (null or a string), `hooks` (strings) and an
 * empty `fields` — is written out directly; anything else is checked and serialised whole.
 *
 * @param st - the state part (an object)
 * @returns its JSON text
 * @throws {NonJsonValueError} as `assertJson`
 */
export function runtimeStateJson(st: object): string {
  if (plainRecord(st)) {
    const s = st as Record<string, unknown>;
    let i = 0;
    let plain = true;
    for (const key in s) {
      if (key !== (i === 0 ? "currentTaskId" : i === 1 ? "hooks" : i === 2 ? "fields" : undefined)) {
        plain = false;
        break;
      }
      i++;
    }
    const { currentTaskId, hooks, fields } = s;
    if (
      plain &&
      i === 3 &&
      (currentTaskId === null || typeof currentTaskId === "string") &&
      Array.isArray(hooks) &&
      typeof fields === "object" &&
      fields !== null &&
      !Array.isArray(fields) &&
      plainRecord(fields) &&
      emptyRecord(fields)
    ) {
      let strings = true;
      for (let j = 0; j < hooks.length; j++) {
        if (!(j in hooks) || typeof hooks[j] !== "string") {
          strings = false;
          break;
        }
      }
      if (strings)
        return `{"currentTaskId":${JSON.stringify(currentTaskId)},"hooks":${JSON.stringify(hooks)},"fields":{}}`;
    }
  }
  assertJson(st, "state");
  return JSON.stringify(st);
}

/** True when `v` has no enumerable string key (own or inherited), as `JSON.stringify` writes `{}`. */
function emptyRecord(v: object): boolean {
  for (const _ in v) return false;
  return true;
}

/** JSON texts of history messages lent for one write, by the history array written (see {@link lendTexts}). */
const lentTexts = new WeakMap<readonly unknown[], { from: number; texts: readonly string[] }>();

/**
 * Lends the backends the JSON texts of messages of a history about to be written, so a message
 * is serialised once per save, by whoever needs it first: the persistence layer serialises the
 * new messages (it checks them anyway) and knows the text of the boundary message
 * (`baseLength - 1`, whose text proved the stored prefix), and a backend that would serialise
 * them again asks {@link lentText} instead. Only for the duration of the write: take them back
 * with {@link reclaimTexts}. Keyed by the history array itself, which the caller does not change
 * while the write runs, so a text is never used for another history.
 *
 * @param history - the `state.history` array handed to `write`
 * @param from - the index of `texts[0]`
 * @param texts - `texts[i]` is exactly `JSON.stringify(history[from + i])`, of a message `assertJson` accepted
 */
export function lendTexts(history: readonly unknown[], from: number, texts: readonly string[]): void {
  lentTexts.set(history, { from, texts });
}

/** Takes back the texts lent with {@link lendTexts} for `history`. */
export function reclaimTexts(history: readonly unknown[]): void {
  lentTexts.delete(history);
}

/**
 * The lent JSON text of `history[index]` (see {@link lendTexts}), when there is one: it is
 * `JSON.stringify(history[index])` of a message already checked by `assertJson`.
 *
 * @param history - the history being written
 * @param index - the message's index
 * @returns the text, or undefined (then serialise and check the message)
 */
export function lentText(history: readonly unknown[], index: number): string | undefined {
  const lent = lentTexts.get(history);
  return lent === undefined ? undefined : lent.texts[index - lent.from];
}

/**
 * Digest (sha1, base64) of a message's JSON text, stored for the last message
 * so an append can check (not assume) that the writer's history ends where the
 * stored one does: a message edited at the boundary forces a full rewrite.
 *
 * @throws {NonJsonValueError} when the message is not JSON
 */
export function messageDigest(history: readonly unknown[], index: number): string {
  return textDigest(messageText(history, index));
}

/**
 * The JSON text of `history[index]`: the lent one ({@link lentText}), else checked and serialised.
 *
 * @throws {NonJsonValueError} when the message is not JSON
 */
export function messageText(history: readonly unknown[], index: number): string {
  const lent = lentText(history, index);
  if (lent !== undefined) return lent;
  const message = history[index];
  assertJson(message, `history[${index}]`, index);
  return JSON.stringify(message);
}

/** `crypto.hash` (Node >= 20.12): one call, no Hash object per digest. */
const oneShotHash = (crypto as { hash?: (algorithm: string, data: string, encoding: "base64") => string }).hash;

/** The last digest computed by {@link textDigest}: a save digests its new last message, the next one its boundary, the same text. */
let lastDigest: { text: string; digest: string } | undefined;

/**
 * Digest (sha1, base64) of a message's JSON text (see {@link messageDigest}).
 *
 * @param text - the message's JSON text
 * @returns the digest
 */
export function textDigest(text: string): string {
  if (lastDigest !== undefined && lastDigest.text === text) return lastDigest.digest;
  const digest = oneShotHash
    ? oneShotHash("sha1", text, "base64")
    : crypto.createHash("sha1").update(text).digest("base64");
  lastDigest = { text, digest };
  return digest;
}

/** {@link messageDigest} of the last message, `""` for an empty history. */
export function tailDigest(history: readonly unknown[]): string {
  return history.length > 0 ? messageDigest(history, history.length - 1) : "";
}

/** The config a backend last wrote or read for a key: a shallow copy, its JSON text, the revision it is stored at. */
interface RememberedConfig {
  revision: number;
  snapshot: Record<string, unknown>;
  text: string;
}

/**
 * Per-key memory of the config stored at a revision: a save whose config did
 * not change (`sameFlatObject`, O(fields)) neither checks nor serialises it
 * again, and the backend leaves the stored config untouched when the stored
 * revision is still the remembered one. So an agent with a 50 MB prompt pays
 * for the prompt on its first save, not on every one-message save.
 *
 * Bounded (4096 keys, then cleared). Safe across processes and instances: the
 * remembered revision is compared with the stored one inside the write's own
 * compare-and-set, so another writer's config is never assumed.
 */
export class ConfigMemo {
  readonly #byKey = new Map<string, RememberedConfig>();

  /**
   * The remembered JSON text of `config` under `key` and the revision at which it is stored.
   *
   * @param key - the session key
   * @param config - the config about to be written
   * @returns `{ text, revision }` when `config` is the remembered one, else undefined (serialise it)
   */
  lookup(key: string, config: unknown): { text: string; revision: number } | undefined {
    const m = this.#byKey.get(key);
    return m !== undefined && sameFlatObject(config, m.snapshot) ? { text: m.text, revision: m.revision } : undefined;
  }

  /**
   * Remembers the config stored under `key` at `revision` (after a write or a read).
   *
   * @param key - the session key
   * @param revision - the stored revision holding it
   * @param config - the config object (copied: later changes to it are seen as changes)
   * @param text - its stored JSON text
   */
  remember(key: string, revision: number, config: unknown, text: string): void {
    if (typeof config !== "object" || config === null || Array.isArray(config)) return;
    if (this.#byKey.size >= 4096 && !this.#byKey.has(key)) this.#byKey.clear();
    this.#byKey.set(key, { revision, snapshot: { ...(config as Record<string, unknown>) }, text });
  }

  /** Forgets `key` (deleted), or everything. */
  forget(key?: string): void {
    if (key === undefined) this.#byKey.clear();
    else this.#byKey.delete(key);
  }
}

/**
 * Per-key memory of a header part's JSON text stored at a revision (the `state` part): a save
 * whose part serialises to the remembered text does not send or rewrite it when the stored
 * revision is still the remembered one (checked inside the write's own compare-and-set).
 * Bounded (4096 keys, then cleared).
 */
export class PartMemo {
  readonly #byKey = new Map<string, { revision: number; text: string }>();

  /**
   * The revision at which `text` is known to be stored under `key`.
   *
   * @param key - the session key
   * @param text - the part's JSON text about to be written
   * @returns the revision, or undefined when not known (send it)
   */
  lookup(key: string, text: string): number | undefined {
    const m = this.#byKey.get(key);
    return m !== undefined && m.text === text ? m.revision : undefined;
  }

  /**
   * Remembers the part's text stored under `key` at `revision` (after a write or a read).
   *
   * @param key - the session key
   * @param revision - the stored revision holding it
   * @param text - its stored JSON text
   */
  remember(key: string, revision: number, text: string): void {
    if (this.#byKey.size >= 4096 && !this.#byKey.has(key)) this.#byKey.clear();
    this.#byKey.set(key, { revision, text });
  }

  /** Forgets `key` (deleted), or everything. */
  forget(key?: string): void {
    if (key === undefined) this.#byKey.clear();
    else this.#byKey.delete(key);
  }
}

/**
 * A backend's name for messages: its `name`, or `custom` for a backend without one.
 *
 * @param store - any session backend
 * @returns e.g. `sqlite`, `redis`, `custom`
 */
export function backendLabel(store: { name?: unknown }): string {
  return typeof store.name === "string" && store.name !== "" ? store.name : "custom";
}

/** The empty agent config of every enveloped session (see {@link envelopeState}). */
let envelopeConfig: AgentState["config"] | undefined;

/**
 * The session state that stores another library's messages (AI SDK chats,
 * OpenAI Agents session items) as a history of envelopes: empty config and
 * state, the id as agent name and uuid, the adapter's marker class.
 *
 * @param id - the chat or session id
 * @param cls - the adapter's marker class (e.g. `dumplings-ai:ai-sdk-chat`), which `loadState` refuses
 * @param history - the envelopes, one per message
 * @returns a state any backend saves
 */
export function envelopeState(id: string, cls: string, history: readonly object[]): AgentState {
  // Parsed once: this runs on every save of a chat or session, and the backends'
  // config memos then see the very object they stored last and skip it.
  envelopeConfig ??= Object.freeze(AgentConfigSchema.parse({}));
  return {
    meta: {
      formatVersion: FORMAT_VERSION,
      schemaVersion: packageVersion(),
      agentUuid: id,
      agentName: id,
      protocol: "openai",
      class: cls,
      savedAt: new Date().toISOString(),
      messageCount: history.length,
    },
    config: envelopeConfig,
    state: { currentTaskId: null, hooks: [], fields: {} },
    history: history as unknown as Message[],
  };
}
