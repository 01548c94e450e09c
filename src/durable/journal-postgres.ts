/**
 * PostgreSQL journal: the {@link SqlJournal} on the shared PostgreSQL driver.
 * The same four tables as the SQLite journal, in a schema (default
 * `dumplings`). Each change is one transaction that first locks the run's row
 * (`SELECT … FOR UPDATE`), so lease, token check and write are atomic across
 * any number of processes and machines. A server that is down gives a
 * `BackendError`, and the same journal works once it is back.
 *
 * Time is the server's (`statement_timestamp()`): a lease's expiry is compared
 * with it inside the transaction that takes the lease, and every stored time
 * is stamped with it, so workers whose clocks disagree still agree on who
 * holds a run (case pb-32).
 *
 * @module
 */

import { checkOptions, optionKeys } from "../core/options.js";
import {
  type PgLikePool,
  POSTGRES_CONNECTION_KEYS,
  type PostgresConnectionOptions,
  PostgresDriver,
  type PostgresMigrations,
} from "../drivers/postgres.js";
import { DEFAULT_JOURNAL_TABLE_PREFIX, SqlJournal, sqlJournalMigrations } from "./journal-sql.js";

/** The keys of {@link PostgresJournalOptions}: any other is an `InvalidOptionError`. */
const JOURNAL_POSTGRES_OPTIONS = optionKeys<PostgresJournalOptions>({
  ...POSTGRES_CONNECTION_KEYS,
});

export type { PgPoolLike } from "../drivers/postgres.js";

/**
 * Options of {@link PostgresJournal}: the connection options every PostgreSQL
 * component shares — `url` (default `process.env.DATABASE_URL`, else
 * `postgres://postgres@127.0.0.1:5432/test`), `pool` (injected, left open),
 * `schema` (default `dumplings`), `maxConnections` (default 10; `max` is its
 * deprecated alias), `connectTimeoutMs` (default 5000), `statementTimeoutMs`
 * (default 30000). See {@link PostgresConnectionOptions}.
 */
export interface PostgresJournalOptions extends PostgresConnectionOptions {}

const MIGRATIONS: PostgresMigrations = {
  component: "journal",
  migrations: sqlJournalMigrations(DEFAULT_JOURNAL_TABLE_PREFIX, {
    table: (n) => `{s}."${n}"`,
    bigint: "BIGINT",
    keyed: "",
  }),
};

/**
 * PostgreSQL implementation of {@link Journal} (node-postgres, loaded on first use).
 *
 * @example
 * const journal = new PostgresJournal({ url: process.env.DATABASE_URL, schema: "durable" });
 * await runDurable("run-1", workflow, { journal });
 */
export class PostgresJournal extends SqlJournal {
  /** The pool in use (created, or the injected one). */
  readonly pool: PgLikePool;
  /** The schema holding the tables. */
  readonly schema: string;
  private readonly pg: PostgresDriver;

  /**
   * No connection is made here: the tables are created or migrated at the first call.
   *
   * @param options - see {@link PostgresJournalOptions}
   * @throws {InvalidOptionError} on a bad schema name, URL, timeout or pool size
   */
  constructor(options: PostgresJournalOptions = {}) {
    checkOptions("postgres", options, JOURNAL_POSTGRES_OPTIONS);
    const driver = new PostgresDriver("postgres", options, MIGRATIONS);
    super(driver);
    this.pg = driver;
    this.pool = driver.pool;
    this.schema = driver.schema;
  }

  /**
   * Drops the journal's schema and everything in it, other components' tables
   * included (tests, teardown). The next call creates the tables again.
   *
   * @throws {BackendError} when PostgreSQL fails
   */
  async dropSchema(): Promise<void> {
    try {
      await this.pool.query(this.pg.sql("DROP SCHEMA IF EXISTS {s} CASCADE"));
    } catch (e) {
      throw this.pg.wrap(e, `cannot drop schema "${this.schema}"`);
    } finally {
      this.pg.forgetMigrations();
    }
  }
}
