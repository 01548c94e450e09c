/**
 * The SQL journal's schema, written once for every SQL database: the
 * versioned migrations of its tables (runs, steps, signals, events, blobs and
 * their references) in each dialect's spelling. `journal-sql.ts` holds the
 * statements that read and write them.
 *
 * @module
 */
import { rebuildAsRowid } from "../drivers/sqlite.js";
import type { Journal, JournalEvent, WriteStepOptions } from "./journal.js";

/** Prefix of the journal's table names unless a store says otherwise. */
export const DEFAULT_JOURNAL_TABLE_PREFIX = "durable_";

/** How one SQL dialect spells the journal's DDL (see {@link sqlJournalMigrations}). */
export interface SqlJournalDialect {
  /** A table name in DDL: `"durable_runs"` (SQLite), `{s}."durable_runs"` (PostgreSQL, `{s}` the quoted schema). */
  table(name: string): string;
  /** Type of the epoch-ms and fencing-token columns: `INTEGER` (64-bit in SQLite) or `BIGINT`. */
  bigint: string;
  /** Clause closing a table keyed by `(run_id, …)`: `" WITHOUT ROWID"` on SQLite, `""` on PostgreSQL. */
  keyed: string;
  /** Type of a bytes column: `BLOB` (SQLite) or `BYTEA` (PostgreSQL). @default `BYTEA` when `bigint` is `BIGINT`, else `BLOB` */
  bytes?: string;
  /**
   * What makes a text column compare byte by byte (UTF-8), as every journal orders run ids:
   * {@link RUN_ID_BYTEWISE} of the dialect. @default `""` (SQLite's `BINARY`, its default)
   */
  bytewise?: string;
}

/**
 * How `run_id` is compared in the listing's order and cursor, per database: byte by byte (UTF-8), as
 * SQLite compares text by default and Redis orders the members of one score, so that a merge of two
 * listings (the workflow store's `failed`: three statuses) orders ties as the database does.
 */
export const RUN_ID_BYTEWISE: Record<"sqlite" | "postgres", string> = { sqlite: "", postgres: ' COLLATE "C"' };

/** One versioned migration of the journal's tables, in the shape both drivers' migration lists take. */
export interface SqlJournalMigration {
  version: number;
  name: string;
  up: string[];
}

/**
 * The journal's migrations in one dialect. Never edit a released version: add one.
 *
 * - 1: the tables of dumplings-ai 0.1, with `IF NOT EXISTS`, so a journal that
 *   release created (it had no migration ledger) is adopted by running 1 once;
 * - 2: `runs.event_count`, the per-run event counter, backfilled from the events;
 * - 3: `events.by_name` (who did an operator action: {@link JournalEvent.by}; `by`
 *   is an SQL keyword) and `events.detail` (a blocked reason, a drift), both
 *   nullable TEXT, so rows of earlier versions read back unchanged;
 * - 4: the indexes of {@link Journal.listRuns}' pages, `(updated_at, run_id)`
 *   alone, after `status` and after `workflow` (the `(status, created_at)` index
 *   of version 1 is dropped: nothing reads runs in that order any more);
 * - 5: `steps.snapshot` (1 for a snapshot step, else NULL) and a partial index
 *   of the snapshot steps, for {@link Journal.pruneRuns};
 * - 6: `blobs` (content-addressed bytes: `ref` = sha256 hex) and `blob_refs`
 *   (which step record holds which reference), for {@link WriteStepOptions.blobs};
 * - 7: {@link Journal.listRuns} pages by creation, `(created_at, run_id)`, fixed for a run's life (a
 *   walk lists each run once while runs change; `run_id` compared byte by byte): its indexes alone, after `status`, after `workflow`,
 *   and after `workflow` and `status` (the workflow store's filtered listing); version 4's indexes
 *   by `updated_at` are dropped (nothing reads runs in that order any more, and every lease and
 *   status change had to update them).
 * - 8: on SQLite, `steps` and `signals` become ordinary (rowid) tables keyed by a unique index: in a
 *   `WITHOUT ROWID` table a row lives in its key's b-tree, and SQLite reads a row that overflows its
 *   page (a 100 KB checkpoint) whole at every key comparison of a seek, so the newest-step probe
 *   and each insert cost about a millisecond, not microseconds ("WITHOUT ROWID tables work best when
 *   rows are small", https://sqlite.org/withoutrowid.html §4). Each table is copied, dropped and the
 *   copy renamed, with `legacy_alter_table` so a view over it (`workflow_snapshots`) is kept as it
 *   is, not checked against the table being swapped. Nothing to do on PostgreSQL (no such clause).
 *
 * @param prefix - prefix of the table names, e.g. `durable_`
 * @param dialect - how the database spells names and types
 * @returns the migrations, ordered by version
 * @example
 * sqlJournalMigrations("durable_", { table: (n) => `"${n}"`, bigint: "INTEGER", keyed: " WITHOUT ROWID" });
 */
export function sqlJournalMigrations(prefix: string, dialect: SqlJournalDialect): SqlJournalMigration[] {
  const runs = dialect.table(`${prefix}runs`);
  const steps = dialect.table(`${prefix}steps`);
  const signals = dialect.table(`${prefix}signals`);
  const events = dialect.table(`${prefix}events`);
  const big = dialect.bigint;
  const id = `run_id${dialect.bytewise ?? ""}`;
  return [
    {
      version: 1,
      name: "runs, steps, signals and events",
      up: [
        `CREATE TABLE IF NOT EXISTS ${runs} (
          run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, status TEXT NOT NULL, input_json TEXT NOT NULL,
          output_json TEXT, error_json TEXT, waiting_for TEXT, wake_at ${big},
          fencing_token ${big} NOT NULL DEFAULT 0, lease_owner TEXT, lease_expires_at ${big},
          created_at ${big} NOT NULL, updated_at ${big} NOT NULL)`,
        `CREATE INDEX IF NOT EXISTS ${prefix}runs_status ON ${runs} (status, created_at)`,
        `CREATE TABLE IF NOT EXISTS ${steps} (
          run_id TEXT NOT NULL, seq INTEGER NOT NULL, name TEXT NOT NULL, input_hash TEXT NOT NULL,
          status TEXT NOT NULL, output_json TEXT, error_json TEXT, attempt INTEGER NOT NULL,
          started_at ${big} NOT NULL, finished_at ${big}, fencing_token ${big} NOT NULL,
          PRIMARY KEY (run_id, seq))${dialect.keyed}`,
        `CREATE TABLE IF NOT EXISTS ${signals} (
          run_id TEXT NOT NULL, name TEXT NOT NULL, value_json TEXT NOT NULL, sent_at ${big} NOT NULL,
          PRIMARY KEY (run_id, name))${dialect.keyed}`,
        `CREATE TABLE IF NOT EXISTS ${events} (
          run_id TEXT NOT NULL, idx INTEGER NOT NULL, type TEXT NOT NULL, at ${big} NOT NULL,
          seq INTEGER, name TEXT, attempt INTEGER, fencing_token ${big},
          PRIMARY KEY (run_id, idx))${dialect.keyed}`,
      ],
    },
    {
      version: 2,
      name: "per-run event counter",
      up: [
        `ALTER TABLE ${runs} ADD COLUMN event_count INTEGER NOT NULL DEFAULT 0`,
        `UPDATE ${runs} SET event_count =
          (SELECT COALESCE(MAX(e.idx) + 1, 0) FROM ${events} e WHERE e.run_id = ${runs}.run_id)`,
      ],
    },
    {
      version: 3,
      name: "event author and detail",
      up: [`ALTER TABLE ${events} ADD COLUMN by_name TEXT`, `ALTER TABLE ${events} ADD COLUMN detail TEXT`],
    },
    {
      version: 4,
      name: "runs listed by (updated_at, run_id), of a status or a workflow",
      up: [
        `DROP INDEX IF EXISTS ${dialect.table(`${prefix}runs_status`)}`,
        `CREATE INDEX IF NOT EXISTS ${prefix}runs_updated ON ${runs} (updated_at, run_id)`,
        `CREATE INDEX IF NOT EXISTS ${prefix}runs_status_updated ON ${runs} (status, updated_at, run_id)`,
        `CREATE INDEX IF NOT EXISTS ${prefix}runs_workflow_updated ON ${runs} (workflow, updated_at, run_id)`,
      ],
    },
    {
      version: 5,
      name: "snapshot steps",
      up: [
        `ALTER TABLE ${steps} ADD COLUMN snapshot INTEGER`,
        `CREATE INDEX IF NOT EXISTS ${prefix}steps_snapshot ON ${steps} (run_id, seq) WHERE snapshot = 1`,
      ],
    },
    {
      version: 6,
      name: "blobs and their references",
      up: [
        `CREATE TABLE IF NOT EXISTS ${dialect.table(`${prefix}blobs`)} (
          ref TEXT PRIMARY KEY, bytes ${dialect.bytes ?? (big === "BIGINT" ? "BYTEA" : "BLOB")} NOT NULL,
          size ${big} NOT NULL, created_at ${big} NOT NULL)`,
        `CREATE TABLE IF NOT EXISTS ${dialect.table(`${prefix}blob_refs`)} (
          run_id TEXT NOT NULL, seq INTEGER NOT NULL, ref TEXT NOT NULL,
          PRIMARY KEY (run_id, seq, ref))${dialect.keyed}`,
        `CREATE INDEX IF NOT EXISTS ${prefix}blob_refs_ref ON ${dialect.table(`${prefix}blob_refs`)} (ref)`,
      ],
    },
    {
      version: 7,
      name: "runs listed by (created_at, run_id), of a status, a workflow, or both",
      up: [
        `CREATE INDEX IF NOT EXISTS ${prefix}runs_created ON ${runs} (created_at, ${id})`,
        `CREATE INDEX IF NOT EXISTS ${prefix}runs_status_created ON ${runs} (status, created_at, ${id})`,
        `CREATE INDEX IF NOT EXISTS ${prefix}runs_workflow_created ON ${runs} (workflow, created_at, ${id})`,
        `CREATE INDEX IF NOT EXISTS ${prefix}runs_workflow_status_created ON ${runs} (workflow, status, created_at, ${id})`,
        ...["runs_updated", "runs_status_updated", "runs_workflow_updated"].map(
          (n) => `DROP INDEX IF EXISTS ${dialect.table(`${prefix}${n}`)}`,
        ),
      ],
    },
    {
      version: 8,
      name: "steps and signals in rowid tables (large rows are not read whole by a key seek)",
      up:
        dialect.keyed === ""
          ? []
          : [
              "PRAGMA legacy_alter_table = ON",
              ...rebuildAsRowid(
                dialect.table,
                `${prefix}steps`,
                `run_id TEXT NOT NULL, seq INTEGER NOT NULL, name TEXT NOT NULL, input_hash TEXT NOT NULL,
          status TEXT NOT NULL, output_json TEXT, error_json TEXT, attempt INTEGER NOT NULL,
          started_at ${big} NOT NULL, finished_at ${big}, fencing_token ${big} NOT NULL, snapshot INTEGER,
          PRIMARY KEY (run_id, seq)`,
                "run_id, seq, name, input_hash, status, output_json, error_json, attempt, started_at, finished_at, fencing_token, snapshot",
              ),
              `CREATE INDEX IF NOT EXISTS ${prefix}steps_snapshot ON ${steps} (run_id, seq) WHERE snapshot = 1`,
              ...rebuildAsRowid(
                dialect.table,
                `${prefix}signals`,
                `run_id TEXT NOT NULL, name TEXT NOT NULL, value_json TEXT NOT NULL, sent_at ${big} NOT NULL,
          PRIMARY KEY (run_id, name)`,
                "run_id, name, value_json, sent_at",
              ),
              "PRAGMA legacy_alter_table = OFF",
            ],
    },
  ];
}
