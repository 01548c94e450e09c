/**
 * `SQLiteBackend`: agent states in one SQLite database file (better-sqlite3),
 * safe for many processes at once, with saves that cost O(new messages).
 *
 * The schema, its migrations and the statements are in `sqlite-schema.ts`:
 * a `sessions` row per session, its messages in `messages` keyed by one
 * integer (`(sid << 32) | seq`), config and state in `session_parts`.
 *
 * ## Concurrency and durability
 *
 * One connection per backend instance, reused; `journal_mode = WAL` (readers
 * never block the writer), `busy_timeout` (default 5000 ms), and every write
 * in a `BEGIN IMMEDIATE` transaction, which takes the write lock up front so
 * the busy timeout applies instead of a deferred transaction failing with
 * `SQLITE_BUSY` on lock upgrade (the fault of LangGraph issue #8136). A write
 * still blocked after the timeout is a {@link SQLiteBusyError} (`retryable`),
 * with nothing written. Reads run in a (deferred) transaction so a header and
 * its messages come from one snapshot. A history stream (`iterHistory`) longer
 * than one page reads its pages through a second, read-only connection that
 * holds one read transaction (a WAL snapshot) until the stream ends, so saves
 * of any process meanwhile never change it; the schema is unchanged.
 *
 * Durability: `synchronous = FULL` in WAL (every SQLite component's default):
 * the WAL is fsynced at every commit, so a save that returned survives a
 * power loss or OS crash as well as `kill -9`. `{ synchronous: "NORMAL" }`
 * skips that fsync: still never torn, but the last few commits may be rolled
 * back after a power loss.
 *
 * ## Saves
 *
 * `write(key, state, { expectedRevision, baseLength })` inserts only
 * `history.slice(baseLength)` and updates the header row, in one transaction,
 * after checking the revision in the same transaction (compare-and-set); the
 * config and state parts are written in that transaction too, unless this
 * instance wrote or read exactly that text at the revision found (then they
 * are known to be stored already). It
 * falls back to a full rewrite when the stored history does not match the
 * claim (`baseLength` beyond the stored count, or the boundary message
 * `baseLength - 1` differs from the stored one). `baseLength` is only trusted
 * together with a numeric `expectedRevision` (the prefix is known to be the
 * stored one only at that revision) and without `force`; otherwise the whole
 * history is rewritten. A plain `save` rewrites the whole history.
 *
 * The common save — an append after exactly what this connection last wrote
 * or read, config and state unchanged — is two statements: a header `UPDATE`
 * whose `WHERE` is the compare-and-set (revision, count, parts kept apart) and
 * the message `INSERT`. It leaves `saved_at` alone when this connection set it
 * less than a second before, so one save dirties the message pages and the
 * session row, not also the `saved_at` index.
 *
 * Loads read the header and the message rows in one snapshot and check that
 * exactly `message_count` rows exist (`FormatError` otherwise); with the
 * bodies stored as the messages' JSON text, loading costs about what parsing
 * the same history from a JSONL file costs.
 *
 * `compressHistory: true` stores message bodies of at least
 * `compressMinBytes` (default 1024) bytes gzip-compressed as BLOBs (cold
 * sessions, large tool outputs); reading handles both forms in any mix.
 * Each compressed body costs roughly 0.1–0.7 ms to write and 0.05–0.2 ms to
 * read (zlib per message), which is why short messages stay plain text; on
 * repetitive tool output the stored size drops by 5–10x.
 *
 * @module
 */
import { gunzipSync, gzipSync } from "node:zlib";
import {
  BackendError,
  ConflictError,
  DumplingsError,
  FormatError,
  InvalidOptionError,
  InvalidStateError,
  StateNotFoundError,
} from "../core/errors.js";
import { assertJson, parseStoredJson } from "../core/json.js";
import type { Message, Protocol } from "../core/messages.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { type AgentState, checkFormatVersion, type StateMeta } from "../core/state.js";
import { pathIdentity } from "../drivers/options.js";
import { isBusy, SQLiteBusyError, type SqliteConnectionOptions, SqliteDriver } from "../drivers/sqlite.js";
import type * as BetterSqlite3 from "../drivers/sqlite-types.js";
import { validateKey } from "./keys.js";
import {
  type Body,
  type FirstPage,
  firstPage,
  HEAD_META_SQL,
  type HeadRow,
  ID_SPAN,
  isObject,
  originalRow,
  PAGE_SIZE,
  PAGE_SQL,
  prepare,
  SESSION_MIGRATIONS,
  type SessionRow,
  type Sid,
  SQLITE_SCHEMA_VERSION,
  type Statements,
  splitLegacyHistory,
} from "./sqlite-schema.js";
import {
  abandonedStreams,
  type Reader,
  RewriteWatch,
  release,
  rewriteWatches,
  type StreamHold,
} from "./sqlite-streams.js";
import { ConfigMemo, decodeStoredMessage, messageText, metaJson, runtimeStateJson } from "./stored.js";
import type {
  HeaderReadOptions,
  HeaderResult,
  HistoryReadOptions,
  ReadResult,
  StateBackend,
  WriteOptions,
  WriteResult,
} from "./types.js";
import { checkHeaderReadOptions, checkHistoryReadOptions, checkWriteOptions } from "./write-options.js";

/**
 * Options of {@link SQLiteBackend}: the connection options every SQLite
 * component shares (`path` or an injected `database`, `busyTimeoutMs`,
 * `synchronous`; see {@link SqliteConnectionOptions}) and the session store's own.
 * One of `dbPath`/`path`/`database` is required.
 */
export interface SQLiteBackendOptions extends SqliteConnectionOptions {
  /** Path of the database file (created with its directory when missing), or `":memory:"`: the seed's name for `path`. */
  dbPath?: string;
  /** Store message bodies of at least `compressMinBytes` gzip-compressed. @default false */
  compressHistory?: boolean;
  /** Smallest body (UTF-8 bytes of its JSON) that `compressHistory` compresses. @default 1024 */
  compressMinBytes?: number;
  /** `PRAGMA synchronous`: `FULL` (durable against power loss) or `NORMAL` (against process crashes only). @default "FULL" */
  synchronous?: "NORMAL" | "FULL";
}

export type { SqliteConnectionOptions };

/** The keys of {@link SQLiteBackend.gc}'s options: any other is an `InvalidOptionError`. */
const GC_OPTIONS = optionKeys<{ olderThanMs: number; vacuum?: boolean }>({ olderThanMs: true, vacuum: true });
/** The keys of {@link SQLiteBackendOptions}: any other is an `InvalidOptionError`. */
const SQLITE_OPTIONS = optionKeys<SQLiteBackendOptions>({
  dbPath: true,
  path: true,
  database: true,
  busyTimeoutMs: true,
  synchronous: true,
  create: true,
  compressHistory: true,
  compressMinBytes: true,
});

export { SQLITE_SCHEMA_VERSION, SQLiteBusyError };

/**
 * `saved_at` (the retention clock of `gc`) is kept to within this many ms: an append less than
 * this long after the time this connection stored leaves it, so the row's index is not rewritten
 * at every save.
 */
const SAVED_AT_RESOLUTION_MS = 1000;

/**
 * Checks and serialises the header parts of a state; `configText`, when given, is the
 * already known text of an unchanged config (see `ConfigMemo`), which is then not walked again.
 */
function encodeHeaderParts(state: AgentState, configText?: string): [meta: string, config: string, runtime: string] {
  if (!isObject(state)) throw new InvalidStateError("", "a state must be an object");
  if (!Array.isArray(state.history)) throw new InvalidStateError("history", "history must be an array");
  const parts = [
    ["meta", state.meta],
    ["config", state.config],
    ["state", state.state],
  ] as const;
  return parts.map(([name, value]) => {
    if (!isObject(value)) throw new InvalidStateError(name, `${name} must be an object`);
    if (name === "config" && configText !== undefined) return configText;
    // meta and state: checked and serialised as below, without a walk when they are a session's usual ones
    if (name === "meta") return metaJson(value);
    if (name === "state") return runtimeStateJson(value);
    assertJson(value, name);
    return JSON.stringify(value);
  }) as [string, string, string];
}

/** A database's store identity: its file's real path; an in-memory or temporary database is its own store. */
function sqliteIdentity(db: BetterSqlite3.Database): string | undefined {
  const file = typeof db.name === "string" ? db.name : "";
  if (db.memory || file === "" || file === ":memory:") return undefined;
  return pathIdentity("sqlite", file);
}

/**
 * Stores agent states in an SQLite database (better-sqlite3), WAL mode, one
 * connection per instance. See the module documentation for the schema, the
 * concurrency rules and the durability chosen.
 *
 * @example
 * import { SQLiteBackend } from "dumplings-ai/sqlite";
 * const backend = new SQLiteBackend({ dbPath: "./sessions.db" });
 * const { revision } = await backend.write("demo", state, { expectedRevision: null });
 * state.history.push({ role: "user", content: "next" });
 * await backend.write("demo", state, { expectedRevision: revision, baseLength: state.history.length - 1 });
 * backend.gc({ olderThanMs: 30 * 24 * 3600_000 }); // drop sessions untouched for 30 days
 * backend.close();
 */
export class SQLiteBackend implements StateBackend {
  /** Registry and error-message name. */
  readonly name = "sqlite";
  /** The database path given to the constructor. */
  readonly dbPath: string;
  /** The store's identity: the database file's real path (`undefined` in memory: the instance is the store). */
  readonly storeId: string | undefined;
  readonly #db: BetterSqlite3.Database;
  readonly #driver: SqliteDriver;
  readonly #s: Statements;
  readonly #compress: boolean;
  readonly #compressMinBytes: number;
  readonly #writeTx: BetterSqlite3.Transaction<(args: WriteArgs) => WriteResult>;
  readonly #readTx: BetterSqlite3.Transaction<(key: string) => { row: SessionRow; bodies: Body[] } | undefined>;
  readonly #firstPageTx: BetterSqlite3.Transaction<(key: string) => FirstPage>;
  readonly #pageTx: BetterSqlite3.Transaction<
    (key: string, from: number, to: number) => { head: HeadRow | undefined; rows: [number, Body][] }
  >;
  readonly #deleteTx: BetterSqlite3.Transaction<(key: string) => boolean>;
  readonly #gcTx: BetterSqlite3.Transaction<(cutoff: string) => number>;
  /** Per key: JSON text of the last message at a revision (spares a query per append). Bounded. */
  readonly #tails = new Map<string, { revision: number; count: number; text: string; sid: number; savedAt?: number }>();
  /** The time (ms) in `saved_at` after the last write transaction of this connection. */
  #savedAt: number | undefined;
  /** The `sid` of the session the last write transaction of this connection wrote. */
  #sid: Sid = null;
  /** Per key: the config stored at a revision (an unchanged config is neither serialised nor rewritten). */
  readonly #configs = new ConfigMemo();
  /** Per key: the JSON text of the `state` part stored at a revision (an unchanged one is not rewritten). Bounded. */
  readonly #states = new Map<string, { revision: number; text: string }>();
  /** History streams holding a snapshot connection, closed by `close()`. */
  readonly #streams = new Set<StreamHold>();
  /** A reader no stream uses now, kept (without a transaction) for the next stream, closed by `close()`. */
  #idleReader: Reader | undefined;
  /** A private database's (in memory or temporary) saves that replace messages while a stream reads them. */
  readonly #watch: RewriteWatch | undefined;

  /**
   * Opens (creating or migrating when needed) the database.
   *
   * @param options - `dbPath` (or `path`, or an open `database`); `busyTimeoutMs` (@default 5000); `compressHistory` (@default false);
   *   `compressMinBytes` (@default 1024); `synchronous` (@default "FULL")
   * @throws {BackendError} when the file cannot be opened, WAL cannot be enabled, or the schema is newer than this build
   * @throws {InvalidOptionError} when an option is not acceptable
   */
  constructor(options: SQLiteBackendOptions) {
    checkOptions("sqlite", options, SQLITE_OPTIONS);
    this.#compress = options.compressHistory ?? false;
    this.#compressMinBytes = options.compressMinBytes ?? 1024;
    const path = options.path ?? options.dbPath;
    if (options.path !== undefined && options.dbPath !== undefined && options.path !== options.dbPath) {
      throw new InvalidOptionError("sqlite", "path", "path and its old name dbPath are both given and differ");
    }
    this.#driver = new SqliteDriver("sqlite", { ...options, path }, SESSION_MIGRATIONS, {
      // Only effective on a brand-new (empty) database: lets gc() return freed pages to the OS.
      incrementalVacuum: true,
      // After a checkpoint, a WAL grown past 16 MiB (e.g. by rewriting a huge history) is truncated back.
      pragmas: ["journal_size_limit = 16777216"],
    });
    this.dbPath = this.#driver.path;
    const db = this.#driver.db;
    this.storeId = sqliteIdentity(db);
    this.#db = db;
    this.#s = prepare(db);
    if (db.memory || db.name === "") {
      let watch = rewriteWatches.get(db);
      if (watch === undefined) {
        watch = new RewriteWatch();
        rewriteWatches.set(db, watch);
      }
      this.#watch = watch;
    }
    this.#writeTx = db.transaction((args: WriteArgs) => this.#writeInTx(args));
    this.#readTx = db.transaction((key: string) => {
      const row = originalRow(this.#s.row.get(key), key, this.dbPath);
      if (!row) return undefined;
      return { row, bodies: row.message_count === null ? [] : this.#s.bodies.all(row.sid, row.sid, row.message_count) };
    });
    this.#firstPageTx = db.transaction((key: string) => firstPage(this.#s, key));
    this.#pageTx = db.transaction((key: string, from: number, to: number) => {
      const head = this.#s.head.get(key);
      return { head, rows: head ? this.#s.page.all(head.sid, from, head.sid, to) : [] };
    });
    this.#deleteTx = db.transaction((key: string) => {
      const head = this.#s.head.get(key);
      if (!head) return false;
      this.#watch?.replaced(key);
      this.#s.deleteMessages.run(head.sid, head.sid);
      this.#s.deleteParts.run(key);
      this.#s.deleteSession.run(key);
      this.#s.raiseFloor.run(head.revision);
      return true;
    });
    this.#gcTx = db.transaction((cutoff: string) => {
      const old = this.#s.older.all(cutoff);
      let floor = 0;
      for (const { key, revision, sid } of old) {
        this.#watch?.replaced(key);
        this.#s.deleteMessages.run(sid, sid);
        this.#s.deleteParts.run(key);
        this.#s.deleteSession.run(key);
        floor = Math.max(floor, revision);
      }
      if (floor > 0) this.#s.raiseFloor.run(floor);
      // Parts whose session a process of an older build deleted (it knows only `sessions` and `messages`).
      this.#s.deleteOrphanParts.run();
      return old.length;
    });
  }

  /**
   * Stores the whole state under `key` (upsert; the revision is incremented; the history is rewritten).
   *
   * @param key - state key (validated)
   * @param state - the agent state; only JSON values are accepted
   * @throws {InvalidKeyError} / {NonJsonValueError} / {InvalidStateError} for bad input (nothing written)
   * @throws {SQLiteBusyError} when the write lock was not obtained within `busyTimeoutMs`
   * @throws {BackendError} when the driver fails (`cause` holds its error)
   */
  save(key: string, state: AgentState): void {
    this.#write(key, state, {});
  }

  /**
   * Loads the state under `key`.
   *
   * @param key - state key
   * @returns the state (a fresh object)
   * @throws {StateNotFoundError} when nothing is stored under `key`
   * @throws {FormatError} naming the key when the stored row is corrupt
   * @throws {BackendError} when the driver fails
   */
  load(key: string): AgentState {
    const found = this.#read(key);
    if (!found) throw new StateNotFoundError(key, this.name);
    return found.state;
  }

  /**
   * Deletes `key` (its header and every message row, in one transaction).
   *
   * @param key - state key
   * @returns true when a state was deleted, false when none was stored
   * @throws {BackendError} when the driver fails
   */
  delete(key: string): boolean {
    validateKey(key);
    this.#tails.delete(key);
    this.#configs.forget(key);
    this.#states.delete(key);
    return this.#run(`cannot delete ${JSON.stringify(key)}`, key, () => this.#deleteTx.immediate(key));
  }

  /**
   * Lists stored keys.
   *
   * @returns every key (unordered)
   * @throws {BackendError} when the driver fails
   */
  listKeys(): string[] {
    return this.#run("cannot list keys", undefined, () => this.#s.keys.all());
  }

  /**
   * Revision-aware write with compare-and-set and O(new messages) appends (see {@link WriteOptions}).
   *
   * @param key - state key (validated)
   * @param state - the whole new state
   * @param options - `expectedRevision` (`null`: must not exist), `baseLength` (messages already stored), `force`
   * @returns `{ revision, written, rewritten }`
   * @throws {ConflictError} when the stored revision is not `expectedRevision` — a deleted key included (nothing written)
   * @throws {SQLiteBusyError} / {BackendError} as {@link SQLiteBackend.save}
   */
  async write(key: string, state: AgentState, options: WriteOptions = {}): Promise<WriteResult> {
    checkWriteOptions("sqlite", options);
    // In the file's queue: waits for a journal's or cold store's transaction of this process on the same file.
    return this.#driver.serialize(`cannot save ${JSON.stringify(key)}`, key, () =>
      this.#write(key, state, options, true),
    );
  }

  /**
   * Loads the state under `key` with its revision.
   *
   * @param key - state key
   * @returns `{ state, revision }`, or `undefined` when nothing is stored
   * @throws {FormatError} / {BackendError} as {@link SQLiteBackend.load}
   */
  async read(key: string): Promise<ReadResult | undefined> {
    return this.#driver.serialize(`cannot load ${JSON.stringify(key)}`, key, () => this.#read(key, true));
  }

  /**
   * Reads a session's header (meta, config, state) and revision without its
   * history: with {@link SQLiteBackend.iterHistory}, a reader such as
   * `dumplings show` never holds a big history in memory.
   *
   * @param key - state key
   * @returns `{ header, revision }` (`header.meta.messageCount` is the stored history's length), or `undefined` when nothing is stored
   * @throws {FormatError} when the stored header is corrupt
   * @throws {BackendError} when the driver fails
   */
  async readHeader(key: string, options: HeaderReadOptions = {}): Promise<HeaderResult | undefined> {
    // Every value is returned whole: `clipAt` allows clipping, it does not require it.
    checkHeaderReadOptions(this.name, options);
    validateKey(key);
    const what = `cannot read ${JSON.stringify(key)}`;
    const row = await this.#driver.serialize(what, key, () =>
      this.#run(what, key, () => originalRow(this.#s.row.get(key), key, this.dbPath), true),
    );
    if (!row) return undefined;
    const [meta, config, runtime] = this.#headerParts(key, row);
    const count = row.message_count ?? this.#parseLegacyHistory(key, row.history, (meta as StateMeta).protocol).length;
    const header = { meta: { ...meta, messageCount: count }, config, state: runtime };
    return { header: header as unknown as HeaderResult["header"], revision: row.revision };
  }

  /**
   * Streams the history of `key` in pages of 512 messages: memory stays bounded
   * whatever the history's size. The stream is the history as stored when it
   * started: saves made meanwhile, by this process or another, are not seen.
   * A history of one page is read in one transaction; a longer one from a
   * snapshot, a second read-only connection in a read transaction held until
   * the stream ends (WAL readers never block writers, but the WAL cannot be
   * reset past an open snapshot while other processes keep saving: read the
   * stream to its end, or `break`/`return()` it, rather than leaving it
   * unfinished; an unfinished stream that is garbage-collected, or `close()`,
   * releases its snapshot). The connection is kept, idle, for the next stream.
   *
   * Without a second connection to hold a snapshot on, each page is read
   * anew, and the stream goes on past a save only when it can tell that the
   * save did not replace the history: in a database in memory (or a private
   * temporary one), which only this process writes, a save that appended is
   * not seen, and one that replaced the history (a rewrite, a truncation) or
   * a delete makes the stream throw `ConflictError`; in an injected database
   * not in WAL mode (where a held read would block every writer), any save
   * between pages does. A stream never mixes two histories.
   *
   * @param key - state key
   * @param options - `revision`: the stored revision the stream must be (see {@link HistoryReadOptions})
   * @returns the messages in order
   * @throws {StateNotFoundError} when nothing is stored under `key`
   * @throws {ConflictError} when `options.revision` is not the stored revision as the stream starts, or (only
   *   without a snapshot, see above) the history is replaced or deleted while being iterated
   * @throws {FormatError} when a stored message is corrupt
   * @throws {BackendError} when the driver fails, or the backend is closed before the stream ends (at the
   *   stream's next page: the messages of a page already read still come)
   * @example
   * for await (const message of backend.iterHistory("support-42")) console.log(message.role);
   */
  iterHistory(key: string, options: HistoryReadOptions = {}): AsyncGenerator<Message> {
    const hold: StreamHold = { owner: this.#streams };
    const stream = this.#stream(key, options, hold);
    abandonedStreams.register(stream, hold, hold);
    return stream;
  }

  async *#stream(key: string, options: HistoryReadOptions, hold: StreamHold): AsyncGenerator<Message> {
    try {
      checkHistoryReadOptions(this.name, options);
      validateKey(key);
      const what = `cannot read history of ${JSON.stringify(key)}`;
      // The head and the first page in one read transaction: a history of one page is one snapshot.
      let first = await this.#driver.serialize(what, key, () =>
        this.#run(
          what,
          key,
          () => {
            if (this.#watch !== undefined) {
              const entry = this.#watch.watch(key);
              hold.watch = { log: this.#watch, key, entry, seen: entry.rewrites };
            }
            return this.#firstPageTx(key);
          },
          true,
        ),
      );
      const count = first.head?.message_count;
      if (first.head !== undefined && typeof count === "number" && count > PAGE_SIZE) {
        // The other pages come from a snapshot taken now. Saved meanwhile (nothing returned yet): start from it.
        const snapshot = this.#reader(what, key);
        if (snapshot !== undefined) {
          hold.snapshot = snapshot;
          this.#streams.add(hold);
          const again = this.#run(
            what,
            key,
            () => {
              snapshot.db.exec("BEGIN");
              return snapshot.headMeta.get(key);
            },
            true,
          );
          if (again?.revision !== first.head.revision) {
            first = this.#run(what, key, () => firstPage(snapshot, key), true);
          }
        }
      }
      const head = originalRow(first.head, key, this.dbPath);
      if (!head) throw new StateNotFoundError(key, this.name);
      if (options.revision !== undefined && options.revision !== head.revision) {
        throw new ConflictError(key, options.revision, head.revision, this.name);
      }
      // The messages are checked against the protocol's schema, as a load checks them (the meta row is small).
      const protocol = (this.#headerParts(key, { ...head, config: "{}", state: "{}", history: null })[0] as StateMeta)
        .protocol;
      if (head.message_count === null) {
        const found = await this.#driver.serialize(what, key, () => this.#read(key, true));
        if (!found) throw new StateNotFoundError(key, this.name);
        yield* found.state.history;
        return;
      }
      const total = head.message_count;
      let rows = first.rows;
      for (let from = 0; from < total; from += PAGE_SIZE) {
        const to = Math.min(total, from + PAGE_SIZE);
        if (from > 0) rows = await this.#nextPage(what, key, head, from, to, hold);
        if (rows.length !== to - from) {
          throw new FormatError(`stored history of key ${JSON.stringify(key)} is missing messages ${from}..${to - 1}`, {
            file: this.dbPath,
          });
        }
        for (let i = 0; i < rows.length; i++) {
          const [seq, body] = rows[i] as [number, Body];
          if (seq !== from + i) throw this.#corrupt(key, `message ${from + i} is missing`);
          yield this.#decodeMessage(key, seq, body, protocol);
        }
      }
    } finally {
      release(hold, (reader) => this.#keepReader(reader));
    }
  }

  /** The idle reader, or a new one (undefined when the file cannot hold a snapshot: see `SqliteDriver.openReader`). */
  #reader(what: string, key: string): Reader | undefined {
    const idle = this.#idleReader;
    this.#idleReader = undefined;
    if (idle?.db.open) return idle;
    const db = this.#driver.openReader(what, key);
    if (db === undefined) return undefined;
    try {
      return { db, headMeta: db.prepare(HEAD_META_SQL), page: db.prepare(PAGE_SQL).raw() } as Reader;
    } catch (cause) {
      db.close();
      throw this.#driver.error(cause, what, key);
    }
  }

  /** Keeps the reader of an ended stream for the next one (its transaction ended), unless one is kept already. */
  #keepReader(reader: Reader): boolean {
    if (this.#idleReader !== undefined || !this.#db.open) return false;
    try {
      if (reader.db.inTransaction) reader.db.exec("ROLLBACK");
    } catch {
      return false;
    }
    this.#idleReader = reader;
    return true;
  }

  /**
   * Messages `from` to `to - 1` of the history a stream started on (`head`): from its snapshot, or,
   * without one, read anew, when the session is still at that revision or was only appended to.
   */
  async #nextPage(
    what: string,
    key: string,
    head: HeadRow,
    from: number,
    to: number,
    hold: StreamHold,
  ): Promise<[number, Body][]> {
    const snapshot = hold.snapshot;
    if (snapshot !== undefined) {
      if (!snapshot.db.open) throw new BackendError(this.name, `${what}: the database is closed`, { key });
      return this.#run(what, key, () => snapshot.page.all(head.sid, from, head.sid, to), true);
    }
    const page = await this.#driver.serialize(what, key, () =>
      this.#run(what, key, () => this.#pageTx(key, from, to), true),
    );
    if (page.head?.revision !== head.revision) {
      // Saved meanwhile: go on only past appends, which a private database's watch tells apart.
      const watch = hold.watch;
      if (page.head === undefined || watch === undefined || watch.entry.rewrites !== watch.seen) {
        throw new ConflictError(key, head.revision, page.head?.revision ?? null, this.name);
      }
    }
    return page.rows;
  }

  /**
   * Retention: deletes every session whose last write (`saved_at`) is older than
   * `olderThanMs`, then returns the freed pages to the file system (incremental
   * vacuum, or a full `VACUUM` when asked).
   *
   * @param options - `olderThanMs`: age limit in ms (e.g. 30 days = `2_592_000_000`);
   *   `vacuum`: run a full `VACUUM` (rewrites the file; needs no other connection writing) @default false
   * @returns `{ deleted }`: the number of sessions deleted
   * @throws {BackendError} for a bad `olderThanMs` or when the driver fails
   * @example
   * const { deleted } = backend.gc({ olderThanMs: 30 * 86_400_000 });
   */
  gc(options: { olderThanMs: number; vacuum?: boolean }): { deleted: number } {
    checkOptions("sqlite gc", options, GC_OPTIONS);
    const { olderThanMs, vacuum = false } = options;
    if (typeof olderThanMs !== "number" || !Number.isFinite(olderThanMs) || olderThanMs < 0) {
      throw new BackendError(
        "sqlite",
        `gc: olderThanMs must be a finite number of ms >= 0 (got ${String(olderThanMs)})`,
      );
    }
    const cutoff = new Date(Date.now() - olderThanMs).toISOString();
    this.#tails.clear();
    this.#configs.forget();
    this.#states.clear();
    return this.#run("cannot collect old sessions", undefined, () => {
      const deleted = this.#gcTx.immediate(cutoff);
      if (vacuum) this.#db.exec("VACUUM");
      else this.#db.pragma("incremental_vacuum");
      return { deleted };
    });
  }

  /**
   * Closes the connection and the snapshots of unfinished history streams (idempotent). Later calls,
   * and the next message asked of such a stream, fail with {@link BackendError}.
   */
  close(): void {
    for (const hold of [...this.#streams]) release(hold);
    if (this.#idleReader?.db.open) this.#idleReader.db.close();
    this.#idleReader = undefined;
    this.#driver.closeSync();
  }

  // -------------------------------------------------------------------------

  #run<T>(what: string, key: string | undefined, fn: () => T, queued = false): T {
    // A synchronous call cannot wait for another component's async transaction on this file: refuse at once.
    if (!queued) this.#driver.assertFileFree(what, key);
    try {
      return fn();
    } catch (cause) {
      if (cause instanceof DumplingsError) throw cause;
      if (isBusy(cause))
        throw new SQLiteBusyError("sqlite", `${what} (database busy, nothing written)`, { key, cause });
      throw new BackendError("sqlite", what, { key, cause });
    }
  }

  #corrupt(key: string, what: string, cause?: unknown): FormatError {
    return new FormatError(`stored state of key ${JSON.stringify(key)} is corrupt: ${what}`, {
      file: this.dbPath,
      cause,
    });
  }

  #encodeBody(json: string): Body {
    if (
      this.#compress &&
      json.length * 3 >= this.#compressMinBytes &&
      Buffer.byteLength(json) >= this.#compressMinBytes
    ) {
      return gzipSync(json);
    }
    return json;
  }

  #bodyText(key: string, seq: number, body: Body): string {
    if (typeof body === "string") return body;
    try {
      return gunzipSync(body).toString("utf8");
    } catch (cause) {
      throw this.#corrupt(key, `message ${seq} cannot be decompressed`, cause);
    }
  }

  /** One stored message, checked by the rules a save applies (`decodeStoredMessage`: JSON rule and protocol schema). */
  #decodeMessage(key: string, seq: number, body: Body, protocol: Protocol): Message {
    return decodeStoredMessage(key, this.dbPath, this.#bodyText(key, seq, body), protocol, seq);
  }

  #read(key: string, queued = false): ReadResult | undefined {
    validateKey(key);
    const found = this.#run(`cannot load ${JSON.stringify(key)}`, key, () => this.#readTx(key), queued);
    if (!found) return undefined;
    const { row, bodies } = found;
    const [meta, config, runtime] = this.#headerParts(key, row);
    this.#configs.remember(key, row.revision, config, row.config as string);
    this.#rememberState(key, row.revision, row.state as string);
    const protocol = (meta as StateMeta).protocol;
    let history: Message[];
    if (row.message_count === null) {
      history = this.#parseLegacyHistory(key, row.history, protocol);
    } else {
      if (bodies.length !== row.message_count) {
        throw this.#corrupt(key, `${bodies.length} message rows stored, the header says ${row.message_count}`);
      }
      history = new Array(bodies.length);
      for (let i = 0; i < bodies.length; i++) history[i] = this.#decodeMessage(key, i, bodies[i] as Body, protocol);
      const last = bodies[bodies.length - 1];
      if (typeof last === "string") this.#remember(key, row.sid, row.revision, bodies.length, last);
    }
    return {
      state: { meta, config, state: runtime, history } as unknown as AgentState,
      revision: row.revision,
    };
  }

  /**
   * meta, config and state of a row: JSON objects by the read rule of `core/json.ts`, and a format
   * version this build reads. Their schemas are checked by the persistence layer, which first
   * brings a seed row (e.g. an empty `state`) up to date.
   */
  #headerParts(key: string, row: SessionRow): Record<string, unknown>[] {
    return (["meta", "config", "state"] as const).map((name) => {
      const value = parseStoredJson(row[name], { file: this.dbPath, label: `${name} of key ${JSON.stringify(key)}` });
      if (!isObject(value)) throw this.#corrupt(key, `${name} is not a JSON object`);
      if (name === "meta") checkFormatVersion(value.formatVersion, this.dbPath);
      return value;
    });
  }

  /** A row written by the seed's single-table layout (or a seed process after migration): JSONL in `history`. */
  #parseLegacyHistory(key: string, text: string | null, protocol: Protocol): Message[] {
    if (text === null || text === "") return [];
    return splitLegacyHistory(text).map((line, i) => this.#decodeMessage(key, i, line, protocol));
  }

  #write(key: string, state: AgentState, options: WriteOptions, queued = false): WriteResult {
    validateKey(key);
    const known = isObject(state) ? this.#configs.lookup(key, state.config) : undefined;
    const [meta, config, runtime] = encodeHeaderParts(state, known?.text);
    const configAt = known?.revision;
    const storedState = this.#states.get(key);
    const stateAt = storedState !== undefined && storedState.text === runtime ? storedState.revision : undefined;
    const { expectedRevision, baseLength, force = false } = options;
    if (expectedRevision !== undefined && expectedRevision !== null && !Number.isInteger(expectedRevision)) {
      throw new InvalidStateError(
        "expectedRevision",
        `expectedRevision must be an integer or null (got ${String(expectedRevision)})`,
      );
    }
    const history = state.history;
    if (history.length >= ID_SPAN) {
      throw new InvalidStateError("history", `a history of SQLite holds fewer than ${ID_SPAN} messages`);
    }
    const appendable =
      !force &&
      typeof expectedRevision === "number" &&
      typeof baseLength === "number" &&
      Number.isInteger(baseLength) &&
      baseLength >= 0 &&
      baseLength <= history.length;
    const from = appendable ? (baseLength as number) : 0;
    const bodies = this.#encodeRange(history, from, history.length);
    const result = this.#run(
      `cannot save ${JSON.stringify(key)}`,
      key,
      () =>
        this.#writeTx.immediate({
          key,
          meta,
          config,
          configAt,
          runtime,
          stateAt,
          history,
          from,
          bodies,
          expectedRevision,
          force,
        }),
      queued,
    );
    this.#configs.remember(key, result.revision, state.config, config);
    this.#rememberState(key, result.revision, runtime);
    const last = bodies.length > 0 ? bodies[bodies.length - 1] : undefined;
    const text = typeof last === "string" ? last : undefined;
    this.#remember(key, this.#sid, result.revision, history.length, text, history, this.#savedAt);
    return result;
  }

  #rememberState(key: string, revision: number, text: string): void {
    if (this.#states.size >= 4096 && !this.#states.has(key)) this.#states.clear();
    this.#states.set(key, { revision, text });
  }

  #remember(
    key: string,
    sid: Sid,
    revision: number,
    count: number,
    text: string | undefined,
    history?: readonly Message[],
    savedAt?: number,
  ): void {
    if (count === 0 || sid === null) {
      this.#tails.delete(key);
      return;
    }
    if (this.#tails.size >= 4096 && !this.#tails.has(key)) this.#tails.clear();
    const last = text ?? (history === undefined ? undefined : messageText(history, count - 1));
    if (last === undefined) this.#tails.delete(key);
    else this.#tails.set(key, { revision, count, text: last, sid, savedAt });
  }

  #encodeRange(history: readonly Message[], from: number, to: number): Body[] {
    const out = new Array<Body>(to - from);
    for (let i = from; i < to; i++) {
      const m = history[i];
      if (!isObject(m)) {
        assertJson(m, `history[${i}]`, i);
        throw new InvalidStateError(`history[${i}]`, "a message must be a JSON object");
      }
      out[i - from] = this.#encodeBody(messageText(history, i)); // the caller's text when it lent one
    }
    return out;
  }

  /**
   * The common save in two statements: an append after exactly the messages this connection
   * last wrote or read at `expectedRevision` (boundary text, config and state parts known stored
   * there). The header `UPDATE` is the compare-and-set (its `WHERE` pins the revision, the count
   * and the parts kept apart); it leaves `saved_at` (and its index) alone when this connection set
   * it less than {@link SAVED_AT_RESOLUTION_MS} ago. Undefined when it does not apply or the
   * `UPDATE` matched no row: then {@link SQLiteBackend.#writeInTx} does the general write.
   */
  #appendInTx(a: WriteArgs): WriteResult | undefined {
    const expected = a.expectedRevision;
    if (a.force || typeof expected !== "number" || a.from === 0) return undefined;
    if (a.configAt !== expected || a.stateAt !== expected) return undefined;
    const cached = this.#tails.get(a.key);
    if (cached === undefined || cached.revision !== expected || cached.count !== a.from) return undefined;
    if (cached.text !== messageText(a.history, a.from - 1)) return undefined;
    const s = this.#s;
    const revision = expected + 1;
    const count = a.history.length;
    const now = Date.now();
    const keepTime = cached.savedAt !== undefined && now - cached.savedAt < SAVED_AT_RESOLUTION_MS;
    const sid = cached.sid;
    const changed = keepTime
      ? s.appendHead.run(a.meta, revision, count, a.key, expected, a.from, sid).changes
      : s.appendHeadAt.run(a.meta, new Date(now).toISOString(), revision, count, a.key, expected, a.from, sid).changes;
    if (changed !== 1) return undefined;
    for (let i = 0; i < a.bodies.length; i++) s.insert.run(sid, a.from + i, a.bodies[i] as Body);
    this.#savedAt = keepTime ? cached.savedAt : now;
    this.#sid = sid;
    return { revision, written: a.bodies.length, rewritten: false };
  }

  /** Runs inside `BEGIN IMMEDIATE`: CAS check, then append or rewrite, then the header. */
  #writeInTx(a: WriteArgs): WriteResult {
    const fast = this.#appendInTx(a);
    if (fast !== undefined) return fast;
    const s = this.#s;
    const head = s.writeHead.get(a.key);
    const actual = head ? head.revision : null;
    if (!a.force && a.expectedRevision !== undefined && a.expectedRevision !== actual) {
      throw new ConflictError(a.key, a.expectedRevision, actual, this.name);
    }
    let append =
      a.from > 0 &&
      head !== undefined &&
      head.message_count !== null &&
      head.sid !== null &&
      a.from <= head.message_count;
    // A new session (or a legacy row, which has no message rows) takes the next free number.
    const sid = head?.sid ?? (s.nextSid.get() as number);
    this.#sid = sid;
    if (append && head) {
      // Detect, not assume, that the stored prefix is the writer's: the boundary message must match.
      // The text of the last message this connection wrote or read is cached per key and used only
      // when the revision read in this transaction is still the one it was cached at.
      const cached = this.#tails.get(a.key);
      let stored: string | undefined;
      if (cached && cached.revision === head.revision && cached.count === a.from) stored = cached.text;
      else {
        const body = s.bodyAt.get(sid, a.from - 1);
        stored = body === undefined ? undefined : this.#bodyText(a.key, a.from - 1, body);
      }
      append = stored === messageText(a.history, a.from - 1);
    }
    let written: number;
    if (append && head) {
      if ((head.message_count as number) > a.from) {
        this.#watch?.replaced(a.key);
        s.deleteFrom.run(sid, a.from, sid);
      }
      for (let i = 0; i < a.bodies.length; i++) s.insert.run(sid, a.from + i, a.bodies[i] as Body);
      written = a.bodies.length;
    } else {
      this.#watch?.replaced(a.key);
      s.deleteMessages.run(sid, sid); // a new number's range is empty: one seek
      const all = a.from === 0 ? a.bodies : [...this.#encodeRange(a.history, 0, a.from), ...a.bodies];
      for (let i = 0; i < all.length; i++) s.insert.run(sid, i, all[i] as Body);
      written = all.length;
    }
    const now = Date.now();
    const savedAt = new Date(now).toISOString();
    this.#savedAt = now;
    const count = a.history.length;
    let revision: number;
    // config and state live in `session_parts`, out of the session row that every save rewrites (SQLite
    // rewrites a whole record, overflow pages included, when any column changes). A part is written only
    // when it may differ from the stored one: unless this connection wrote or read exactly this text at
    // the revision just read under the write lock, and the row already keeps that part apart (a row
    // written by an older build holds its parts in its own columns, which then win over `session_parts`).
    if (!(head && head.config_apart === 1 && a.configAt === head.revision)) s.putPart.run(a.key, "config", a.config);
    if (!(head && head.state_apart === 1 && a.stateAt === head.revision)) s.putPart.run(a.key, "state", a.runtime);
    if (head) {
      revision = head.revision + 1;
      s.update.run(a.meta, savedAt, revision, count, sid, a.key);
    } else {
      revision = (s.floor.get() ?? 0) + 1;
      s.insertSession.run(a.key, a.meta, savedAt, revision, count, sid);
    }
    return { revision, written, rewritten: !append };
  }
}

interface WriteArgs {
  key: string;
  meta: string;
  config: string;
  /** The revision at which `config` is known to be stored already, if any. */
  configAt: number | undefined;
  runtime: string;
  /** The revision at which `runtime` (the state part) is known to be stored already, if any. */
  stateAt: number | undefined;
  history: readonly Message[];
  /** Index of the first message in `bodies`. */
  from: number;
  bodies: Body[];
  expectedRevision: number | null | undefined;
  force: boolean;
}
