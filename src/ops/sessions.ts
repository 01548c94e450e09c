/**
 * Reading stored sessions for the operator tools (the `dumplings` command and
 * the web inspector), through the public storage contract only (`load`,
 * `listKeys`, `read`, and `readHeader`/`iterHistory` when offered): the CLI
 * never imports a user's module to inspect data. A backend's own not-found
 * error is reported as the library's read paths report it.
 *
 * @module
 */
import { validateKey } from "../backends/keys.js";
import { readFailure } from "../backends/not-found.js";
import type { ClippedValue, StateBackend } from "../backends/types.js";
import { ConflictError, FormatError, StateNotFoundError } from "../core/errors.js";
import type { Message } from "../core/messages.js";
import type { AgentState } from "../core/state.js";

/**
 * Runs one read of a backend: its own not-found error (`ENOENT`, `FileNotFoundError`) becomes a
 * {@link StateNotFoundError}, as the library's read paths report it; any other error is thrown as it is.
 */
async function reading<T>(
  backend: StateBackend,
  key: string,
  label: string | undefined,
  read: () => T | Promise<T>,
): Promise<T> {
  try {
    return await read();
  } catch (e) {
    throw readFailure(e, key, labelOf(backend, label));
  }
}

function labelOf(backend: StateBackend, label: string | undefined): string {
  return label ?? (typeof backend.name === "string" && backend.name !== "" ? backend.name : "custom");
}

/**
 * Loads the raw stored state of a key through the storage contract (no
 * class resolution: the CLI never imports a user's module to inspect data).
 *
 * @param backend - the backend
 * @param key - the session key (validated first)
 * @param label - backend label for the not-found message
 * @returns the stored state
 * @throws {InvalidKeyError} for a bad key
 * @throws {StateNotFoundError} when nothing is stored under the key
 */
export async function loadRaw(backend: StateBackend, key: string, label?: string): Promise<AgentState> {
  validateKey(key);
  const state = await reading(backend, key, label, () => backend.load(key));
  if (state === undefined || state === null) throw new StateNotFoundError(key, label ?? backend.name);
  return state;
}

/**
 * Lists the keys of a backend, sorted.
 *
 * @param backend - the backend
 * @returns every stored key in code-point order
 */
export async function listKeysSorted(backend: StateBackend): Promise<string[]> {
  const keys = await backend.listKeys();
  return [...keys].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * Reads the header (`meta`, `config`, `state`) of a stored session: with the
 * backend's `readHeader` when it has one (the history is not read at all),
 * else from a whole-state load.
 *
 * @param backend - the backend
 * @param key - the session key (validated first)
 * @param label - backend label for the not-found message
 * @returns the header; `meta.messageCount` is the stored history's length
 * @throws {InvalidKeyError} for a bad key
 * @throws {StateNotFoundError} when nothing is stored under the key
 */
export async function readHeaderOf(
  backend: StateBackend,
  key: string,
  label?: string,
): Promise<Omit<AgentState, "history">> {
  validateKey(key);
  if (typeof backend.readHeader === "function") {
    const found = await reading(backend, key, label, () => backend.readHeader?.(key));
    if (found === undefined || found === null) throw new StateNotFoundError(key, label ?? backend.name);
    return found.header;
  }
  const { history, ...header } = await loadRaw(backend, key, label);
  return { ...header, meta: { ...header.meta, messageCount: history.length } };
}

/**
 * Reads a stored session whole through the backend's verified read path, as
 * `show`, `export` and `convert` read it (for `.duas` files: the header's
 * checksum, every history line, `message_count` and `history_crc32`), without
 * keeping the history: the messages are streamed and counted.
 *
 * @param backend - the backend
 * @param key - the session key (validated first)
 * @param label - backend label for the not-found message
 * @returns the header of the saved state that was read
 * @throws {FormatError} when the session is malformed, or its history does not hold `message_count` messages
 * @throws {StateNotFoundError} / {InvalidKeyError} / {BackendError} as the read path
 */
export async function verifySession(
  backend: StateBackend,
  key: string,
  label?: string,
): Promise<Omit<AgentState, "history">> {
  return readSession(backend, key, label, async (session) => {
    let count = 0;
    for await (const _ of session.history) count++;
    const expected = session.header.meta.messageCount;
    if (count !== expected) {
      throw new FormatError(
        `stored session ${JSON.stringify(key)} says message_count = ${expected} but its history holds ${count} messages`,
      );
    }
    return session.header;
  });
}

/**
 * Runs `work` on every item, at most `limit` at a time, and returns the results in the items' order.
 *
 * @param items - the items
 * @param limit - most calls in flight at once (>= 1)
 * @param work - the call for one item
 * @returns one result per item, in order
 * @throws the first error a call threw: no call starts after it, and the calls in flight are awaited first
 */
export async function mapOrdered<T, R>(
  items: readonly T[],
  limit: number,
  work: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  let failure: { error: unknown } | undefined;
  const lane = async () => {
    while (next < items.length && failure === undefined) {
      const i = next++;
      try {
        results[i] = await work(items[i] as T, i);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, lane));
  if (failure) throw failure.error;
  return results;
}

/** A stored session opened for reading: its header and its history as a stream. */
export interface SessionView {
  /** `meta`, `config` and `state` of the stored session. */
  header: Omit<AgentState, "history">;
  /** The history, in order; iterate it once. It is the history of the same saved state as `header`. */
  history: AsyncIterable<Message>;
  /** True when the history is streamed from the backend (bounded memory), false when it was loaded whole. */
  streamed: boolean;
  /** The stored revision of the state read, when the backend keeps revisions. */
  revision?: number;
  /** Header values the backend returned clipped (see `OpenSessionOptions.clipAt`); absent when none. */
  clipped?: ClippedValue[];
}

/** Options of {@link openSession}. */
export interface OpenSessionOptions {
  /** Open exactly this stored revision: `ConflictError` when the session is stored at another one. */
  revision?: number;
  /**
   * Header values longer than this (UTF-16 code units) may be returned
   * clipped, listed in `clipped` (see `HeaderReadOptions.clipAt`): for a
   * reader that only shows them.
   */
  clipAt?: number;
}

/** How many times a read that met a save in between is started again (see {@link openSession}). */
const READ_ATTEMPTS = 10;

/**
 * Opens a stored session for reading through the storage contract. When the
 * backend offers both `readHeader` and `iterHistory`, only the header is read
 * now and the history is streamed (memory bounded regardless of its size),
 * pinned to the header's revision: a save landing between the two reads
 * (a live session) makes the stream refuse to start (`ConflictError`), and the
 * header is read again, so header and history are always one saved state
 * (after 10 such races in a row, the whole state is loaded instead).
 * Otherwise the whole state is loaded.
 *
 * @param backend - the backend
 * @param key - the session key (validated first)
 * @param label - backend label for the not-found message
 * @param options - `revision`: open only that stored revision; `clipAt`: long header values may come clipped
 * @returns the header and a one-shot history stream of the same saved state
 * @throws {InvalidKeyError} for a bad key
 * @throws {StateNotFoundError} when nothing is stored under the key
 * @throws {ConflictError} when `options.revision` is not the stored revision
 */
export async function openSession(
  backend: StateBackend,
  key: string,
  label?: string,
  options: OpenSessionOptions = {},
): Promise<SessionView> {
  validateKey(key);
  if (typeof backend.readHeader === "function" && typeof backend.iterHistory === "function") {
    for (let attempt = 1; ; attempt++) {
      const found = await reading(backend, key, label, () =>
        backend.readHeader?.(key, options.clipAt === undefined ? undefined : { clipAt: options.clipAt }),
      );
      if (found === undefined || found === null) throw new StateNotFoundError(key, label ?? backend.name);
      const revision = found.revision;
      if (options.revision !== undefined && revision !== undefined && revision !== options.revision) {
        throw new ConflictError(key, options.revision, revision, backend.name);
      }
      const stream = backend.iterHistory(key, revision === undefined ? {} : { revision })[Symbol.asyncIterator]();
      let first: IteratorResult<Message>;
      try {
        // Started now: a save between the header and the history is a ConflictError before any message.
        first = await stream.next();
      } catch (e) {
        if (!(e instanceof ConflictError) || options.revision !== undefined)
          throw readFailure(e, key, labelOf(backend, label));
        // A session saved faster than a header and a first page can be read in turn: read it whole instead
        // (one saved state, in memory).
        if (attempt >= READ_ATTEMPTS) return whole(backend, key, label);
        continue;
      }
      const view: SessionView = { header: found.header, history: resumed(first, stream), streamed: true, revision };
      if (found.clipped !== undefined && found.clipped.length > 0) view.clipped = found.clipped;
      return view;
    }
  }
  if (options.revision !== undefined && typeof backend.read === "function") {
    const view = await whole(backend, key, label);
    if (view.revision !== options.revision)
      throw new ConflictError(key, options.revision, view.revision ?? null, backend.name);
    return view;
  }
  return whole(backend, key, label);
}

/** The whole stored state, loaded at once (with its revision when the backend keeps revisions). */
async function whole(backend: StateBackend, key: string, label: string | undefined): Promise<SessionView> {
  if (typeof backend.read === "function") {
    const found = await reading(backend, key, label, () => backend.read?.(key));
    if (found === undefined || found === null) throw new StateNotFoundError(key, label ?? backend.name);
    const { history, ...header } = found.state;
    return { header, history: toAsync(history), streamed: false, revision: found.revision };
  }
  const state = await loadRaw(backend, key, label);
  const { history, ...header } = state;
  return { header, history: toAsync(history), streamed: false };
}

/**
 * Opens a session with {@link openSession} and reads it with `read`; when a
 * paged store reports that a save changed the history mid-read
 * (`ConflictError`), the whole read starts again (the 10th time on the session
 * loaded whole). `read` must have no effect outside itself before it finishes
 * (it may run again).
 *
 * @param backend - the backend
 * @param key - the session key
 * @param label - backend label for the not-found message
 * @param read - consumes the session; its result is returned
 * @param options - `clipAt`, passed to {@link openSession}
 * @returns what `read` returned for one saved state
 * @throws what `read` or {@link openSession} throw
 */
export async function readSession<T>(
  backend: StateBackend,
  key: string,
  label: string | undefined,
  read: (session: SessionView) => Promise<T>,
  options: Pick<OpenSessionOptions, "clipAt"> = {},
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    // The last attempt loads the session whole (one saved state, in memory): a paged store written
    // faster than it can be read page by page is still read.
    const session =
      attempt < READ_ATTEMPTS ? await openSession(backend, key, label, options) : await whole(backend, key, label);
    try {
      return await read(session);
    } catch (e) {
      if (e instanceof ConflictError && attempt < READ_ATTEMPTS) continue;
      throw e;
    }
  }
}

/** `first` then the rest of `rest`; a consumer that stops early closes `rest` (its file or connection). */
async function* resumed<T>(first: IteratorResult<T>, rest: AsyncIterator<T>): AsyncGenerator<T> {
  if (first.done) return;
  let done = false;
  try {
    yield first.value;
    for (let r = await rest.next(); !r.done; r = await rest.next()) yield r.value;
    done = true;
  } finally {
    if (!done) await rest.return?.();
  }
}

async function* toAsync<T>(items: Iterable<T>): AsyncGenerator<T> {
  yield* items;
}
