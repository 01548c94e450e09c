/**
 * PostgreSQL cold store for workflow checkpoints: the SQL cold store
 * ({@link SqlColdStore}) on the PostgreSQL driver.
 *
 * Same tables as the SQLite store, in a schema (default `dumplings`). The
 * compare-and-set on a workflow's latest step locks its summary row
 * (`SELECT … FOR UPDATE`) inside the transaction that inserts the snapshot,
 * so racing writers from any number of processes serialise and the loser
 * gets a {@link ConflictError}. Retention deletes in batches (default 5,000
 * rows per statement) so a large prune never holds long locks or bloats one
 * transaction. The tables are versioned in the schema's migration ledger:
 * opening a store on a set-up schema reads the ledger and runs no DDL, so it
 * never waits on (or deadlocks with) processes writing checkpoints. `pg` is
 * loaded when the first store is created.
 *
 * @module
 */

import { checkOptions, optionKeys } from "../core/options.js";
import {
  type PgLikePool,
  POSTGRES_CONNECTION_KEYS,
  type PostgresConnectionOptions,
  PostgresDriver,
} from "../drivers/postgres.js";
import { workflowBlobMigrations } from "./cold-blobs.js";
import { SqlColdStore, type SqlColdStoreOptions, workflowMigrations } from "./cold-sql.js";
import { workflowLeaseMigrations } from "./lease-sql.js";

/** The keys of {@link PostgresColdStoreOptions}: any other is an `InvalidOptionError`. */
const COLD_POSTGRES_OPTIONS = optionKeys<PostgresColdStoreOptions>({
  ...POSTGRES_CONNECTION_KEYS,
  pruneBatchSize: true,
});

/** @deprecated The driver's `PgLikePool` under its 0.1 name. */
export type { PgPoolLike } from "../drivers/postgres.js";

/**
 * Options of {@link PostgresColdStore}: the PostgreSQL driver's connection
 * options (`pool` or `url` — default `DATABASE_URL`, else
 * `postgres://postgres@127.0.0.1:5432/test` —, `schema`, `maxConnections`,
 * `connectTimeoutMs`, `statementTimeoutMs`) and `pruneBatchSize`.
 *
 * The default `schema` is `"dumplings"` (it was `"public"` in 0.1): pass
 * `schema: "public"` to keep using tables created by 0.1.
 */
export interface PostgresColdStoreOptions extends PostgresConnectionOptions, SqlColdStoreOptions {}

/**
 * Cold checkpoint store in PostgreSQL.
 *
 * @example
 * const cold = new PostgresColdStore({ url: process.env.DATABASE_URL, schema: "workflows" });
 * const store = await CheckpointStore.open({ cold });
 */
export class PostgresColdStore extends SqlColdStore<PostgresDriver> {
  /** The pool in use (created, or the injected one). */
  readonly pool: PgLikePool;
  /** The schema holding the tables (unquoted). */
  readonly schema: string;
  /** `postgres:<schema>`. */
  override readonly location: string;

  /**
   * Creates the store; nothing connects until the first call (`CheckpointStore.open` runs `init`).
   *
   * @param options - an injected `pool` or a `url`; the `schema` to use (default `"dumplings"`)
   * @throws {InvalidOptionError} on a bad schema name, URL, timeout, pool size or `pruneBatchSize`
   */
  constructor(options: PostgresColdStoreOptions = {}) {
    checkOptions("postgres", options, COLD_POSTGRES_OPTIONS);
    const { pruneBatchSize, ...connection } = options ?? {};
    super(
      new PostgresDriver("postgres", connection, [
        workflowMigrations("postgres"),
        workflowLeaseMigrations("postgres"),
        workflowBlobMigrations("postgres"),
      ]),
      { pruneBatchSize },
    );
    this.pool = this.driver.pool;
    this.schema = this.driver.schema;
    this.location = `postgres:${this.schema}`;
  }
}
