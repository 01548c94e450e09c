/**
 * SQLite journal (the embedded default): the {@link SqlJournal} on the shared
 * SQLite driver. Four tables in one database file (its directory is created
 * when missing), WAL mode, every change one `BEGIN IMMEDIATE` transaction, so
 * several processes on one machine share the file safely.
 *
 * A SQLite journal is single-machine: its file is shared by the processes of
 * one host (never through a network file system, whose locks SQLite cannot
 * trust). Its clock is therefore the host's, read by SQLite itself
 * (`julianday('now')` inside each statement) rather than through a process's
 * `Date.now()`: lease expiry and every stored time come from it, so a process
 * that patches or fakes `Date.now()` cannot take over a live lease either.
 *
 * @module
 */

import { DEFAULT_FILES } from "../core/defaults.js";
import { InvalidOptionError } from "../core/errors.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { type SqliteConnectionOptions, SqliteDriver, type SqliteMigrations } from "../drivers/sqlite.js";
import type * as BetterSqlite3 from "../drivers/sqlite-types.js";
import { SqlJournal } from "./journal-sql.js";
import { DEFAULT_JOURNAL_TABLE_PREFIX, sqlJournalMigrations } from "./journal-sql-schema.js";

/** The keys of {@link SqliteJournalOptions}: any other is an `InvalidOptionError`. */
const JOURNAL_SQLITE_OPTIONS = optionKeys<SqliteJournalOptions>({
  path: true,
  database: true,
  busyTimeoutMs: true,
  synchronous: true,
  create: true,
  tablePrefix: true,
});

/**
 * Options of {@link SqliteJournal}: the connection options every SQLite
 * component shares (`path`, `database`, `busyTimeoutMs`, `synchronous`; see
 * {@link SqliteConnectionOptions}) and the journal's own.
 */
export interface SqliteJournalOptions extends SqliteConnectionOptions {
  /**
   * Database file path (created with its directory when missing). Ignored when `database` is given.
   * Without it, `./.dumplings-durable.db` of an earlier release is used while `./.dumplingsAI_durable.db`
   * does not exist.
   * @default "./.dumplingsAI_durable.db"
   */
  path?: string;
  /** Prefix of the table names: letters, digits and `_`, not starting with a digit. @default "durable_" */
  tablePrefix?: string;
}
const PREFIX_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * SQLite implementation of {@link Journal} (better-sqlite3, loaded on first use).
 *
 * @example
 * const journal = new SqliteJournal({ path: "/var/lib/app/durable.db" });
 * const result = await runDurable("run-1", myWorkflow, { journal, input: { q: "hi" } });
 */
export class SqliteJournal extends SqlJournal {
  /** The open database (the injected one, or the file this journal opened). */
  readonly db: BetterSqlite3.Database;

  /**
   * Opens (creating when missing) the file and migrates the journal's tables;
   * a file written by dumplings-ai 0.1 is adopted as is.
   *
   * @param options - `path` or `database`, `tablePrefix` (default `durable_`), `busyTimeoutMs` (default 5000), `synchronous` (default `FULL`)
   * @param components - @internal migrations of components run after the journal's own in the same file
   *   (the workflow store's move of its old tables into the journal)
   * @throws {InvalidOptionError} on a bad option
   * @throws {BackendError} when the file cannot be opened or migrated
   * @throws {FormatError} when the file holds journal tables of a newer version than this build knows
   */
  constructor(options: SqliteJournalOptions = {}, components: readonly SqliteMigrations[] = []) {
    checkOptions("sqlite", options, JOURNAL_SQLITE_OPTIONS);
    const prefix = options.tablePrefix ?? DEFAULT_JOURNAL_TABLE_PREFIX;
    if (typeof prefix !== "string" || !PREFIX_RE.test(prefix)) {
      throw new InvalidOptionError(
        "sqlite",
        "tablePrefix",
        `${JSON.stringify(prefix)} is not acceptable: use letters, digits and _, not starting with a digit`,
      );
    }
    const driver = new SqliteDriver(
      "sqlite",
      options,
      [
        {
          component: prefix === DEFAULT_JOURNAL_TABLE_PREFIX ? "journal" : `journal:${prefix}`,
          migrations: sqlJournalMigrations(prefix, {
            table: (n) => `"${n}"`,
            bigint: "INTEGER",
            keyed: " WITHOUT ROWID",
          }),
          // A file holding only a component that moves its tables into the journal opens as a journal.
          present: (db) => components.some((c) => c.present?.(db) === true),
        },
        ...components,
      ],
      // Incremental auto-vacuum on a new file, whichever component creates it, so a checkpoint store sharing
      // the file can give pruned pages back to the file system.
      { defaultPath: DEFAULT_FILES.durableDb, incrementalVacuum: true },
    );
    super(driver, prefix);
    this.db = driver.db;
  }
}
