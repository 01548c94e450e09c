/**
 * The PostgreSQL driver: the one place that knows how to reach PostgreSQL,
 * shared by the session backend (`PostgresBackend`), the workflow cold store
 * (`PostgresColdStore`) and the durable journal (`PostgresJournal`).
 *
 * It owns:
 * - **the options**, one vocabulary and one set of defaults for every
 *   PostgreSQL component ({@link PostgresConnectionOptions}): `url` (default
 *   `process.env.DATABASE_URL`, else {@link DEFAULT_POSTGRES_URL}), `schema`
 *   (default {@link DEFAULT_SCHEMA}), `pool` (injected, left open),
 *   `maxConnections`, `connectTimeoutMs`, `statementTimeoutMs`; a bad value is
 *   an {@link InvalidOptionError} from the constructor;
 * - **connections**: `pg` is loaded on first use (importing the package never
 *   loads it); the pool and every client the library checks out have an
 *   `'error'` listener, so a server restart, a failover or
 *   `pg_terminate_backend` fails the call in flight with a typed error and
 *   never crashes the process; a client that failed is discarded, not
 *   returned to the pool;
 * - **errors**: every driver error becomes a {@link BackendError} naming what
 *   was being done and the key, with the driver's error as `cause`;
 * - **migrations** ({@link PostgresMigrations}): each component's tables are
 *   versioned in one ledger per schema, `<schema>.dumplings_migrations
 *   (component, version, name, applied_at)`. A store checks the ledger once
 *   (a plain read, no lock: it never waits on writers) and, only when
 *   something is missing, takes the schema's advisory lock, creates the
 *   schema and the ledger if needed and applies the missing versions in one
 *   transaction. Every component of every process uses the same lock for a
 *   schema, so replicas booting together on an empty database serialise
 *   (after the DBOS "concurrent first boot" failure, case pb-29). A failed
 *   setup is not cached: the next call tries again. A migration is SQL
 *   statements, or an async function run in that transaction under that lock
 *   (moving rows of an earlier layout: a crash midway leaves the schema as
 *   it was).
 *
 * @module
 */
import type pg from "pg";
import { defaultPostgresUrl } from "../core/defaults.js";
import { BackendError, DumplingsError, FormatError, InvalidOptionError } from "../core/errors.js";
import type { OptionKeyList } from "../core/options.js";
import { requirePeer } from "../core/peers.js";
import { parseUrlOption, positiveOption, renamedOption, wholeOption } from "./options.js";
import { type SqlDriver, StoreNotFoundError } from "./sql.js";

/** Default connection URL when neither `url` nor `DATABASE_URL` is set (one for every component: `core/defaults.ts`). */
export { DEFAULT_POSTGRES_URL } from "../core/defaults.js";
/** Default schema of every PostgreSQL component. */
export const DEFAULT_SCHEMA = "dumplings";
/** Name of the migration ledger table in each schema. */
export const MIGRATIONS_TABLE = "dumplings_migrations";

/** Result of a query, as far as the library reads it. */
export interface PgLikeResult {
  rows: Record<string, unknown>[];
  rowCount: number | null;
}

/** A named prepared statement, as `pg` accepts it: planned once per connection, then reused. */
export interface PgNamedQuery {
  name: string;
  text: string;
  values: unknown[];
}

/** A client checked out of a pool: queries run on one connection, then `release()`. */
export interface PgLikeClient {
  query(text: string | PgNamedQuery, values?: unknown[]): Promise<PgLikeResult>;
  /** Returns the client to its pool; pass an error to discard a broken connection. */
  release(err?: Error | boolean): void;
  /** Optional (a `pg.PoolClient` has it): the driver listens for `'error'` while the client is checked out. */
  on?(event: "error", listener: (err: Error) => void): unknown;
  /** Optional: removes the listener at release. */
  removeListener?(event: "error", listener: (err: Error) => void): unknown;
}

/**
 * The minimal structural shape of a PostgreSQL pool the library calls. A
 * `pg.Pool` fits as is (idea after kysely's structural dialect clients).
 *
 * @example
 * import pg from "pg";
 * const backend = new PostgresBackend({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }) });
 */
export interface PgLikePool {
  /** Runs one statement (a text, or a `{ name, text, values }` named prepared statement). */
  query(text: string | PgNamedQuery, values?: unknown[]): Promise<PgLikeResult>;
  connect(): Promise<PgLikeClient>;
  /** Optional: close every connection. Called by `close()` only for a pool the library created itself. */
  end?(): Promise<void>;
  /**
   * Optional (a `pg.Pool` has it): the driver listens for `'error'` of idle
   * clients, and for `'connect'`/`'acquire'` to give every client an `'error'`
   * listener in the same tick it is handed out.
   */
  on?(event: "error", listener: (err: Error) => void): unknown;
  on?(event: "connect" | "acquire", listener: (client: PgLikeClient) => void): unknown;
  /** Optional: the driver removes its listeners at `close()`. */
  removeListener?(event: "error", listener: (err: Error) => void): unknown;
  removeListener?(event: "connect" | "acquire", listener: (client: PgLikeClient) => void): unknown;
}

/**
 * @deprecated The same as {@link PgLikePool}; kept for code written against 0.1.
 */
export type PgPoolLike = PgLikePool;

/**
 * Connection options shared by every PostgreSQL component (`PostgresBackend`,
 * `PostgresColdStore`, `PostgresJournal`). Components add their own options
 * beside these.
 */
export interface PostgresConnectionOptions {
  /** A pool to use; it is left open by `close()`. When absent, a `pg.Pool` is created from `url`. */
  pool?: PgLikePool;
  /** Connection URL of the created pool. @default process.env.DATABASE_URL ?? "postgres://127.0.0.1:5432/postgres" */
  url?: string;
  /** @deprecated Use `url`. */
  connectionString?: string;
  /**
   * Schema holding the tables, created when missing: letters, digits and `_`,
   * at most 63 characters, not starting with a digit.
   * @default "dumplings"
   */
  schema?: string;
  /** Largest number of connections of the created pool. @default 10 */
  maxConnections?: number;
  /** @deprecated Use `maxConnections`. */
  max?: number;
  /** Bound on opening a connection of the created pool, in ms. @default 5000 */
  connectTimeoutMs?: number;
  /** Server-side `statement_timeout` of the created pool's connections, in ms. @default 30000 */
  statementTimeoutMs?: number;
  /**
   * `false`: use an existing store only. When the schema does not hold this
   * component's tables, the first call throws {@link StoreNotFoundError} and
   * nothing is created (the setup transaction is rolled back; tables of an
   * older version are still migrated). For readers that must never create a
   * schema from a mistyped URL (the CLI's read commands).
   * @default true
   */
  create?: boolean;
}

/**
 * The keys of {@link PostgresConnectionOptions}, for each component's option
 * check (`optionKeys<…>({ ...POSTGRES_CONNECTION_KEYS, own: true })`).
 */
export const POSTGRES_CONNECTION_KEYS: OptionKeyList<PostgresConnectionOptions> = {
  pool: true,
  url: true,
  connectionString: true,
  schema: true,
  maxConnections: true,
  max: true,
  connectTimeoutMs: true,
  statementTimeoutMs: true,
  create: true,
};

/** A query runner handed to migrations and transactions (a checked-out client). */
export type PgQuery = (text: string, values?: unknown[]) => Promise<PgLikeResult>;

/**
 * One versioned migration of a component. `{s}` in SQL text stands for the quoted schema.
 *
 * @example
 * const statements: PostgresMigration = { version: 1, name: "notes", up: ["CREATE TABLE {s}.notes (id text PRIMARY KEY)"] };
 * const moved: PostgresMigration = {
 *   version: 2,
 *   name: "notes moved",
 *   up: async (query) => {
 *     for (const row of (await query("SELECT id FROM {s}.old_notes")).rows) {
 *       await query("INSERT INTO {s}.notes (id) VALUES ($1)", [row.id]);
 *     }
 *     await query("DROP TABLE {s}.old_notes");
 *   },
 * };
 */
export interface PostgresMigration {
  /** 1, 2, 3… in order. Never edit a released one: add a new one. */
  version: number;
  /** Short description, stored in the ledger. */
  name: string;
  /**
   * The statements to run, in order, inside the migration transaction; or a function for what
   * SQL alone cannot say (moving an earlier layout's rows): it runs in that same transaction,
   * under the schema's advisory lock, with every statement it sends through `query` (where `{s}`
   * in the text stands for the quoted schema, as in the statements; values go in `$1…`).
   * `schema` is the schema's name, unquoted (for catalog lookups). A rejection rolls back the
   * whole setup (every component's migrations of that open), and the next call tries again.
   */
  up: readonly string[] | ((query: PgQuery, schema: string) => Promise<void>);
}

/** The migrations of one component (`sessions`, `workflow`, `journal`). */
export interface PostgresMigrations {
  /** Component name, the ledger's key. */
  component: string;
  /** Ordered by version, starting at 1. */
  migrations: readonly PostgresMigration[];
  /**
   * Optional: for a schema written before the ledger existed, the version of
   * this component already present (0 when none). Called under the lock when
   * the ledger has no row for the component.
   */
  adopt?(query: PgQuery, schema: string): Promise<number>;
  /**
   * Optional: true when the schema holds this component's tables in a layout written before
   * the ledger, which its migrations upgrade. Called under the lock when the ledger has no row
   * for the first component (the store's own) and the store was opened with `create: false`:
   * such a schema is migrated, not refused (reading an existing store is not creating one).
   */
  present?(query: PgQuery, schema: string): Promise<boolean>;
}

const SCHEMA_RE = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;
/** First key of the two-key advisory lock of a schema's migrations (same key as dumplings-ai 0.1's session store). */
const LOCK_CLASS = 1685417316;
/** SQLSTATEs of "the schema or the ledger does not exist yet". */
const UNDEFINED = new Set(["42P01", "3F000"]);

/** The last connection error of each client the library has seen (set by a listener every client has from its first use). */
const clientErrors = new WeakMap<object, Error>();
const guardedClients = new WeakSet<object>();
/**
 * Gives a client a permanent `'error'` listener, synchronously when the pool
 * creates or hands it out (`'connect'`/`'acquire'` are emitted before the pool
 * removes its own idle listener), so there is no instant at which a
 * connection-level error (a `pg_terminate_backend`, a failover) finds a client
 * with no listener and crashes the process.
 */
function guardClient(client: { on?(event: "error", listener: (err: Error) => void): unknown }): void {
  if (guardedClients.has(client)) return;
  guardedClients.add(client);
  client.on?.("error", (err: Error) => {
    clientErrors.set(client, err);
  });
}

let pgModule: typeof pg | undefined;
/**
 * Loads `pg` on first use, so importing the library never loads it.
 *
 * @throws {MissingPeerError} when pg is not installed (an optional peer dependency)
 */
function loadPg(): typeof pg {
  pgModule ??= requirePeer<typeof pg>("postgres", "pg");
  return pgModule;
}

/**
 * Validates a schema name.
 *
 * @returns the name
 * @throws {InvalidOptionError} when PostgreSQL cannot hold it unquoted-style
 */
export function checkSchemaName(schema: unknown, component = "postgres"): string {
  if (typeof schema !== "string" || !SCHEMA_RE.test(schema)) {
    throw new InvalidOptionError(
      component,
      "schema",
      `${JSON.stringify(schema)} is not acceptable: use letters, digits and _, at most 63 characters, not starting with a digit`,
    );
  }
  return schema;
}

const sqlState = (e: unknown): string | undefined => {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
};

/**
 * A PostgreSQL connection for one component: pool, schema, migrations, typed
 * errors. Components hold one and never talk to `pg` directly.
 *
 * @example
 * const driver = new PostgresDriver("journal", { url: process.env.DATABASE_URL }, JOURNAL_MIGRATIONS);
 * const r = await driver.query("cannot read", "run-1", driver.sql("SELECT * FROM {s}.durable_runs WHERE run_id = $1"), ["run-1"]);
 */
export class PostgresDriver implements SqlDriver {
  /** Name used in errors: `postgres`. */
  readonly name = "postgres";
  /** Rows a write transaction reads to change are locked with `SELECT … FOR UPDATE`. */
  readonly forUpdate = " FOR UPDATE";
  /** The server's clock in epoch ms: `statement_timestamp()` (one value per statement, read when the statement arrives). */
  readonly nowMs = "(extract(epoch from statement_timestamp()) * 1000)::bigint";
  /** The schema holding the component's tables. */
  readonly schema: string;
  /** The schema, quoted for SQL text. */
  readonly quotedSchema: string;
  /** The pool in use (created or injected). */
  readonly pool: PgLikePool;
  private readonly owned: boolean;
  /** The store's own component (the first of {@link sets}). */
  private readonly migrations: PostgresMigrations;
  /** Every component whose tables this driver keeps up to date. */
  private readonly sets: readonly PostgresMigrations[];
  private readying: Promise<void> | undefined;
  /** `create: false`: a schema without the component's tables is a {@link StoreNotFoundError}. */
  private readonly mustExist: boolean;
  private closed = false;
  /** Discards of the clients checked out now (see {@link connectClient}). */
  private readonly checkedOutClients = new Set<() => void>();
  /** The last error an idle pooled connection reported (for diagnostics). */
  lastIdleError: Error | undefined;

  /**
   * @param component - who uses it, for messages (`postgres` in error prefixes either way)
   * @param options - see {@link PostgresConnectionOptions}
   * @param migrations - the component's tables, or several components' (each versioned in the ledger under its
   *   own name, applied in order in one transaction). The first is the store's own: with `create: false` a
   *   schema without its tables is refused; the others are added to a schema that has it.
   * @throws {InvalidOptionError} on a bad schema name, URL, timeout or pool size
   */
  constructor(
    component: string,
    options: PostgresConnectionOptions,
    migrations: PostgresMigrations | readonly PostgresMigrations[],
  ) {
    const o = options ?? {};
    this.schema = checkSchemaName(o.schema ?? DEFAULT_SCHEMA, component);
    this.quotedSchema = `"${this.schema}"`;
    const sets: readonly PostgresMigrations[] = Array.isArray(migrations)
      ? migrations
      : [migrations as PostgresMigrations];
    if (sets.length === 0) throw new InvalidOptionError(component, "migrations", "at least one component is needed");
    this.sets = sets;
    this.migrations = sets[0]!;
    this.mustExist = o.create === false;
    const fromEnv = o.url === undefined && o.connectionString === undefined && process.env.DATABASE_URL !== undefined;
    const url = renamedOption(component, "url", o.url, "connectionString", o.connectionString) ?? defaultPostgresUrl();
    // Checked even beside an injected pool (where they are unused), so a typo is never silently accepted.
    if (!o.pool || o.url !== undefined || o.connectionString !== undefined) {
      parseUrlOption(component, url, ["postgres:", "postgresql:"], fromEnv ? "DATABASE_URL" : undefined);
    }
    if (!o.pool) requireUser(component, url, fromEnv ? "DATABASE_URL" : "url");
    const max = wholeOption(
      component,
      "maxConnections",
      renamedOption(component, "maxConnections", o.maxConnections, "max", o.max),
      10,
    );
    const connectTimeout = positiveOption(component, "connectTimeoutMs", o.connectTimeoutMs, 5000);
    const statementTimeout = positiveOption(component, "statementTimeoutMs", o.statementTimeoutMs, 30_000);
    if (o.pool) {
      this.pool = o.pool;
      this.owned = false;
    } else {
      const { Pool } = loadPg();
      this.pool = new Pool({
        connectionString: url,
        max,
        connectionTimeoutMillis: connectTimeout,
        statement_timeout: statementTimeout,
      }) as unknown as PgLikePool;
      this.owned = true;
    }
    this.pool.on?.("error", this.onIdleError);
    this.pool.on?.("connect", guardClient);
    this.pool.on?.("acquire", guardClient);
  }

  /** An idle connection died (restart, failover, pg_terminate_backend): the pool drops it, the next call reconnects. */
  private readonly onIdleError = (err: Error): void => {
    this.lastIdleError = err;
  };

  /** Replaces `{s}` in SQL text with the quoted schema. */
  sql(text: string): string {
    return text.replaceAll("{s}", this.quotedSchema);
  }

  /** A schema-qualified, quoted table name. */
  table(name: string): string {
    return `${this.quotedSchema}."${name}"`;
  }

  /**
   * Applies the component's missing migrations (see the module comment).
   * Resolves at once after the first success; after a failure the next call tries again.
   *
   * @throws {BackendError} when PostgreSQL fails
   * @throws {FormatError} when the schema holds a newer version than this build knows
   */
  ready(): Promise<void> {
    return this.readyFor(`cannot set up the ${this.migrations.component} tables in schema "${this.schema}"`);
  }

  /** {@link ready}, with a failure reported as the caller's `what` and `key`. */
  async readyFor(what: string, key?: string): Promise<void> {
    if (this.closed) throw this.closedError(what, key);
    if (!this.readying) {
      const p = this.migrate();
      this.readying = p;
      p.catch(() => {
        if (this.readying === p) this.readying = undefined; // not cached: the next call tries again
      });
    }
    try {
      await this.readying;
    } catch (e) {
      // create: false and the database itself does not exist (3D000 invalid_catalog_name): no store to read
      if (this.mustExist && !(e instanceof DumplingsError) && sqlState(e) === "3D000") {
        throw new StoreNotFoundError(this.name, `postgres:${this.schema}`, "no such database");
      }
      throw this.wrap(e, what, key);
    }
  }

  /**
   * Runs one statement on the pool (after {@link ready}).
   *
   * @param what - what is being done, for the error (`cannot load "k"`)
   * @param key - the key involved, if any
   * @param text - SQL text or a named prepared statement
   * @param values - parameters `$1…`
   * @throws {BackendError} wrapping the driver's error
   */
  async query(
    what: string,
    key: string | undefined,
    text: string | PgNamedQuery,
    values?: unknown[],
  ): Promise<PgLikeResult> {
    await this.ready();
    try {
      return await this.pool.query(text, values);
    } catch (e) {
      throw this.wrap(e, what, key);
    }
  }

  /**
   * Runs `fn` in one transaction on a checked-out client (after {@link ready}):
   * `BEGIN` (with `begin`'s options), `fn`, `COMMIT`; on any error `ROLLBACK`
   * and the error is rethrown (a {@link DumplingsError} as is, anything else as
   * a {@link BackendError}). The client listens for `'error'` while checked
   * out, and a client whose connection failed is discarded.
   *
   * @param what - what is being done, for the error
   * @param key - the key involved, if any
   * @param fn - the transaction's body; its `query` throws the driver's raw errors
   * @param begin - e.g. `"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"` @default "BEGIN"
   */
  async transaction<T>(
    what: string,
    key: string | undefined,
    fn: (query: PgQuery) => Promise<T>,
    begin = "BEGIN",
  ): Promise<T> {
    return this.withClient(what, key, async (query) => {
      await query(begin);
      let result: T;
      try {
        result = await fn(query);
      } catch (e) {
        await query("ROLLBACK").catch(() => undefined);
        throw e;
      }
      await query("COMMIT");
      return result;
    });
  }

  /**
   * {@inheritDoc SqlDriver.unsyncedTransaction}
   *
   * `SET LOCAL synchronous_commit = off`, sent with the `BEGIN` (one round
   * trip): the commit returns before its WAL record is flushed, which the WAL
   * writer or the next synced commit does; only a crash of the server (not of
   * this process) may lose it. Other sessions and later transactions keep
   * the server's setting.
   */
  unsyncedTransaction<T>(what: string, key: string | undefined, fn: (query: PgQuery) => Promise<T>): Promise<T> {
    return this.transaction(what, key, fn, "BEGIN; SET LOCAL synchronous_commit = off");
  }

  /**
   * Runs `fn` with one checked-out client (after {@link ready}); see {@link transaction}.
   * The client is released when `fn` settles, discarded when anything failed.
   */
  async withClient<T>(what: string, key: string | undefined, fn: (query: PgQuery) => Promise<T>): Promise<T> {
    await this.readyFor(what, key);
    return this.checkedOut(what, key, fn);
  }

  /**
   * The plan of a query (`EXPLAIN`), one line per plan row.
   * @throws {BackendError}
   */
  async explain(text: string, values?: unknown[]): Promise<string> {
    const r = await this.query("cannot explain a query", undefined, `EXPLAIN ${text}`, values);
    return r.rows.map((row) => String(row["QUERY PLAN"])).join("\n");
  }

  /** Ends the pool the driver created (an injected pool is left open). Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // A client still checked out (an abandoned iterHistory) is discarded, so ending the pool never waits on it.
    for (const discard of [...this.checkedOutClients]) discard();
    this.pool.removeListener?.("error", this.onIdleError);
    this.pool.removeListener?.("connect", guardClient);
    this.pool.removeListener?.("acquire", guardClient);
    if (this.owned) await this.pool.end?.();
  }

  /** Forgets that the migrations ran (after a test dropped the schema). */
  forgetMigrations(): void {
    this.readying = undefined;
  }

  /** Maps any error to the library's: a {@link DumplingsError} as is, else a {@link BackendError}. */
  wrap(e: unknown, what: string, key?: string): DumplingsError {
    if (e instanceof DumplingsError) return e;
    if (this.closed) return this.closedError(what, key, e);
    return new BackendError(this.name, what, { key, cause: e });
  }

  // ---- internals ----

  private closedError(what: string, key?: string, cause?: unknown): BackendError {
    return new BackendError(this.name, `${what}: the store is closed`, { key, cause });
  }

  private async checkedOut<T>(what: string, key: string | undefined, fn: (query: PgQuery) => Promise<T>): Promise<T> {
    const session = await this.connectClient(what, key);
    try {
      return await fn(session.query);
    } catch (e) {
      throw this.wrap(e, what, key);
    } finally {
      session.release();
    }
  }

  /**
   * Checks a client out for a caller that must hold it across `await`s it does
   * not control (a streaming read). The client listens for `'error'` until
   * `release()`; `release()` discards it when its connection failed.
   * Call {@link ready} first.
   *
   * @throws {BackendError} when no connection can be had
   */
  async connectClient(what: string, key?: string): Promise<{ query: PgQuery; release(): void }> {
    if (this.closed) throw this.closedError(what, key);
    let client: PgLikeClient;
    try {
      client = await this.pool.connect();
    } catch (e) {
      throw this.wrap(e, what, key);
    }
    // A pool without 'acquire' events (a custom shape) gets its listener here.
    guardClient(client);
    clientErrors.delete(client);
    let failed: Error | undefined;
    let released = false;
    const broken = () => failed ?? clientErrors.get(client);
    const release = (discard?: Error) => {
      if (released) return;
      released = true;
      this.checkedOutClients.delete(onClose);
      try {
        client.release(discard ?? broken());
      } catch {
        // releasing a client whose connection is gone must not mask the call's own outcome
      }
    };
    const onClose = () => release(new Error("the store was closed while this connection was checked out"));
    this.checkedOutClients.add(onClose);
    return {
      query: async (text, values) => {
        if (this.closed || released) throw this.closedError(what, key);
        const dead = broken();
        if (dead) throw dead;
        try {
          return await client.query(text, values);
        } catch (e) {
          // A failed statement leaves the connection usable after ROLLBACK; a connection-level
          // failure (no SQLSTATE) means the client must not go back to the pool.
          if (sqlState(e) === undefined) failed ??= e instanceof Error ? e : new Error(String(e));
          throw e;
        }
      },
      release: () => release(),
    };
  }

  private async migrate(): Promise<void> {
    const latestOf = (set: PostgresMigrations) =>
      set.migrations.length === 0 ? 0 : set.migrations[set.migrations.length - 1]!.version;
    // Fast path: a plain read of the ledger, no lock, so an open never waits on (or deadlocks with) writers.
    try {
      const r = await this.pool.query(
        this.sql(
          `SELECT component, MAX(version) AS v FROM {s}.${MIGRATIONS_TABLE} WHERE component = ANY($1) GROUP BY component`,
        ),
        [this.sets.map((set) => set.component)],
      );
      const have = new Map(r.rows.map((row) => [String(row.component), Number(row.v ?? 0)]));
      let current = true;
      for (const set of this.sets) {
        const v = have.get(set.component) ?? 0;
        this.checkNotNewer(set.component, v, latestOf(set));
        if (v !== latestOf(set)) current = false;
      }
      if (current) return;
    } catch (e) {
      if (e instanceof DumplingsError || !UNDEFINED.has(sqlState(e) ?? "")) throw e;
    }
    const names = this.sets.map((set) => set.component).join(", ");
    await this.checkedOut(`cannot set up the ${names} tables`, undefined, async (query) => {
      await query("BEGIN");
      try {
        await query("SELECT pg_advisory_xact_lock($1, hashtext($2))", [LOCK_CLASS, `dumplings-ai:${this.schema}`]);
        const ns = await query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [this.schema]);
        if (ns.rows.length === 0) {
          if (this.mustExist) throw new StoreNotFoundError(this.name, `postgres:${this.schema}`, "no such schema");
          await query(this.sql("CREATE SCHEMA {s}"));
        }
        await query(
          this.sql(`CREATE TABLE IF NOT EXISTS {s}.${MIGRATIONS_TABLE} (
            component text NOT NULL,
            version integer NOT NULL,
            name text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (component, version))`),
        );
        for (const [i, set] of this.sets.entries()) {
          const { component, migrations } = set;
          const done = await query(this.sql(`SELECT version FROM {s}.${MIGRATIONS_TABLE} WHERE component = $1`), [
            component,
          ]);
          const applied = new Set(done.rows.map((row) => Number(row.version)));
          this.checkNotNewer(component, Math.max(0, ...applied), latestOf(set));
          let adopted = 0;
          if (applied.size === 0 && set.adopt) adopted = await set.adopt(query, this.schema);
          if (
            i === 0 &&
            this.mustExist &&
            applied.size === 0 &&
            adopted === 0 &&
            (await set.present?.(query, this.schema)) !== true
          ) {
            // Rolled back below with the schema and ledger this transaction may have created.
            throw new StoreNotFoundError(this.name, `postgres:${this.schema}`, `no ${component} tables in this schema`);
          }
          for (const m of migrations) {
            if (applied.has(m.version)) continue;
            if (m.version > adopted) {
              if (typeof m.up === "function") await m.up((text, values) => query(this.sql(text), values), this.schema);
              else for (const statement of m.up) await query(this.sql(statement));
            }
            await query(
              this.sql(`INSERT INTO {s}.${MIGRATIONS_TABLE} (component, version, name) VALUES ($1, $2, $3)`),
              [component, m.version, m.version > adopted ? m.name : `${m.name} (adopted)`],
            );
          }
        }
        await query("COMMIT");
      } catch (e) {
        await query("ROLLBACK").catch(() => undefined);
        throw e;
      }
    });
  }

  private checkNotNewer(component: string, have: number, latest: number): void {
    if (have > latest) {
      throw new FormatError(
        `schema "${this.schema}" holds ${component} tables at version ${have}, newer than this build knows (${latest}); upgrade dumplings-ai`,
        { file: `postgres:${this.schema}`, version: String(have) },
      );
    }
  }
}

/**
 * Refuses, at construction, a URL that names no user when the environment names none either (`PGUSER`,
 * else `USER`, or `USERNAME` on Windows: the pg driver's rule): every connection would fail later with
 * the server's "no PostgreSQL user name specified in startup packet", which names neither the URL nor the
 * fix. Containers often run without `USER`.
 * @throws {InvalidOptionError} naming the URL (without its password) and what to set
 */
function requireUser(component: string, url: string, option: string): void {
  let user = "";
  try {
    user = decodeURIComponent(new URL(url).username);
  } catch {
    return; // parseUrlOption said what is wrong with it
  }
  if (user !== "") return;
  const env = process.env;
  const fromEnv = env.PGUSER || (process.platform === "win32" ? env.USERNAME : env.USER);
  if (fromEnv) return;
  const shown = url.replace(/\/\/[^@/]*@/, "//");
  throw new InvalidOptionError(
    component,
    option,
    `${shown} names no user and neither PGUSER nor USER is set: give a URL with a user (url, or DATABASE_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres) or set PGUSER`,
  );
}
