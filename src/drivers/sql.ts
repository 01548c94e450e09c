/**
 * The contract of a SQL driver as the stores written once for every SQL
 * database see it (the durable journal `SqlJournal`, which the workflow stores
 * run on, and the LangGraph checkpoint storage). Implemented by {@link SqliteDriver} and
 * {@link PostgresDriver}; the dialect differences (placeholders, row locks,
 * plans, DDL) live in the drivers and in each store's per-dialect migrations.
 *
 * SQL text uses PostgreSQL's numbered placeholders (`$1`, `$2`…) on both;
 * the SQLite driver rewrites them. Both are async: SQLite runs synchronously
 * inside, serialised per connection so an awaited transaction body is never
 * interleaved with another call on the same connection.
 *
 * @module
 */
import { BackendError } from "../core/errors.js";

/** Rows of a query (column names as in the table) and the number of rows written. */
export interface SqlResult {
  rows: Record<string, unknown>[];
  /** Rows inserted, updated or deleted (for a `RETURNING` query: rows returned). */
  rowCount: number | null;
}

/** Runs one statement inside a transaction; throws the driver's raw errors. */
export type SqlQuery = (text: string, values?: unknown[]) => Promise<SqlResult>;

/** Runs one statement inside a {@link SqlDriver.syncTransaction}, synchronously; throws the driver's raw errors. */
export type SqlRunSync = (text: string, values?: unknown[]) => SqlResult;

/** What a store written once for every SQL database needs from its driver. */
export interface SqlDriver {
  /** `sqlite` or `postgres`: the store's name in errors. */
  readonly name: "sqlite" | "postgres";
  /** A table name ready for SQL text (schema-qualified and quoted on PostgreSQL). */
  table(name: string): string;
  /** `" FOR UPDATE"` where a transaction must lock a row it reads (PostgreSQL); `""` where the transaction already holds the write lock (SQLite `BEGIN IMMEDIATE`). */
  readonly forUpdate: string;
  /**
   * SQL expression of the database's clock in epoch milliseconds (an
   * integer), one value for the whole statement: PostgreSQL
   * `statement_timestamp()` (the server's clock), SQLite `julianday('now')`
   * (the host's clock as the SQLite library reads it, never the process's
   * `Date.now()`). A store that judges leases or stamps times with it inside
   * its transactions makes every process agree on one clock, whatever the
   * clocks of the machines the processes run on (SQLite files are shared
   * by the processes of one machine only).
   *
   * @example
   * await driver.query("cannot read the clock", undefined, `SELECT ${driver.nowMs} AS now`);
   */
  readonly nowMs: string;
  /** Creates or migrates the tables; retried on the next call after a failure. */
  ready(): Promise<void>;
  /**
   * Runs one statement (after {@link ready}).
   * @throws {BackendError} wrapping the driver's error, with `what` and `key`
   */
  query(what: string, key: string | undefined, text: string, values?: unknown[]): Promise<SqlResult>;
  /**
   * Runs `fn` in one write transaction (after {@link ready}); rolls back on any error.
   * A {@link DumplingsError} thrown by `fn` is rethrown as is; anything else becomes a `BackendError`.
   */
  transaction<T>(what: string, key: string | undefined, fn: (query: SqlQuery) => Promise<T>): Promise<T>;
  /**
   * Optional: {@link transaction} whose commit need not be flushed to disk. It
   * is in the database when the call returns (a crash of this process never
   * loses it), but a crash of the host (power loss, OS crash) may roll it back
   * until the next synced commit on the database, which makes it durable with
   * everything committed before it. SQLite (WAL): the commit is not fsynced,
   * as with `synchronous = NORMAL`. A driver without it: callers use
   * {@link transaction}.
   */
  unsyncedTransaction?<T>(what: string, key: string | undefined, fn: (query: SqlQuery) => Promise<T>): Promise<T>;
  /**
   * Optional: {@link transaction} (or, with `synced: false`,
   * {@link unsyncedTransaction}) for a body that runs its statements
   * synchronously: `fn` gets a `run(text, values)` that returns the
   * statement's result at once, and the transaction begins, runs `fn` and
   * commits with no await in between (SQLite: the file's write lock is held
   * for that one synchronous stretch, and no promise is made per statement).
   * Errors as {@link transaction}. A driver without it: callers use
   * {@link transaction}.
   */
  syncTransaction?<T>(what: string, key: string | undefined, fn: (run: SqlRunSync) => T, synced?: boolean): Promise<T>;
  /** The database's plan for a query, as text (for tests and diagnostics). */
  explain(text: string, values?: unknown[]): Promise<string>;
  /** Releases what the driver opened (never an injected pool or database). */
  close(): Promise<void>;
}

/**
 * A store opened with `create: false` (an option of every SQLite and
 * PostgreSQL component) does not exist: no such file, or no schema, or none of
 * the component's tables in it. Nothing was created or written. Commands that
 * only read (the CLI's `ls`, `runs`, `workflows ls`, …) open stores this way,
 * so a mistyped path or URL is an error rather than a new empty store.
 *
 * @example
 * try { new SqliteJournal({ path: "typo.db", create: false }) }
 * catch (e) { if (e instanceof StoreNotFoundError) console.error(`no journal at ${e.store}`) }
 */
export class StoreNotFoundError extends BackendError {
  /** The store as the caller named it: a file path, or `postgres:<schema>`. */
  readonly store: string;
  /**
   * @param backend - `sqlite` or `postgres`
   * @param store - the file path or `postgres:<schema>`
   * @param what - what is missing, e.g. `no such file`
   */
  constructor(backend: string, store: string, what: string) {
    super(backend, `${store}: ${what} (opened with create: false, so nothing was created)`);
    this.store = store;
  }
}
