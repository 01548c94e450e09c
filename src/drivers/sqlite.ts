/**
 * The SQLite driver: the one place that opens SQLite files, shared by the
 * session backend (`SQLiteBackend`), the workflow cold store
 * (`SqliteColdStore`) and the durable journal (`SqliteJournal`).
 *
 * It owns:
 * - **the options**, one vocabulary for every SQLite component
 *   ({@link SqliteConnectionOptions}): `path` (its directory is created when
 *   missing) or an injected `database` (left open by `close()`),
 *   `busyTimeoutMs`, `synchronous` (one default each for every component:
 *   `SQLITE_BUSY_TIMEOUT_MS`, `SQLITE_SYNCHRONOUS` of `core/defaults.ts`); a
 *   bad value is an {@link InvalidOptionError};
 * - **opening**: better-sqlite3 is loaded on first use (importing the package
 *   never loads the native addon); WAL journal (readers never block the
 *   writer), `busy_timeout`, `synchronous`, `auto_vacuum = INCREMENTAL` on a
 *   new file when the component asks for it;
 * - **errors**: a write lock not obtained within `busyTimeoutMs` is a
 *   {@link SQLiteBusyError} (retryable); any other driver error a
 *   {@link BackendError} naming the file, what was being done and the key;
 * - **migrations** ({@link SqliteMigrations}): one ledger per file,
 *   `dumplings_migrations(component, version, name, applied_at)`, checked with
 *   a plain read and, when something is missing, completed in one
 *   `BEGIN IMMEDIATE` transaction (the file's write lock serialises processes
 *   opening the same file at once);
 * - **the async SQL contract** ({@link SqlDriver}) that the stores written
 *   once for SQLite and PostgreSQL use: `$1…` placeholders, and calls on one
 *   connection serialised so that an awaited transaction body never
 *   interleaves with another call.
 *
 * @module
 */
import { existsSync, mkdirSync, realpathSync } from "node:fs";
import path from "node:path";
import { existingDefaultFile, SQLITE_BUSY_TIMEOUT_MS, SQLITE_SYNCHRONOUS } from "../core/defaults.js";
import { BackendError, DumplingsError, FormatError, InvalidOptionError } from "../core/errors.js";
import { requirePeer } from "../core/peers.js";
import { type SqlDriver, type SqlQuery, type SqlResult, type SqlRunSync, StoreNotFoundError } from "./sql.js";
import type * as BetterSqlite3 from "./sqlite-types.js";

/** Name of the migration ledger table in each file. */
export const SQLITE_MIGRATIONS_TABLE = "dumplings_migrations";

/**
 * A write could not take the database's write lock within `busyTimeoutMs`
 * (another connection held it). Nothing was written; retrying is safe.
 */
export class SQLiteBusyError extends BackendError {
  /** Always true: the operation may be retried as is. */
  readonly retryable = true;
}

/** Connection options shared by every SQLite component. Components add their own beside these. */
export interface SqliteConnectionOptions {
  /** Path of the database file (created with its directory when missing), or `":memory:"`. Ignored when `database` is given. */
  path?: string;
  /** An open better-sqlite3 database to use instead of `path`; left open by `close()`. */
  database?: BetterSqlite3.Database;
  /** How long a write waits for another connection's write lock, in ms. @default 5000 */
  busyTimeoutMs?: number;
  /**
   * `PRAGMA synchronous` of the connection: `FULL` (fsync at every commit: a
   * commit survives a power loss) or `NORMAL` (a commit survives a process
   * crash; the last commits may roll back after a power loss).
   * @default "FULL"
   */
  synchronous?: "NORMAL" | "FULL";
  /**
   * `false`: open an existing store only. The file must exist (neither it nor
   * its directory is created) and hold this component's tables (a file from
   * an older version is still migrated); otherwise the constructor throws
   * {@link StoreNotFoundError} and nothing is written. For readers that must
   * never create a store from a mistyped path (the CLI's read commands).
   * @default true
   */
  create?: boolean;
}

/** One versioned migration: SQL statements, or a function for what SQL alone cannot say (moving a legacy layout). */
export interface SqliteMigration {
  /** 1, 2, 3… in order. Never edit a released one: add a new one. */
  version: number;
  /** Short description, stored in the ledger. */
  name: string;
  /** Statements run in order, or a function run inside the migration transaction. */
  up: readonly string[] | ((db: BetterSqlite3.Database) => void);
}

/** The migrations of one component. */
export interface SqliteMigrations {
  /** Component name, the ledger's key (e.g. `sessions`, `workflow`, `journal`). */
  component: string;
  /** Ordered by version, starting at 1. */
  migrations: readonly SqliteMigration[];
  /**
   * Optional: for a file written before the ledger existed, the version of
   * this component already present (0 when none). Called inside the migration
   * transaction when the ledger has no row for the component.
   */
  adopt?(db: BetterSqlite3.Database): number;
  /**
   * Optional: true when the file holds this component's tables in a layout
   * written before the ledger (the original design's), which the migrations
   * upgrade: such a file is migrated, not refused, when opened with
   * `create: false` (reading an existing store is not creating one).
   */
  present?(db: BetterSqlite3.Database): boolean;
}

/** How a component opens its file (beyond the user's options). */
export interface SqliteOpenSettings {
  /** Path used when the user gives neither `path` nor `database`. */
  defaultPath?: string;
  /** Set `auto_vacuum = INCREMENTAL` (effective on a new file only). @default false */
  incrementalVacuum?: boolean;
  /** Extra pragmas run after opening, e.g. `journal_size_limit = 16777216`. */
  pragmas?: readonly string[];
}

/** Tail of the call queue of each database file open in this process, shared by every driver on that file. */
const fileQueues = new Map<string, Promise<unknown>>();
/** Async transactions open now on each file in this process (they hold its write lock across awaits). */
const openTransactions = new Map<string, number>();

/** The key of a database file for the per-file queue: its real path, so a file reached through a symlink is one file. */
function fileKey(db: BetterSqlite3.Database): string | undefined {
  if (db.memory || db.name === "") return undefined;
  try {
    return realpathSync(db.name);
  } catch {
    return path.resolve(db.name);
  }
}

let driverModule: BetterSqlite3.DatabaseConstructor | undefined;
/**
 * Loads better-sqlite3 on first use, so importing the library never loads the native addon.
 *
 * @throws {MissingPeerError} when better-sqlite3 is not installed (an optional peer dependency)
 */
export function loadBetterSqlite3(): BetterSqlite3.DatabaseConstructor {
  driverModule ??= requirePeer<BetterSqlite3.DatabaseConstructor>("sqlite", "better-sqlite3");
  return driverModule;
}

/** Whether an error is SQLite's "database is locked/busy". */
export function isBusy(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" && (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED"));
}

interface Compiled {
  stmt: BetterSqlite3.Statement;
  /** For each `?`, the 0-based index of the value it takes. */
  order: number[];
}

/**
 * An open SQLite file for one component: pragmas, migrations, typed errors,
 * and the async {@link SqlDriver} contract.
 *
 * @example
 * const driver = new SqliteDriver("journal", { path: "runs.db" }, JOURNAL_MIGRATIONS);
 * const r = await driver.query("cannot read", "run-1", "SELECT * FROM durable_runs WHERE run_id = $1", ["run-1"]);
 */
export class SqliteDriver implements SqlDriver {
  /** Name used in errors: `sqlite`. */
  readonly name = "sqlite";
  /** `BEGIN IMMEDIATE` already holds the file's write lock: no row locks needed. */
  readonly forUpdate = "";
  /** The host's clock in epoch ms as SQLite reads it (`julianday('now')`: one value per statement, ms resolution). */
  readonly nowMs = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";
  /** The open database (for the components' synchronous fast paths). */
  readonly db: BetterSqlite3.Database;
  /** The file path, `":memory:"`, or `"(injected)"`. */
  readonly path: string;
  private readonly owned: boolean;
  /** `busy_timeout` of the connection, in ms (also given to {@link openReader}'s connections). */
  private readonly busyTimeoutMs: number;
  private readonly statements = new Map<string, Compiled>();
  /** The file's queue key (real path), undefined in memory. */
  private file: string | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  /** Calls of this driver queued and not settled yet. */
  private queuedLocal = 0;
  private closed = false;
  private walMode: boolean | undefined;
  private pragmas: { read: BetterSqlite3.Statement; normal: BetterSqlite3.Statement } | undefined;
  /** The prepared statements of {@link syncTransaction}, made on first use. */
  private txStatements:
    | { begin: BetterSqlite3.Statement; commit: BetterSqlite3.Statement; rollback: BetterSqlite3.Statement }
    | undefined;

  /**
   * Opens the file (creating its directory) and applies the component's missing migrations.
   *
   * @param component - who uses it, for messages
   * @param options - see {@link SqliteConnectionOptions}
   * @param migrations - the component's tables, or several components' (each versioned in the ledger under its
   *   own name, applied in order). The first is the store's own: with `create: false` a file without its tables
   *   is refused; the others are added to a file that has it.
   * @param settings - the component's default path and vacuum
   * @throws {InvalidOptionError} on a bad option
   * @throws {BackendError} when the file cannot be opened or migrated
   * @throws {FormatError} when the file holds a newer version of the component's tables than this build knows
   */
  constructor(
    component: string,
    options: SqliteConnectionOptions,
    migrations: SqliteMigrations | readonly SqliteMigrations[],
    settings: SqliteOpenSettings = {},
  ) {
    const o = options ?? {};
    const sets: readonly SqliteMigrations[] = Array.isArray(migrations) ? migrations : [migrations as SqliteMigrations];
    const [primary] = sets;
    if (primary === undefined)
      throw new InvalidOptionError(component, "migrations", "at least one component is needed");
    const busyTimeoutMs = o.busyTimeoutMs ?? SQLITE_BUSY_TIMEOUT_MS;
    if (typeof busyTimeoutMs !== "number" || !Number.isInteger(busyTimeoutMs) || busyTimeoutMs < 0) {
      throw new InvalidOptionError(
        component,
        "busyTimeoutMs",
        `must be a non-negative integer of ms, got ${String(busyTimeoutMs)}`,
      );
    }
    const synchronous = o.synchronous ?? SQLITE_SYNCHRONOUS;
    if (synchronous !== "NORMAL" && synchronous !== "FULL") {
      throw new InvalidOptionError(component, "synchronous", `must be "NORMAL" or "FULL", got ${String(synchronous)}`);
    }
    this.busyTimeoutMs = busyTimeoutMs;
    if (o.database) {
      this.db = o.database;
      this.owned = false;
      this.path = "(injected)";
      try {
        this.db.pragma(`busy_timeout = ${busyTimeoutMs}`);
        this.file = fileKey(this.db);
        for (const [i, set] of sets.entries()) this.runMigrations(set, i === 0 && o.create === false);
      } catch (cause) {
        throw cause instanceof DumplingsError ? cause : this.error(cause, `cannot open the ${component} tables`);
      }
      return;
    }
    const given = o.path ?? settings.defaultPath;
    if (typeof given !== "string" || given === "") {
      throw new InvalidOptionError(
        component,
        "path",
        `must be a file path or ":memory:", got ${JSON.stringify(given)}`,
      );
    }
    // Defaulted (no path given): a default file of an earlier release (`.dumplings-durable.db`) is still found
    // when the new one is absent. A path given is opened as given, the new default's name included.
    const file = o.path === undefined ? existingDefaultFile(given) : given;
    this.path = file;
    this.owned = true;
    const inMemory = file === ":memory:";
    const create = o.create !== false;
    if (!create && !inMemory && !existsSync(file)) throw new StoreNotFoundError(this.name, file, "no such file");
    let db: BetterSqlite3.Database | undefined;
    try {
      const Database = loadBetterSqlite3(); // first: a missing driver creates no directory
      if (!inMemory && create) mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
      // Reading never writes: look at an existing file read-only before anything below changes it
      // (WAL mode is persistent, and an empty file would get a database header).
      if (!create && !inMemory) this.probe(Database, file, primary);
      db = new Database(file, { timeout: busyTimeoutMs, fileMustExist: !create && !inMemory });
      db.pragma(`busy_timeout = ${busyTimeoutMs}`);
      // Only on a brand-new file: on an existing one the pragma changes nothing but needs the write lock,
      // so an open would wait on (and time out behind) another process's writer.
      if (create && settings.incrementalVacuum && Number(db.pragma("page_count", { simple: true })) === 0) {
        db.pragma("auto_vacuum = INCREMENTAL");
      }
      db.pragma(`synchronous = ${synchronous}`);
      const mode = db.pragma("journal_mode = WAL", { simple: true });
      if (!inMemory && String(mode).toLowerCase() !== "wal") {
        throw new Error(`journal_mode is ${String(mode)}, WAL could not be enabled`);
      }
      for (const p of settings.pragmas ?? []) db.pragma(p);
      this.db = db;
      this.file = fileKey(db);
      for (const [i, set] of sets.entries()) this.runMigrations(set, i === 0 && !create);
    } catch (cause) {
      db?.close();
      if (cause instanceof DumplingsError) throw cause;
      throw this.error(cause, `cannot open database ${JSON.stringify(file)}`);
    }
  }

  /** A table name ready for SQL text. */
  table(name: string): string {
    return `"${name}"`;
  }

  /** Resolves at once: the constructor migrated. Rejects after `close()`. */
  async ready(): Promise<void> {
    if (this.closed) throw new BackendError(this.name, `the database ${JSON.stringify(this.path)} is closed`);
  }

  /** {@inheritDoc SqlDriver.query} */
  query(what: string, key: string | undefined, text: string, values?: unknown[]): Promise<SqlResult> {
    return this.exclusive(what, key, () => this.run(text, values));
  }

  /** {@inheritDoc SqlDriver.transaction} (`BEGIN IMMEDIATE`: the write lock is taken up front, so `busy_timeout` applies) */
  transaction<T>(what: string, key: string | undefined, fn: (query: SqlQuery) => Promise<T>): Promise<T> {
    return this.exclusive(what, key, () => this.immediate(fn));
  }

  /**
   * {@inheritDoc SqlDriver.unsyncedTransaction}
   *
   * `PRAGMA synchronous = NORMAL` for this transaction only (the connection's
   * setting, `FULL` or other, is restored after it): in WAL mode the commit
   * writes its frames to the WAL without an fsync, so it survives a crash of
   * the process; the next `FULL` commit's fsync of the WAL covers them too.
   * Outside WAL mode (an injected database) it is {@link transaction}.
   */
  unsyncedTransaction<T>(what: string, key: string | undefined, fn: (query: SqlQuery) => Promise<T>): Promise<T> {
    return this.exclusive(what, key, async () => {
      const before = this.relax();
      if (before === undefined) return this.immediate(fn);
      try {
        return await this.immediate(fn);
      } finally {
        this.restore(before);
      }
    });
  }

  /**
   * {@inheritDoc SqlDriver.syncTransaction}
   *
   * `BEGIN IMMEDIATE`, `fn`, `COMMIT` as prepared statements, in this file's
   * queue ({@link serialize}: at once when nothing of this process is queued
   * on the file). With `synced: false`, unsynced as {@link unsyncedTransaction}.
   */
  syncTransaction<T>(what: string, key: string | undefined, fn: (run: SqlRunSync) => T, synced = true): Promise<T> {
    return this.serialize(what, key, () => {
      const before = synced ? undefined : this.relax();
      try {
        this.txStatements ??= {
          begin: this.db.prepare("BEGIN IMMEDIATE"),
          commit: this.db.prepare("COMMIT"),
          rollback: this.db.prepare("ROLLBACK"),
        };
        const tx = this.txStatements;
        tx.begin.run();
        try {
          const result = fn(this.runSync);
          tx.commit.run();
          return result;
        } catch (e) {
          if (this.db.inTransaction) tx.rollback.run();
          throw e;
        }
      } finally {
        if (before !== undefined) this.restore(before);
      }
    });
  }

  /** The statement runner of {@link syncTransaction}. */
  private readonly runSync: SqlRunSync = (text, values) => this.run(text, values);

  /**
   * `synchronous = NORMAL` for the next transaction when the connection is in WAL mode and syncs more than
   * that: returns the level to {@link restore} after it, or undefined when nothing was changed.
   */
  private relax(): number | undefined {
    const relax = this.relaxer();
    if (!relax) return undefined;
    const before = Number(relax.read.get());
    if (before <= 1) return undefined;
    relax.normal.run();
    return before;
  }

  /** Puts back the connection's `synchronous` level changed by {@link relax}. */
  private restore(level: number): void {
    if (this.db.open) this.compile(`PRAGMA synchronous = ${level}`).stmt.run();
  }

  /**
   * The prepared pragmas of {@link unsyncedTransaction} (a pragma call prepares a statement each time),
   * or undefined when the connection is not in WAL mode (asked once: the mode is the file's and stays).
   */
  private relaxer(): { read: BetterSqlite3.Statement; normal: BetterSqlite3.Statement } | undefined {
    if (!this.inWal()) return undefined;
    this.pragmas ??= {
      read: this.db.prepare("PRAGMA synchronous").pluck(),
      normal: this.db.prepare("PRAGMA synchronous = NORMAL"),
    };
    return this.pragmas;
  }

  /** Whether the connection is in WAL mode (asked once: the mode is the file's and stays). */
  private inWal(): boolean {
    this.walMode ??= String(this.db.pragma("journal_mode", { simple: true })).toLowerCase() === "wal";
    return this.walMode;
  }

  /** `BEGIN IMMEDIATE`, the body, `COMMIT` (`ROLLBACK` on any error), counted in {@link openTransactions}. */
  private async immediate<T>(fn: (query: SqlQuery) => Promise<T>): Promise<T> {
    this.db.exec("BEGIN IMMEDIATE");
    const file = this.file;
    if (file !== undefined) openTransactions.set(file, (openTransactions.get(file) ?? 0) + 1);
    try {
      const result = await fn(async (text, values) => this.run(text, values));
      this.db.exec("COMMIT");
      return result;
    } catch (e) {
      if (this.db.inTransaction) this.db.exec("ROLLBACK");
      throw e;
    } finally {
      if (file !== undefined) {
        const n = (openTransactions.get(file) ?? 1) - 1;
        if (n > 0) openTransactions.set(file, n);
        else openTransactions.delete(file);
      }
    }
  }

  /**
   * Runs a synchronous body in this file's queue (after every call queued
   * before it by any driver of this process on this file), for components
   * whose work is synchronous (the session backend's async methods).
   *
   * @throws what `fn` throws, mapped as {@link error} does
   */
  serialize<T>(what: string, key: string | undefined, fn: () => T): Promise<T> {
    if (!this.idle()) return this.exclusive(what, key, fn);
    // Nothing queued on this file: run now (a synchronous body cannot interleave), sparing the
    // queue's promises on the session backend's every save.
    if (this.closed || !this.db.open) {
      return Promise.reject(new BackendError(this.name, `${what}: the database is closed`, { key }));
    }
    try {
      return Promise.resolve(fn());
    } catch (e) {
      return Promise.reject(this.error(e, what, key));
    }
  }

  /**
   * For a synchronous caller that cannot wait: throws a {@link SQLiteBusyError}
   * at once when an async transaction of this process holds the file (on this
   * connection or another), where SQLite's busy handler would block the whole
   * thread until `busyTimeoutMs` and fail anyway — or, on a shared connection,
   * the write would silently join (and roll back with) the other transaction.
   *
   * @throws {SQLiteBusyError}
   */
  assertFileFree(what: string, key?: string): void {
    const file = this.file;
    if (this.db.inTransaction || (file !== undefined && (openTransactions.get(file) ?? 0) > 0)) {
      throw new SQLiteBusyError(
        this.name,
        `${what}: another component of this process holds ${JSON.stringify(this.path)} in a transaction; use the async method (write/read), which waits for it`,
        { key },
      );
    }
  }

  /** The plan of a query (`EXPLAIN QUERY PLAN`), one line per step. */
  explain(text: string, values?: unknown[]): Promise<string> {
    return this.exclusive("cannot explain a query", undefined, () => {
      const { stmt, order } = this.compile(`EXPLAIN QUERY PLAN ${text}`);
      const rows = stmt.all(...order.map((i) => bind(values?.[i]))) as { detail: string }[];
      return rows.map((r) => r.detail).join("\n");
    });
  }

  /**
   * Opens a second connection to the file, read-only, for a read transaction
   * held across awaits: after `BEGIN`, everything read through it (from its
   * first read on) is one snapshot of the database, whatever other
   * connections, of this process or another, commit meanwhile. In WAL mode a
   * reader never blocks a writer, but a checkpoint cannot reset the WAL past
   * a snapshot still open (the WAL grows with every commit meanwhile): end
   * the transaction as soon as the reading ends.
   *
   * @param what - what the caller is doing, for the error's message
   * @param key - the key being read, for the error
   * @returns the connection (the caller closes it), or `undefined` when it
   *   could not hold such a snapshot: a database in memory or a private
   *   temporary one (no second connection sees it), or a file not in WAL mode
   *   (an injected database; there a reader's lock would block every writer
   *   until it ends)
   * @throws {BackendError} when the database is closed or the file cannot be opened
   */
  openReader(what: string, key?: string): BetterSqlite3.Database | undefined {
    if (this.closed || !this.db.open) throw new BackendError(this.name, `${what}: the database is closed`, { key });
    if (this.file === undefined || !this.inWal()) return undefined;
    try {
      return new (loadBetterSqlite3())(this.file, { readonly: true, fileMustExist: true, timeout: this.busyTimeoutMs });
    } catch (cause) {
      throw this.error(cause, `${what}: cannot open a read connection to ${JSON.stringify(this.path)}`, key);
    }
  }

  /** Closes the file when the driver opened it (an injected database is left open). Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.queue.catch(() => undefined);
    if (this.owned && this.db.open) this.db.close();
  }

  /**
   * Closes at once, for components whose calls are all synchronous (the
   * session backend): a call still queued on the async contract fails.
   */
  closeSync(): void {
    this.closed = true;
    if (this.owned && this.db.open) this.db.close();
  }

  /** Maps any error to the library's: a {@link DumplingsError} as is, busy as {@link SQLiteBusyError}, else {@link BackendError}. */
  error(e: unknown, what: string, key?: string): DumplingsError {
    if (e instanceof DumplingsError) return e;
    if (isBusy(e)) {
      return new SQLiteBusyError(this.name, `${what}: the database is locked by another connection (retry)`, {
        key,
        cause: e,
      });
    }
    return new BackendError(this.name, what, { key, cause: e });
  }

  // ---- internals ----

  /**
   * Runs `fn` after every call queued before it on this file by any driver of
   * this process (one queue per file, not per driver): a transaction's body
   * awaits between statements while it holds the file's write lock, and a
   * second connection of the same process asking for the lock meanwhile would
   * wait in SQLite's busy handler, which blocks the thread, so the holder
   * could never finish (a self-deadlock ending in `SQLiteBusyError`).
   */
  /** Whether no call of any driver of this process is queued on this file (on this connection, in memory). */
  private idle(): boolean {
    return this.file === undefined ? this.queuedLocal === 0 : !fileQueues.has(this.file);
  }

  private exclusive<T>(what: string, key: string | undefined, fn: () => T | Promise<T>): Promise<T> {
    const file = this.file;
    this.queuedLocal++;
    const before = file === undefined ? this.queue : (fileQueues.get(file) ?? Promise.resolve());
    const next = before.then(async () => {
      if (this.closed || !this.db.open) throw new BackendError(this.name, `${what}: the database is closed`, { key });
      try {
        return await fn();
      } catch (e) {
        throw this.error(e, what, key);
      }
    });
    const tail = next
      .catch(() => undefined)
      .then(() => {
        this.queuedLocal--;
      });
    this.queue = tail;
    if (file !== undefined) {
      fileQueues.set(file, tail);
      void tail.then(() => {
        if (fileQueues.get(file) === tail) fileQueues.delete(file);
      });
    }
    return next;
  }

  private run(text: string, values?: unknown[]): SqlResult {
    const { stmt, order } = this.compile(text);
    if (!stmt.reader && order.length === 0 && /^\s*PRAGMA\b/i.test(text)) {
      // A pragma without result columns (incremental_vacuum) does its work one step at a time:
      // exec runs it to the end, where a prepared statement's run() would step once.
      this.db.exec(text);
      return { rows: [], rowCount: 0 };
    }
    const args = order.map((i) => bind(values?.[i]));
    if (stmt.reader) {
      const rows = stmt.all(...args) as Record<string, unknown>[];
      return { rows, rowCount: rows.length };
    }
    return { rows: [], rowCount: stmt.run(...args).changes };
  }

  private compile(text: string): Compiled {
    let c = this.statements.get(text);
    if (!c) {
      const order: number[] = [];
      const sql = text.replace(/\$(\d+)/g, (_, n: string) => {
        order.push(Number(n) - 1);
        return "?";
      });
      c = { stmt: this.db.prepare(sql), order };
      if (this.statements.size > 500) this.statements.clear();
      this.statements.set(text, c);
    }
    return c;
  }

  /**
   * With `create: false`: opens the file read-only and refuses it, changing
   * nothing, unless it holds this component's tables (its ledger rows, tables
   * of an older layout `adopt` recognises, or what `present` accepts).
   *
   * @throws {StoreNotFoundError} when it holds none (an empty file included)
   * @throws {FormatError} when the file is not a SQLite database
   */
  private probe(Database: BetterSqlite3.DatabaseConstructor, file: string, set: SqliteMigrations): void {
    let probe: BetterSqlite3.Database | undefined;
    try {
      probe = new Database(file, { readonly: true, fileMustExist: true });
      const tables = probe.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[];
      if (tables.some((t) => t.name === SQLITE_MIGRATIONS_TABLE)) {
        const row = probe
          .prepare(`SELECT COUNT(*) AS n FROM ${SQLITE_MIGRATIONS_TABLE} WHERE component = ?`)
          .get(set.component) as { n: number };
        if (row.n > 0) return;
      }
      let found = false;
      try {
        found = set.present?.(probe) === true || (set.adopt ? set.adopt(probe) > 0 : false);
      } catch {
        found = tables.length > 0; // a check that needs to write: let the migration decide
      }
      if (!found) {
        throw new StoreNotFoundError(
          this.name,
          file,
          tables.length === 0 ? "an empty file" : `no ${set.component} tables in this file`,
        );
      }
    } catch (cause) {
      if (cause instanceof DumplingsError) throw cause;
      if ((cause as { code?: unknown }).code === "SQLITE_NOTADB") {
        throw new FormatError(`${JSON.stringify(file)} is not a SQLite database`, { file, cause });
      }
      throw cause;
    } finally {
      probe?.close();
    }
  }

  /** Applies the missing migrations; with `mustExist`, a file without the component's tables is refused (rolled back). */
  private runMigrations(set: SqliteMigrations, mustExist = false): void {
    const db = this.db;
    const latest = set.migrations.length === 0 ? 0 : set.migrations[set.migrations.length - 1]!.version;
    const have = (): number | undefined => {
      const exists = db
        .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?")
        .get(SQLITE_MIGRATIONS_TABLE);
      if (!exists) return undefined;
      const row = db
        .prepare(`SELECT COALESCE(MAX(version), 0) AS v FROM ${SQLITE_MIGRATIONS_TABLE} WHERE component = ?`)
        .get(set.component) as { v: number };
      return row.v;
    };
    const check = (v: number) => {
      if (v > latest) {
        throw new FormatError(
          `database ${JSON.stringify(this.path)} holds ${set.component} tables at version ${v}, newer than this build knows (${latest}); upgrade dumplings-ai`,
          { file: this.path, version: String(v) },
        );
      }
    };
    const fast = have();
    if (fast !== undefined) {
      check(fast);
      if (fast === latest) return;
    }
    db.transaction(() => {
      db.exec(`CREATE TABLE IF NOT EXISTS ${SQLITE_MIGRATIONS_TABLE} (
        component TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,
        applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        PRIMARY KEY (component, version)) WITHOUT ROWID`);
      const applied = new Set(
        (
          db.prepare(`SELECT version FROM ${SQLITE_MIGRATIONS_TABLE} WHERE component = ?`).all(set.component) as {
            version: number;
          }[]
        ).map((r) => r.version),
      );
      check(Math.max(0, ...applied));
      const adopted = applied.size === 0 && set.adopt ? set.adopt(db) : 0;
      if (mustExist && applied.size === 0 && adopted === 0 && set.present?.(db) !== true) {
        // Thrown inside the transaction: the ledger created above (and whatever adopt looked at) is rolled back.
        throw new StoreNotFoundError(this.name, this.path, `no ${set.component} tables in this file`);
      }
      const record = db.prepare(`INSERT INTO ${SQLITE_MIGRATIONS_TABLE} (component, version, name) VALUES (?, ?, ?)`);
      for (const m of set.migrations) {
        if (applied.has(m.version)) continue;
        if (m.version > adopted) {
          if (typeof m.up === "function") m.up(db);
          else for (const statement of m.up) db.exec(statement);
        }
        record.run(set.component, m.version, m.version > adopted ? m.name : `${m.name} (adopted)`);
      }
    }).immediate();
  }
}

/** better-sqlite3 binds neither `undefined` nor booleans: map them to what the SQL stores mean. */
function bind(v: unknown): unknown {
  if (v === undefined) return null;
  if (typeof v === "boolean") return v ? 1 : 0;
  return v;
}

/**
 * The statements that rebuild table `name` (SQLite) with `columns` as an ordinary rowid table: a copy
 * with the rows, the old table dropped (its indexes with it: create them again after), the copy
 * renamed. Run between `PRAGMA legacy_alter_table = ON` and `OFF`, so that a view naming the table is
 * neither rewritten nor checked while the table is missing. For a table first created `WITHOUT ROWID`
 * whose rows can be large: in such a table a row lives in its key's b-tree, and SQLite reads a row that
 * overflows its page whole at each key comparison of a seek (https://sqlite.org/withoutrowid.html §4).
 *
 * @param table - quotes a table name (`(n) => \`"${n}"\``)
 * @param name - the table's name
 * @param columns - its column and key definitions, as in `CREATE TABLE name (columns)`
 * @param names - its column names, comma-separated (copied as they are)
 * @returns the statements, in order
 */
export function rebuildAsRowid(
  table: (name: string) => string,
  name: string,
  columns: string,
  names: string,
): string[] {
  const copy = table(`${name}_rowid`);
  return [
    `DROP TABLE IF EXISTS ${copy}`,
    `CREATE TABLE ${copy} (${columns})`,
    `INSERT INTO ${copy} (${names}) SELECT ${names} FROM ${table(name)}`,
    `DROP TABLE ${table(name)}`,
    `ALTER TABLE ${copy} RENAME TO ${table(name)}`,
  ];
}
