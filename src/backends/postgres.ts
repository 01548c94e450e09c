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
 *   history message, `seq` from 0;
 * - `revision_floor(revision bigint)`, one row: the highest revision of a
 *   deleted session (`delete`, `gc`). A new session starts above it, so a
 *   writer still holding a revision of a deleted session conflicts with the
 *   session created under the same key afterwards instead of overwriting it
 *   (the ABA problem of compare-and-set; migration 2).
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
 * the new messages only — so it costs one round trip and O(new messages). It
 * sends the config and the state only when they differ from the text this
 * instance last wrote or read at that revision, and keeps `saved_at` to within
 * a second (an append less than a second after the last time stored leaves
 * it), so the header update changes no indexed column and stays a HOT update
 * (no new index entries per save). Any
 * other write (first save, edited history, `force`, no revision) is one
 * transaction that locks the row, rewrites the messages and the header. Every
 * query is parameterised; the schema name is validated and quoted.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { gunzipSync, gzipSync } from "node:zlib";
import { ConflictError, FormatError, InvalidStateError, StateNotFoundError } from "../core/errors.js";
import { assertJson } from "../core/json.js";
import type { Message, Protocol } from "../core/messages.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { AgentConfigSchema, AgentRuntimeStateSchema, type AgentState, StateMetaSchema } from "../core/state.js";
import { instanceIdentity, urlIdentity } from "../drivers/options.js";
import {
  DEFAULT_POSTGRES_URL,
  type PgLikeClient,
  type PgLikePool,
  type PgLikeResult,
  type PgNamedQuery,
  type PgQuery,
  POSTGRES_CONNECTION_KEYS,
  type PostgresConnectionOptions,
  PostgresDriver,
  type PostgresMigrations,
} from "../drivers/postgres.js";
import { validateKey } from "./keys.js";
import {
  ConfigMemo,
  checkRevision,
  checkStateShape,
  decodeStoredMessage,
  jsonText,
  messageDigest,
  messageText,
  PartMemo,
  parseHeaderField,
  tailDigest,
} from "./stored.js";
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

export type { PgLikeClient, PgLikePool, PgLikeResult, PgNamedQuery, PostgresConnectionOptions };

/**
 * Options of {@link PostgresBackend}: the connection options every PostgreSQL
 * component shares (`url`, `pool`, `schema`, `maxConnections`,
 * `connectTimeoutMs`, `statementTimeoutMs`; see {@link PostgresConnectionOptions})
 * and the session store's own.
 */
export interface PostgresBackendOptions extends PostgresConnectionOptions {
  /** Store messages of at least `compressMinBytes` of JSON gzip-compressed in `body_gz`. Reading handles both. @default false */
  compressHistory?: boolean;
  /** Smallest message JSON, in UTF-16 code units, that `compressHistory` compresses. @default 1024 */
  compressMinBytes?: number;
}

/** Messages per page of `iterHistory`. */
const PAGE_SIZE = 1000;

/**
 * The session tables' migrations (component `sessions` in the schema's ledger).
 * A schema written by dumplings-ai 0.1 recorded version 1 in its own
 * `schema_migrations` table: it is adopted, not re-created.
 */
const MIGRATIONS: PostgresMigrations = {
  component: "sessions",
  async adopt(query: PgQuery, schema: string): Promise<number> {
    const legacy = `"${schema}".schema_migrations`;
    const present = await query("SELECT to_regclass($1) IS NOT NULL AS present", [legacy]);
    if (!present.rows[0]?.present) return 0;
    const r = await query(`SELECT COALESCE(MAX(version), 0) AS v FROM ${legacy}`);
    return Number(r.rows[0]?.v ?? 0);
  },
  migrations: [
    {
      version: 1,
      name: "sessions and messages",
      up: [
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
    {
      version: 2,
      name: "revision floor",
      up: [
        `CREATE TABLE IF NOT EXISTS {s}.revision_floor (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        revision bigint NOT NULL
      )`,
        `INSERT INTO {s}.revision_floor (one, revision) VALUES (true, 0) ON CONFLICT (one) DO NOTHING`,
      ],
    },
  ],
};

/**
 * The revision of a new session: one above every revision a deleted session of the schema had. Read
 * under a share lock: a delete raising the floor at that instant (uncommitted) is waited for and its
 * floor seen (READ COMMITTED reads the newest version of a row it locks), instead of the floor as the
 * statement began, which let a key deleted and created at once restart at a stale writer's revision.
 */
const NEW_REVISION = "(SELECT revision + 1 FROM {s}.revision_floor FOR SHARE)";

/**
 * Deletes the sessions `WHERE` selects (their messages cascade) and raises the revision floor to
 * the highest revision deleted, in one statement; `$n` parameters as the `WHERE` has them.
 */
function deleteRaisingFloor(where: string): string {
  return `WITH d AS (DELETE FROM {s}.sessions WHERE ${where} RETURNING revision),
               f AS (UPDATE {s}.revision_floor SET revision = GREATEST(revision, (SELECT max(revision) FROM d))
                      WHERE EXISTS (SELECT 1 FROM d))
          SELECT count(*)::int AS n FROM d`;
}

/** The latest version of the session tables this build knows. */
export const POSTGRES_SCHEMA_VERSION = MIGRATIONS.migrations[MIGRATIONS.migrations.length - 1]!.version;

interface Encoded {
  bodies: (string | null)[];
  gz: (Buffer | null)[] | undefined;
}

/** The keys of {@link PostgresBackend.gc}'s options: any other is an `InvalidOptionError`. */
const GC_OPTIONS = optionKeys<{ olderThanMs: number }>({ olderThanMs: true });
/** The keys of {@link PostgresBackendOptions}: any other is an `InvalidOptionError`. */
const POSTGRES_OPTIONS = optionKeys<PostgresBackendOptions>({
  ...POSTGRES_CONNECTION_KEYS,
  compressHistory: true,
  compressMinBytes: true,
});

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
  /** The store's identity: database (URL without password, or the injected pool) and schema. */
  readonly storeId: string;
  /** Per key: the config stored at a revision (an unchanged config is neither serialised nor sent). */
  private readonly configs = new ConfigMemo();
  /** Per key: the `state` part's text stored at a revision (an unchanged one is not sent by an append). */
  private readonly states = new PartMemo();
  private readonly driver: PostgresDriver;
  /** Name of the prepared append, per schema: a hash keeps it within PostgreSQL's 63-byte identifiers whatever the schema's length. */
  private readonly appendStatement: string;
  private readonly compress: boolean;
  private readonly compressMinBytes: number;

  /**
   * @param options - see {@link PostgresBackendOptions}
   * @throws {InvalidOptionError} when the schema name, URL, a timeout or the pool size is not acceptable
   */
  constructor(options: PostgresBackendOptions = {}) {
    checkOptions("postgres", options, POSTGRES_OPTIONS);
    this.driver = new PostgresDriver("postgres", options, MIGRATIONS);
    this.schema = this.driver.schema;
    this.storeId = options.pool
      ? `${instanceIdentity("postgres", options.pool)}#${JSON.stringify(this.schema)}`
      : urlIdentity(
          "postgres",
          options.url ?? options.connectionString ?? process.env.DATABASE_URL ?? DEFAULT_POSTGRES_URL,
          5432,
          this.schema,
        );
    this.appendStatement = `dumplings_append_${createHash("sha1").update(this.schema).digest("hex").slice(0, 16)}`;
    this.compress = options.compressHistory ?? false;
    this.compressMinBytes =
      options.compressMinBytes === undefined ? 1024 : Math.max(0, Math.floor(options.compressMinBytes));
  }

  private sql(text: string): string {
    return this.driver.sql(text);
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

  /**
   * Deletes the session and its messages (one statement, cascading, raising the revision floor to
   * its revision); true when it existed. @throws {BackendError}
   */
  async delete(key: string): Promise<boolean> {
    validateKey(key);
    this.configs.forget(key);
    this.states.forget(key);
    const r = await this.call(`cannot delete ${JSON.stringify(key)}`, key, () =>
      this.pool.query(this.sql(deleteRaisingFloor("session_key = $1")), [key]),
    );
    return Number(r.rows[0]?.n ?? 0) > 0;
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
    checkWriteOptions("postgres", options);
    validateKey(key);
    checkStateShape(state);
    checkRevision(options.expectedRevision);
    // An unchanged config (ConfigMemo) is not serialised again, nor sent by an append at its revision.
    const known = this.configs.lookup(key, state.config);
    const header = [
      jsonText(state.meta, "meta"),
      known?.text ?? jsonText(state.config, "config"),
      jsonText(state.state, "state"),
    ] as const;
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
          name: this.appendStatement,
          text: this.sql(`WITH upd AS (
              UPDATE {s}.sessions
                 SET meta = $3, config = COALESCE($4, config), state = COALESCE($5, state), revision = revision + 1,
                     message_count = $6, last_digest = $10,
                     saved_at = CASE WHEN saved_at > now() - interval '1 second' THEN saved_at ELSE now() END
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
            header[0],
            known?.revision === expected ? null : header[1], // the row matches only at `expected`
            this.states.lookup(key, header[2]) === expected ? null : header[2],
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
        this.configs.remember(key, Number(revision), state.config, header[1]);
        this.states.remember(key, Number(revision), header[2]);
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
              VALUES ($1, $2, $3, $4, ${NEW_REVISION}, $5, $8, now())
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
      this.configs.remember(key, Number(revision), state.config, header[1]);
      this.states.remember(key, Number(revision), header[2]);
      return { revision: Number(revision), written: history.length, rewritten: true };
    }

    // Full rewrite, in one transaction.
    const full = await this.driver.transaction(what, key, async (query) => {
      if (!force && typeof expected === "number") {
        const cur = await query(this.sql("SELECT revision FROM {s}.sessions WHERE session_key = $1 FOR UPDATE"), [key]);
        const actual = cur.rows[0] ? Number(cur.rows[0].revision) : null;
        if (actual !== expected) throw new ConflictError(key, expected, actual, this.name);
      }
      // The upsert locks the row first, so the DELETE below sees every committed message of a racing writer.
      const up = await query(
        this.sql(`INSERT INTO {s}.sessions (session_key, meta, config, state, revision, message_count, last_digest, saved_at)
                  VALUES ($1, $2, $3, $4, ${NEW_REVISION}, $5, $6, now())
                  ON CONFLICT (session_key) DO UPDATE
                     SET meta = EXCLUDED.meta, config = EXCLUDED.config, state = EXCLUDED.state,
                         revision = {s}.sessions.revision + 1, message_count = EXCLUDED.message_count,
                         last_digest = EXCLUDED.last_digest, saved_at = now()
                  RETURNING revision`),
        [key, ...header, history.length, tailDigest(history)],
      );
      await query(this.sql("DELETE FROM {s}.messages WHERE session_key = $1"), [key]);
      if (history.length > 0) {
        await query(
          this.sql(`INSERT INTO {s}.messages (session_key, seq, body, body_gz)
                    SELECT $1, t.ord - 1, t.body, t.gz
                      FROM unnest($2::text[], $3::bytea[]) WITH ORDINALITY AS t(body, gz, ord)`),
          [key, enc.bodies, enc.gz ?? null],
        );
      }
      return { revision: Number(up.rows[0]!.revision), written: history.length, rewritten: true };
    });
    this.configs.remember(key, full.revision, state.config, header[1]);
    this.states.remember(key, full.revision, header[2]);
    return full;
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
    // No ORDER BY: each message goes to its place by its seq here. Sorting 10,000 rows of text made the
    // server spill to disk (or plan a parallel sort) and cost more than reading them; without it
    // PostgreSQL streams the rows as it finds them (an index or sequential scan, whichever it prefers).
    const r = await this.call(`cannot load ${JSON.stringify(key)}`, key, () =>
      this.pool.query(
        this.sql(`SELECT NULL::integer AS seq, revision, message_count, meta, config, state,
                         NULL::text AS body, NULL::bytea AS body_gz
                    FROM {s}.sessions WHERE session_key = $1
                  UNION ALL
                  SELECT seq, NULL, NULL, NULL, NULL, NULL, body, body_gz
                    FROM {s}.messages WHERE session_key = $1`),
        [key],
      ),
    );
    const rows = r.rows;
    // The session row (seq NULL): first as a rule (the first branch of the UNION), found wherever it is.
    let at = 0;
    while (at < rows.length && rows[at]!.seq !== null) at++;
    const head = rows[at];
    if (!head) {
      if (rows.length > 0) throw this.corrupt(key, "messages are stored without a session row");
      return undefined;
    }
    const count = Number(head.message_count);
    if (rows.length - 1 !== count) {
      throw this.corrupt(key, `${rows.length - 1} messages are stored, the session row says ${count}`);
    }
    const label = this.label(key);
    const meta = parseHeaderField(key, label, "meta", head.meta, StateMetaSchema);
    const config = parseHeaderField(key, label, "config", head.config, AgentConfigSchema);
    const state = parseHeaderField(key, label, "state", head.state, AgentRuntimeStateSchema);
    this.configs.remember(key, Number(head.revision), config, String(head.config));
    this.states.remember(key, Number(head.revision), String(head.state));
    const history: Message[] = new Array(count);
    for (let i = 0; i < rows.length; i++) {
      if (i === at) continue;
      const row = rows[i]!;
      const seq = row.seq as number;
      // count rows, each at a distinct seq in 0..count-1 (the primary key): every place filled once
      if (!Number.isInteger(seq) || seq < 0 || seq >= count || history[seq] !== undefined) {
        throw this.corrupt(
          key,
          `message seq ${String(seq)} is ${history[seq] !== undefined ? "stored twice" : `outside 0..${count - 1}`}`,
        );
      }
      history[seq] = this.decodeMessage(key, row, seq, meta.protocol, label);
    }
    return { state: { meta, config, state, history }, revision: Number(head.revision) };
  }

  /**
   * Reads the header (meta, config, state) and revision of `key` without its
   * history: one single-row query, whatever the history's size.
   *
   * @returns `{ header, revision }` (`header.meta.messageCount` is the stored history's length), or `undefined` when nothing is stored
   * @throws {FormatError} naming the key when the stored header is corrupt
   * @throws {BackendError} when PostgreSQL fails
   */
  async readHeader(key: string, options: HeaderReadOptions = {}): Promise<HeaderResult | undefined> {
    // Every value is returned whole: `clipAt` allows clipping, it does not require it.
    checkHeaderReadOptions(this.name, options);
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
   * @param options - `revision`: the stored revision the stream must be (see {@link HistoryReadOptions})
   * @throws {StateNotFoundError} when nothing is stored
   * @throws {ConflictError} when `options.revision` is not the stored revision in the stream's snapshot
   * @throws {FormatError} / {BackendError} as `read`
   */
  async *iterHistory(key: string, options: HistoryReadOptions = {}): AsyncIterable<Message> {
    checkHistoryReadOptions(this.name, options);
    validateKey(key);
    const what = `cannot read the history of ${JSON.stringify(key)}`;
    await this.driver.readyFor(what, key);
    const client = await this.driver.connectClient(what, key);
    const run = async (text: string, values?: unknown[]) => {
      try {
        return await client.query(text, values);
      } catch (e) {
        throw this.driver.wrap(e, what, key);
      }
    };
    try {
      await run("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
      const head = await run(
        this.sql("SELECT message_count, meta, revision FROM {s}.sessions WHERE session_key = $1"),
        [key],
      );
      if (!head.rows[0]) throw new StateNotFoundError(key, this.name);
      const stored = Number(head.rows[0].revision);
      if (options.revision !== undefined && options.revision !== stored) {
        throw new ConflictError(key, options.revision, stored, this.name);
      }
      const count = Number(head.rows[0].message_count);
      // Checked as a load checks them: the messages against the protocol's schema, the format version.
      const { protocol } = parseHeaderField(key, this.label(key), "meta", head.rows[0].meta, StateMetaSchema);
      for (let start = 0; start < count; start += PAGE_SIZE) {
        const page = await run(
          this.sql(`SELECT seq, body, body_gz FROM {s}.messages
                     WHERE session_key = $1 AND seq >= $2 AND seq < $3 ORDER BY seq`),
          [key, start, Math.min(start + PAGE_SIZE, count)],
        );
        const want = Math.min(start + PAGE_SIZE, count) - start;
        if (page.rows.length !== want) throw this.corrupt(key, `messages ${start}.. are missing`);
        for (let i = 0; i < want; i++) {
          const row = page.rows[i]!;
          if (row.seq !== start + i) throw this.corrupt(key, `message seq ${String(row.seq)} out of order`);
          yield this.decodeMessage(key, row, start + i, protocol);
        }
      }
    } finally {
      // A dead connection cannot roll back: the driver then discards the client instead of pooling it.
      await client.query("ROLLBACK").catch(() => undefined);
      client.release();
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
    checkOptions("postgres gc", options, GC_OPTIONS);
    const ms = options?.olderThanMs;
    if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
      throw new TypeError(`gc olderThanMs must be a non-negative number of ms, got ${String(ms)}`);
    }
    this.configs.forget();
    this.states.forget();
    const r = await this.call("cannot delete old sessions", undefined, () =>
      this.pool.query(
        this.sql(deleteRaisingFloor("saved_at < now() - make_interval(secs => $1::double precision / 1000)")),
        [ms],
      ),
    );
    return { deleted: Number(r.rows[0]?.n ?? 0) };
  }

  /** Ends the pool the backend created (an injected pool is left open). Idempotent. */
  async close(): Promise<void> {
    await this.driver.close();
  }

  // ---- internals ----

  private get pool(): PgLikePool {
    return this.driver.pool;
  }

  /** Migrates when needed, runs `fn`; driver errors become BackendError. */
  private async call<T>(what: string, key: string | undefined, fn: () => Promise<T>): Promise<T> {
    await this.driver.readyFor(what, key);
    try {
      return await fn();
    } catch (e) {
      throw this.driver.wrap(e, what, key);
    }
  }

  private encode(history: readonly unknown[], from: number): Encoded {
    const bodies: (string | null)[] = [];
    const gz: (Buffer | null)[] | undefined = this.compress ? [] : undefined;
    for (let i = from; i < history.length; i++) {
      const message = history[i];
      if (typeof message !== "object" || message === null || Array.isArray(message)) {
        assertJson(message, `history[${i}]`, i);
        throw new InvalidStateError(`history[${i}]`, "a history message must be a JSON object");
      }
      const json = messageText(history, i); // checked and serialised, or the text the caller lent
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

  private decodeMessage(
    key: string,
    row: Record<string, unknown>,
    index: number,
    protocol: Protocol,
    label = this.label(key),
  ): Message {
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
    return decodeStoredMessage(key, label, json, protocol, index);
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
