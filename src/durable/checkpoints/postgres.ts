/**
 * PostgreSQL cold store for workflow checkpoints: the workflow store over the
 * durable journal ({@link JournalColdStore}) on a {@link PostgresJournal} in a
 * schema (default `dumplings`). A workflow is a journal run, its checkpoints
 * are steps, its lease is the run's lease (docs/one-engine.md, part 3), so
 * graphs and durable runs share one set of tables and one fencing token.
 *
 * Opening a schema written by an earlier release (0.1's tables in `public`,
 * or later ones' in `dumplings`, or the original design's
 * `workflow_snapshots` rows) moves its workflows into the journal once, in
 * the migration ledger's transaction under the schema's advisory lock
 * (component `workflow` version 2, `journal-migrate.ts`): a process killed
 * midway leaves the schema as it was. The old tables are then dropped and
 * `workflow_snapshots` is a view over the checkpoint steps, so the original
 * design's query keeps returning a workflow's newest checkpoint. Opening a
 * set-up schema reads the ledger and runs no DDL. `pg` is loaded when the
 * first store is created.
 *
 * @module
 */

import { checkOptions, optionKeys } from "../../core/options.js";
import { wholeOption } from "../../drivers/options.js";
import { type PgLikePool, POSTGRES_CONNECTION_KEYS, type PostgresConnectionOptions } from "../../drivers/postgres.js";
import { PostgresJournal } from "../journal-postgres.js";
import { DEFAULT_JOURNAL_TABLE_PREFIX } from "../journal-sql-schema.js";
import { JournalColdStore } from "./journal-store.js";
import { postgresWorkflowJournalMigrations } from "./migrate.js";

/** The keys of {@link PostgresColdStoreOptions}: any other is an `InvalidOptionError`. */
const COLD_POSTGRES_OPTIONS = optionKeys<PostgresColdStoreOptions>({
  ...POSTGRES_CONNECTION_KEYS,
  pruneBatchSize: true,
});

/** @deprecated The driver's `PgLikePool` under its 0.1 name. */
export type { PgPoolLike } from "../../drivers/postgres.js";

/**
 * Options of {@link PostgresColdStore}: the PostgreSQL driver's connection
 * options (`pool` or `url` — default `DATABASE_URL`, else
 * `postgres://127.0.0.1:5432/postgres` —, `schema`, `maxConnections`,
 * `connectTimeoutMs`, `statementTimeoutMs`, `create`) and `pruneBatchSize`.
 *
 * The default `schema` is `"dumplings"` (it was `"public"` in 0.1): pass
 * `schema: "public"` to keep using tables created by 0.1 (they are moved into
 * the journal on the first open).
 */
export interface PostgresColdStoreOptions extends PostgresConnectionOptions {
  /**
   * Accepted for code written for the previous release's store (which pruned in
   * batches of this many rows), and checked (a positive integer), but unused:
   * `prune` is the journal's `pruneRuns`, which deletes each workflow's old
   * records in transactions of its own, at most 1,000 records each.
   * @deprecated Unused since the store runs on the journal.
   * @default 5000
   */
  pruneBatchSize?: number;
}

/**
 * Cold checkpoint store in PostgreSQL: a {@link JournalColdStore} over a
 * {@link PostgresJournal} of the same options.
 *
 * @example
 * const cold = new PostgresColdStore({ url: process.env.DATABASE_URL, schema: "workflows" });
 * const store = await CheckpointStore.open({ cold });
 */
export class PostgresColdStore extends JournalColdStore {
  /** The pool in use (created, or the injected one). */
  readonly pool: PgLikePool;
  /** The schema holding the tables (unquoted). */
  readonly schema: string;
  /** `postgres:<schema>`. */
  declare readonly location: string;
  /** The journal the workflows live in (closed by `close()`). */
  declare readonly journal: PostgresJournal;

  /**
   * Creates the store; nothing connects until the first call (`CheckpointStore.open` runs `init`,
   * which creates or migrates the journal's tables and moves an earlier release's workflow tables).
   *
   * @param options - an injected `pool` or a `url`; the `schema` to use (default `"dumplings"`)
   * @throws {InvalidOptionError} on a bad schema name, URL, timeout, pool size or `pruneBatchSize`
   */
  constructor(options: PostgresColdStoreOptions = {}) {
    checkOptions("postgres", options, COLD_POSTGRES_OPTIONS);
    const { pruneBatchSize, ...connection } = options ?? {};
    wholeOption("postgres", "pruneBatchSize", pruneBatchSize, 5000);
    const journal = new PostgresJournal(connection, [postgresWorkflowJournalMigrations(DEFAULT_JOURNAL_TABLE_PREFIX)]);
    super({ journal, location: `postgres:${journal.schema}` });
    this.pool = journal.pool;
    this.schema = journal.schema;
  }
}
