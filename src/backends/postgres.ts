/**
 * PostgreSQL backend (`dumplings-ai/postgres`): agent states in PostgreSQL
 * through node-postgres (`pg`) or any injected pool of the small
 * {@link PgLikePool} shape.
 *
 * Tables, in the schema given by the `schema` option (default `dumplings`),
 * created by versioned migrations (`schema_migrations`) that run once, under a
 * transaction-scoped advisory lock, so several processes starting together
 * are safe:
 * - `sessions(session_key text PRIMARY KEY, meta text, config text, state text,
 *   revision bigint, message_count int, saved_at timestamptz)`;
 * - `messages(session_key text REFERENCES sessions ON DELETE CASCADE, seq int,
 *   body text, body_gz bytea, PRIMARY KEY (session_key, seq))`: one row per
 *   history message, `seq` from 0.
 *
 * Encoding (why `text`, not `jsonb`): every stored value is the exact output of
 * `JSON.stringify`. That text never holds a raw U+0000 (JSON writes it as the
 * six characters `\u0000`) nor a lone surrogate (written as `\udXXX`), so
 * PostgreSQL always accepts it, and parsing it gives back the identical
 * strings. `jsonb` would refuse `\u0000` and would reorder object keys, so it
 * is not used. With `compressHistory`, a message whose JSON is at least 1 KiB
 * is stored gzip-compressed in `body_gz` instead of `body` (exactly one of the
 * two is set); a reader decodes both, whatever its own option.
 *
 * Writes: an append (`expectedRevision` matches, exactly `baseLength`
 * messages are stored and the stored last message's digest equals the
 * writer's message at `baseLength - 1`, so an edit at the boundary is
 * detected, not assumed) is ONE statement — a conditional `UPDATE` of the header
 * (the compare-and-set) plus a multi-row `INSERT … SELECT FROM unnest(…)` of
 * the new messages only — so it costs one round trip and O(new messages). Any
 * other write (first save, edited history, `force`, no revision) is one
 * transaction that locks the row, rewrites the messages and the header. Every
 * query is parameterised; the schema name is validated and quoted.
 *
 * @module
 */
import { gunzipSync, gzipSync } from "node:zlib";
import pg from "pg";
import {
  BackendError,
  ConflictError,
  DumplingsError,
  FormatError,
  InvalidStateError,
  StateNotFoundError,
} from "../core/errors.js";
import { assertJson } from "../core/json.js";
import type { Message } from "../core/messages.js";
import { AgentConfigSchema, AgentRuntimeStateSchema, type AgentState, StateMetaSchema } from "../core/state.js";
import { validateKey } from "./keys.js";
import { checkRevision, checkStateShape, jsonText, messageDigest, parseHeaderField, tailDigest } from "./stored.js";
import type { HeaderResult, ReadResult, StateBackend, WriteOptions, WriteResult } from "./types.js";

/** Result of a query, as far as this backend reads it. */
export interface PgLikeResult {
  rows: Record<string, unknown>[];
  rowCount: number | null;
}

/** A client checked out of a pool: queries run on one connection, then `release()`. */
export interface PgLikeClient {
  query(text: string, values?: unknown[]): Promise<PgLikeResult>;
  /** Returns the client to its pool; pass an error to discard a broken connection. */
  release(err?: Error | boolean): void;
}

/**
 * The minimal structural shape of a PostgreSQL pool this backend calls. A
 * `pg.Pool` fits as is (idea after kysely's structural dialect clients).
 *
 * @example
 * import pg from "pg";
 * const backend = new PostgresBackend({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }) });
 */
export interface PgLikePool {
  /**
   * Runs one statement. The append path passes a `{ name, text, values }`
   * config (a named prepared statement, planned once per connection), as
   * `pg.Pool#query` accepts.
   */
  query(text: string | PgNamedQuery, values?: unknown[]): Promise<PgLikeResult>;
  connect(): Promise<PgLikeClient>;
  /** Optional: close every connection. Called by `close()` only for a pool the backend created itself. */
  end?(): Promise<void>;
}

/** A named prepared statement, as `pg` accepts it: planned once per connection, then reused. */
export interface PgNamedQuery {
  name: string;
  text: string;
  values: unknown[];
}

/** Options of {@link PostgresBackend}. */
export interface PostgresBackendOptions {
  /** A pool to use (not closed by `close()`). When absent, a `pg.Pool` is created from `connectionString`. */
  pool?: PgLikePool;
  /** @default process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test" */
  connectionString?: string;
  /** Schema holding the tables; letters, digits, `_`, at most 63 bytes, not starting with a digit. @default "dumplings" */
  schema?: string;
  /** Store messages of at least `compressMinBytes` of JSON gzip-compressed in `body_gz`. Reading handles both. @default false */
  compressHistory?: boolean;
  /** Smallest message JSON, in UTF-16 code units, that `compressHistory` compresses. @default 1024 */
  compressMinBytes?: number;
  /** Server-side `statement_timeout` of the own pool's connections, in ms. @default 30000 */
  statementTimeoutMs?: number;
  /** Bound on opening a connection of the own pool, in ms. @default 5000 */
  connectTimeoutMs?: number;
  /** Largest number of connections of the own pool. @default 10 */
  maxConnections?: number;
}

/** Messages per page of `iterHistory`. */
const PAGE_SIZE = 1000;
/** Valid unquoted-style schema names (they are quoted anyway). */
const SCHEMA_RE = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** Versioned migrations; `{s}` is replaced by the quoted schema name. Never edit a released one: add a new one. */
const MIGRATIONS: readonly { version: number; name: string; sql: string[] }[] = [
  {
    version: 1,
    name: "sessions and messages",
    sql: [
      `CREATE TABLE {s}.sessions (
        session_key text PRIMARY KEY,
        meta text NOT NULL,
        config text NOT NULL,
        state text NOT NULL,
        revision bigint NOT NULL,
        message_count integer NOT NULL,
        last_digest text NOT NULL,
        saved_at timestamptz NOT NULL DEFAULT now()
      )`,
      `CREATE INDEX sessions_saved_at_idx ON {s}.sessions (saved_at)`,
      `CREATE TABLE {s}.messages (
        session_key text NOT NULL REFERENCES {s}.sessions (session_key) ON DELETE CASCADE,
        seq integer NOT NULL,
        body text,
        body_gz bytea,
        PRIMARY KEY (session_key, seq),
        CHECK ((body IS NULL) <> (body_gz IS NULL))
      )`,
    ],
  },
];

/** The latest migration version this build knows. */
export const POSTGRES_SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

interface Encoded {
  bodies: (string | null)[];
  gz: (Buffer | null)[] | undefined;
}

/**
 * PostgreSQL implementation of {@link StateBackend} with revisions, O(new
 * messages) appends, streaming reads and retention (`gc`).
 *
 * @example
 * import { PostgresBackend } from "dumplings-ai/postgres";
 * const backend = new PostgresBackend({ connectionString: "postgres://postgres@127.0.0.1:5432/test" });
 * const { revision } = await backend.write("weather-1", state, { expectedRevision: null });
 * await backend.write("weather-1", next, { expectedRevision: revision, baseLength: state.history.length });
 * await backend.gc({ olderThanMs: 30 * 24 * 3600_000 });
 * await backend.close();
 */
export class PostgresBackend implements StateBackend {
  /** Backend name used in errors and the registry. */
  readonly name = "postgres";
  /** Schema holding the tables. */
  readonly schema: string;
  private readonly pool: PgLikePool;
  private readonly ownPool: pg.Pool | undefined;
  private readonly compress: boolean;
  private readonly compressMinBytes: number;
  private readonly q: string;
  private migrated: Promise<void> | undefined;
  private closed = false;

  /**
   * @param options - see {@link PostgresBackendOptions}
   * @throws {TypeError} when the schema name or a timeout is not acceptable
   */
  constructor(options: PostgresBackendOptions = {}) {
    const schema = options.schema ?? "dumplings";
    if (typeof schema !== "string" || !SCHEMA_RE.test(schema)) {
      throw new TypeError(
        `PostgresBackend schema ${JSON.stringify(schema)} is not acceptable: use letters, digits and _, at most 63, not starting with a digit`,
      );
    }
    this.schema = schema;
    this.q = `"${schema}"`;
    this.compress = options.compressHistory ?? false;
    this.compressMinBytes =
      options.compressMinBytes === undefined ? 1024 : Math.max(0, Math.floor(options.compressMinBytes));
    if (options.pool) {
      this.pool = options.pool;
      this.ownPool = undefined;
    } else {
      const pool = new pg.Pool({
        connectionString:
          options.connectionString ?? process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test",
        statement_timeout: positive(options.statementTimeoutMs, "statementTimeoutMs", 30_000),
        connectionTimeoutMillis: positive(options.connectTimeoutMs, "connectTimeoutMs", 5000),
        max: positive(options.maxConnections, "maxConnections", 10),
      });
      // An idle connection that dies (server restart) must not crash the process; the next query reports it.
      pool.on("error", () => {});
      this.pool = pool;
      this.ownPool = pool;
    }
  }

  private sql(text: string): string {
    return text.replaceAll("{s}", this.q);
  }

  /** Stores the whole state (upsert, full history rewrite). @throws {BackendError} @throws {NonJsonValueError} */
  async save(key: string, state: AgentState): Promise<void> {
    await this.write(key, state);
  }

  /**
   * Loads the state stored under `key`.
   *
   * @throws {StateNotFoundError} when nothing is stored
   * @throws {FormatError} when the stored data is corrupt
   * @throws {BackendError} when PostgreSQL fails
   */
  async load(key: string): Promise<AgentState> {
    const r = await this.read(key);
    if (!r) throw new StateNotFoundError(key, this.name);
    return r.state;
  }

  /** Deletes the session and its messages (one statement, cascading); true when it existed. @throws {BackendError} */
  async delete(key: string): Promise<boolean> {
    validateKey(key);
    const r = await this.call(`cannot delete ${JSON.stringify(key)}`, key, () =>
      this.pool.query(this.sql("DELETE FROM {s}.sessions WHERE session_key = $1"), [key]),
    );
    return (r.rowCount ?? 0) > 0;
  }

  /** Every stored key. @throws {BackendError} */
  async listKeys(): Promise<string[]> {
    const r = await this.call("cannot list keys", undefined, () =>
      this.pool.query(this.sql("SELECT session_key FROM {s}.sessions")),
    );
    return r.rows.map((row) => String(row.session_key));
  }

  /**
   * Revision-aware write (see the module comment).
   *
   * @param key - state key
   * @param state - the whole state; only `history.slice(baseLength)` is sent when appending
   * @param options - `expectedRevision` (number, `null` = must not exist), `baseLength`, `force`
   * @returns `{ revision, written, rewritten }`
   * @throws {ConflictError} when the stored revision differs from `expectedRevision` (nothing written)
   * @throws {TypeError} when `expectedRevision` is neither null nor a non-negative integer
   * @throws {NonJsonValueError} when a value is not JSON (path like `history[3].content`)
   * @throws {BackendError} when PostgreSQL fails
   */
  async write(key: string, state: AgentState, options: WriteOptions = {}): Promise<WriteResult> {
    validateKey(key);
    checkStateShape(state);
    checkRevision(options.expectedRevision);
    const header = [jsonText(state.meta, "meta"), jsonText(state.config, "config"), jsonText(state.state, "state")];
    const history = state.history;
    const force = options.force === true;
    const expected = options.expectedRevision;
    const base = options.baseLength;
    const what = `cannot save ${JSON.stringify(key)}`;

    if (
      !force &&
      typeof expected === "number" &&
      typeof base === "number" &&
      Number.isInteger(base) &&
      base >= 0 &&
      base <= history.length
    ) {
      const enc = this.encode(history, base);
      const r = await this.call(what, key, () =>
        this.pool.query({
          // Named: the append runs after every turn, so PostgreSQL plans it once per connection.
          name: `dumplings_append_${this.schema}`,
          text: this.sql(`WITH upd AS (
              UPDATE {s}.sessions
                 SET meta = $3, config = $4, state = $5, revision = revision + 1, message_count = $6,
                     last_digest = $10, saved_at = now()
               WHERE session_key = $1 AND revision = $2 AND message_count = $7 AND ($7 = 0 OR last_digest = $11)
           RETURNING revision
            ), ins AS (
              INSERT INTO {s}.messages (session_key, seq, body, body_gz)
              SELECT $1, $7 + t.ord - 1, t.body, t.gz
                FROM unnest($8::text[], $9::bytea[]) WITH ORDINALITY AS t(body, gz, ord)
               WHERE EXISTS (SELECT 1 FROM upd)
            )
            SELECT (SELECT revision FROM upd) AS revision`),
          values: [
            key,
            expected,
            ...header,
            history.length,
            base,
            enc.bodies,
            enc.gz ?? null,
            tailDigest(history),
            base > 0 ? messageDigest(history, base - 1) : "",
          ],
        }),
      );
      const revision = r.rows[0]?.revision;
      if (revision !== null && revision !== undefined) {
        return { revision: Number(revision), written: history.length - base, rewritten: false };
      }
      // Not applied: a conflict, or a stored history that is not the `baseLength` prefix (then rewrite all).
      const now = await this.call(what, key, () =>
        this.pool.query(this.sql("SELECT revision FROM {s}.sessions WHERE session_key = $1"), [key]),
      );
      const actual = now.rows[0] ? Number(now.rows[0].revision) : null;
      if (actual !== expected) throw new ConflictError(key, expected, actual, this.name);
    }

    const enc = this.encode(history, 0);
    if (!force && expected === null) {
      const r = await this.call(what, key, () =>
        this.pool.query(
          this.sql(`WITH ins_s AS (
              INSERT INTO {s}.sessions (session_key, meta, config, state, revision, message_count, last_digest, saved_at)
              VALUES ($1, $2, $3, $4, 1, $5, $8, now())
              ON CONFLICT (session_key) DO NOTHING
           RETURNING revision
            ), ins AS (
              INSERT INTO {s}.messages (session_key, seq, body, body_gz)
              SELECT $1, t.ord - 1, t.body, t.gz
                FROM unnest($6::text[], $7::bytea[]) WITH ORDINALITY AS t(body, gz, ord)
               WHERE EXISTS (SELECT 1 FROM ins_s)
            )
            SELECT (SELECT revision FROM ins_s) AS revision`),
          [key, ...header, history.length, enc.bodies, enc.gz ?? null, tailDigest(history)],
        ),
      );
      const revision = r.rows[0]?.revision;
      if (revision === null || revision === undefined) {
        const now = await this.call(what, key, () =>
          this.pool.query(this.sql("SELECT revision FROM {s}.sessions WHERE session_key = $1"), [key]),
        );
        throw new ConflictError(key, null, now.rows[0] ? Number(now.rows[0].revision) : null, this.name);
      }
      return { revision: Number(revision), written: history.length, rewritten: true };
    }

    // Full rewrite, in one transaction.
    return await this.transaction(what, key, async (client) => {
      if (!force && typeof expected === "number") {
        const cur = await client.query(
          this.sql("SELECT revision FROM {s}.sessions WHERE session_key = $1 FOR UPDATE"),
          [key],
        );
        const actual = cur.rows[0] ? Number(cur.rows[0].revision) : null;
        if (actual !== expected) throw new ConflictError(key, expected, actual, this.name);
      }
      // The upsert locks the row first, so the DELETE below sees every committed message of a racing writer.
      const up = await client.query(
        this.sql(`INSERT INTO {s}.sessions (session_key, meta, config, state, revision, message_count, last_digest, saved_at)
                  VALUES ($1, $2, $3, $4, 1, $5, $6, now())
                  ON CONFLICT (session_key) DO UPDATE
                     SET meta = EXCLUDED.meta, config = EXCLUDED.config, state = EXCLUDED.state,
                         revision = {s}.sessions.revision + 1, message_count = EXCLUDED.message_count,
                         last_digest = EXCLUDED.last_digest, saved_at = now()
                  RETURNING revision`),
        [key, ...header, history.length, tailDigest(history)],
      );
      await client.query(this.sql("DELETE FROM {s}.messages WHERE session_key = $1"), [key]);
      if (history.length > 0) {
        await client.query(
          this.sql(`INSERT INTO {s}.messages (session_key, seq, body, body_gz)
                    SELECT $1, t.ord - 1, t.body, t.gz
                      FROM unnest($2::text[], $3::bytea[]) WITH ORDINALITY AS t(body, gz, ord)`),
          [key, enc.bodies, enc.gz ?? null],
        );
      }
      return { revision: Number(up.rows[0]!.revision), written: history.length, rewritten: true };
    });
  }

  /**
   * Loads `key` with its revision, in one statement (one consistent snapshot).
   *
   * @returns `{ state, revision }`, or `undefined` when nothing is stored
   * @throws {FormatError} naming the key when the stored data is corrupt
   * @throws {BackendError} when PostgreSQL fails
   */
  async read(key: string): Promise<ReadResult | undefined> {
    validateKey(key);
    const r = await this.call(`cannot load ${JSON.stringify(key)}`, key, () =>
      this.pool.query(
        this.sql(`SELECT NULL::integer AS seq, revision, message_count, meta, config, state,
                         NULL::text AS body, NULL::bytea AS body_gz
                    FROM {s}.sessions WHERE session_key = $1
                  UNION ALL
                  SELECT seq, NULL, NULL, NULL, NULL, NULL, body, body_gz
                    FROM {s}.messages WHERE session_key = $1
                  ORDER BY seq NULLS FIRST`),
        [key],
      ),
    );
    const rows = r.rows;
    const head = rows[0];
    if (!head || head.seq !== null) {
      if (rows.length > 0) throw this.corrupt(key, "messages are stored without a session row");
      return undefined;
    }
    const count = Number(head.message_count);
    if (rows.length - 1 !== count) {
      throw this.corrupt(key, `${rows.length - 1} messages are stored, the session row says ${count}`);
    }
    const history: Message[] = new Array(count);
    for (let i = 0; i < count; i++) {
      const row = rows[i + 1]!;
      if (row.seq !== i) throw this.corrupt(key, `message seq ${String(row.seq)} found where ${i} was expected`);
      history[i] = this.decodeMessage(key, row, i);
    }
    const label = this.label(key);
    return {
      state: {
        meta: parseHeaderField(key, label, "meta", head.meta, StateMetaSchema),
        config: parseHeaderField(key, label, "config", head.config, AgentConfigSchema),
        state: parseHeaderField(key, label, "state", head.state, AgentRuntimeStateSchema),
        history,
      },
      revision: Number(head.revision),
    };
  }

  /**
   * Reads the header (meta, config, state) and revision of `key` without its
   * history: one single-row query, whatever the history's size.
   *
   * @returns `{ header, revision }` (`header.meta.messageCount` is the stored history's length), or `undefined` when nothing is stored
   * @throws {FormatError} naming the key when the stored header is corrupt
   * @throws {BackendError} when PostgreSQL fails
   */
  async readHeader(key: string): Promise<HeaderResult | undefined> {
    validateKey(key);
    const r = await this.call(`cannot load ${JSON.stringify(key)}`, key, () =>
      this.pool.query(
        this.sql("SELECT revision, message_count, meta, config, state FROM {s}.sessions WHERE session_key = $1"),
        [key],
      ),
    );
    const head = r.rows[0];
    if (!head) return undefined;
    const label = this.label(key);
    const meta = parseHeaderField(key, label, "meta", head.meta, StateMetaSchema);
    return {
      header: {
        meta: { ...meta, messageCount: Number(head.message_count) },
        config: parseHeaderField(key, label, "config", head.config, AgentConfigSchema),
        state: parseHeaderField(key, label, "state", head.state, AgentRuntimeStateSchema),
      },
      revision: Number(head.revision),
    };
  }

  /**
   * Streams the history of `key` in pages of 1000 messages, memory bounded by
   * one page, from one REPEATABLE READ snapshot (writes made meanwhile are not
   * seen). Holds one pooled connection until the iteration ends; end it (or
   * `break`) rather than abandoning it.
   *
   * @throws {StateNotFoundError} when nothing is stored
   * @throws {FormatError} / {BackendError} as `read`
   */
  async *iterHistory(key: string): AsyncIterable<Message> {
    validateKey(key);
    const what = `cannot read the history of ${JSON.stringify(key)}`;
    await this.migrate();
    const client = await this.call(what, key, () => this.pool.connect());
    let failed: Error | undefined;
    try {
      await this.call(what, key, () => client.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"));
      const head = await this.call(what, key, () =>
        client.query(this.sql("SELECT message_count FROM {s}.sessions WHERE session_key = $1"), [key]),
      );
      if (!head.rows[0]) throw new StateNotFoundError(key, this.name);
      const count = Number(head.rows[0].message_count);
      for (let start = 0; start < count; start += PAGE_SIZE) {
        const page = await this.call(what, key, () =>
          client.query(
            this.sql(`SELECT seq, body, body_gz FROM {s}.messages
                       WHERE session_key = $1 AND seq >= $2 AND seq < $3 ORDER BY seq`),
            [key, start, Math.min(start + PAGE_SIZE, count)],
          ),
        );
        const want = Math.min(start + PAGE_SIZE, count) - start;
        if (page.rows.length !== want) throw this.corrupt(key, `messages ${start}.. are missing`);
        for (let i = 0; i < want; i++) {
          const row = page.rows[i]!;
          if (row.seq !== start + i) throw this.corrupt(key, `message seq ${String(row.seq)} out of order`);
          yield this.decodeMessage(key, row, start + i);
        }
      }
    } catch (e) {
      failed = e instanceof Error ? e : new Error(String(e));
      throw e;
    } finally {
      try {
        await client.query("ROLLBACK");
        client.release();
      } catch (e) {
        client.release(failed ?? (e instanceof Error ? e : true));
      }
    }
  }

  /**
   * Retention: deletes every session last saved more than `olderThanMs` ago
   * (server clock), with its messages.
   *
   * @param options - `olderThanMs`: age in ms (≥ 0)
   * @returns `{ deleted }`: number of sessions deleted
   * @throws {TypeError} when `olderThanMs` is not a non-negative finite number
   * @throws {BackendError} when PostgreSQL fails
   * @example
   * await backend.gc({ olderThanMs: 30 * 24 * 3600_000 }); // older than 30 days
   */
  async gc(options: { olderThanMs: number }): Promise<{ deleted: number }> {
    const ms = options?.olderThanMs;
    if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
      throw new TypeError(`gc olderThanMs must be a non-negative number of ms, got ${String(ms)}`);
    }
    const r = await this.call("cannot delete old sessions", undefined, () =>
      this.pool.query(
        this.sql(
          "DELETE FROM {s}.sessions WHERE saved_at < now() - make_interval(secs => $1::double precision / 1000)",
        ),
        [ms],
      ),
    );
    return { deleted: r.rowCount ?? 0 };
  }

  /** Ends the pool the backend created (an injected pool is left open). Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.ownPool) await this.ownPool.end();
  }

  // ---- internals ----

  /**
   * Runs the migrations not yet applied, once per backend instance, under a
   * transaction-scoped advisory lock keyed by the schema name.
   */
  private migrate(): Promise<void> {
    if (!this.migrated) {
      this.migrated = this.runMigrations().catch((e) => {
        this.migrated = undefined; // retry on the next call
        throw e;
      });
    }
    return this.migrated;
  }

  private async runMigrations(): Promise<void> {
    const client = await this.pool.connect();
    try {
      await client.query("BEGIN");
      await client.query("SELECT pg_advisory_xact_lock(1685417316, hashtext($1))", [`dumplings-ai:${this.schema}`]);
      await client.query(this.sql("CREATE SCHEMA IF NOT EXISTS {s}"));
      await client.query(
        this.sql(`CREATE TABLE IF NOT EXISTS {s}.schema_migrations (
                    version integer PRIMARY KEY,
                    name text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                  )`),
      );
      const done = await client.query(this.sql("SELECT version FROM {s}.schema_migrations"));
      const applied = new Set(done.rows.map((row) => Number(row.version)));
      const newest = Math.max(0, ...applied);
      if (newest > POSTGRES_SCHEMA_VERSION) {
        throw new FormatError(
          `schema ${this.schema} is at migration ${newest}, newer than this build knows (${POSTGRES_SCHEMA_VERSION}); upgrade dumplings-ai`,
          { file: `postgres:${this.schema}`, version: String(newest) },
        );
      }
      for (const m of MIGRATIONS) {
        if (applied.has(m.version)) continue;
        for (const statement of m.sql) await client.query(this.sql(statement));
        await client.query(this.sql("INSERT INTO {s}.schema_migrations (version, name) VALUES ($1, $2)"), [
          m.version,
          m.name,
        ]);
      }
      await client.query("COMMIT");
      client.release();
    } catch (e) {
      await client.query("ROLLBACK").catch(() => {});
      client.release(e instanceof Error ? e : true);
      throw e;
    }
  }

  private async transaction<T>(what: string, key: string, fn: (client: PgLikeClient) => Promise<T>): Promise<T> {
    await this.call(what, key, () => this.migrate());
    const client = await this.call(what, key, () => this.pool.connect());
    try {
      await client.query("BEGIN");
      const result = await fn(client);
      await client.query("COMMIT");
      client.release();
      return result;
    } catch (e) {
      let broken: Error | undefined;
      try {
        await client.query("ROLLBACK");
      } catch (r) {
        broken = r instanceof Error ? r : new Error(String(r));
      }
      client.release(broken);
      if (e instanceof DumplingsError) throw e;
      throw new BackendError(this.name, what, { key, cause: e });
    }
  }

  /** Migrates when needed, runs `fn`; driver errors become BackendError. */
  private async call<T>(what: string, key: string | undefined, fn: () => Promise<T>): Promise<T> {
    if (this.closed) throw new BackendError(this.name, `${what}: the backend is closed`, { key });
    try {
      await this.migrate();
      return await fn();
    } catch (e) {
      if (e instanceof DumplingsError) throw e;
      throw new BackendError(this.name, what, { key, cause: e });
    }
  }

  private encode(history: readonly unknown[], from: number): Encoded {
    const bodies: (string | null)[] = [];
    const gz: (Buffer | null)[] | undefined = this.compress ? [] : undefined;
    for (let i = from; i < history.length; i++) {
      const message = history[i];
      assertJson(message, `history[${i}]`, i);
      if (typeof message !== "object" || message === null || Array.isArray(message)) {
        throw new InvalidStateError(`history[${i}]`, "a history message must be a JSON object");
      }
      const json = JSON.stringify(message);
      if (gz && json.length >= this.compressMinBytes) {
        bodies.push(null);
        gz.push(gzipSync(Buffer.from(json, "utf8")));
      } else {
        bodies.push(json);
        gz?.push(null);
      }
    }
    return { bodies, gz };
  }

  private decodeMessage(key: string, row: Record<string, unknown>, index: number): Message {
    let json: unknown = row.body;
    if (json === null || json === undefined) {
      const gz = row.body_gz;
      if (!Buffer.isBuffer(gz)) throw this.corrupt(key, `message ${index} has no body`);
      try {
        json = gunzipSync(gz).toString("utf8");
      } catch (cause) {
        throw this.corrupt(key, `message ${index} is not valid compressed data`, cause);
      }
    }
    if (typeof json !== "string") throw this.corrupt(key, `message ${index} is not text`);
    let value: unknown;
    try {
      value = JSON.parse(json);
    } catch (cause) {
      throw this.corrupt(key, `message ${index} is not valid JSON`, cause);
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      throw this.corrupt(key, `message ${index} is not a JSON object`);
    }
    return value as Message;
  }

  private label(key: string): string {
    return `postgres:${this.schema}.sessions[${JSON.stringify(key)}]`;
  }

  private corrupt(key: string, message: string, cause?: unknown): FormatError {
    return new FormatError(`stored state of ${JSON.stringify(key)} is corrupt: ${message}`, {
      file: this.label(key),
      cause,
    });
  }
}

function positive(value: number | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw new TypeError(`PostgresBackend option ${name} must be a positive number, got ${String(value)}`);
  }
  return Math.ceil(value);
}
