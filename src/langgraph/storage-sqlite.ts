/**
 * SQLite store of {@link DumplingsSaver}: the SQL store on the shared SQLite
 * driver (WAL, one `BEGIN IMMEDIATE` transaction per checkpoint), so several
 * processes of one machine can share the file. better-sqlite3 is loaded when
 * the first store opens.
 *
 * @module
 */
import { DEFAULT_FILES } from "../core/defaults.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { type SqliteConnectionOptions, SqliteDriver } from "../drivers/sqlite.js";
import { langgraphMigrations, SqlSaverStorage } from "./storage-sql.js";

/**
 * Default file of the SQLite store (`./.dumplings-langgraph.db` of an earlier release is used while this
 * one does not exist).
 */
export const DEFAULT_LANGGRAPH_SQLITE_PATH: string = DEFAULT_FILES.langgraphDb;

/**
 * Options of the SQLite store: `path` (default `./.dumplingsAI_langgraph.db`,
 * or `":memory:"`) or an injected `database`, `busyTimeoutMs` (default 5000),
 * `synchronous` (default `FULL`), `create` (default `true`). See
 * {@link SqliteConnectionOptions}.
 */
export interface SqliteSaverStoreOptions extends SqliteConnectionOptions {}

const KEYS = optionKeys<SqliteSaverStoreOptions>({
  path: true,
  database: true,
  busyTimeoutMs: true,
  synchronous: true,
  create: true,
});

/**
 * Opens (creating when missing) the file and the saver's tables.
 *
 * @param options - see {@link SqliteSaverStoreOptions}
 * @returns the store
 * @throws {InvalidOptionError} on a bad or unknown option
 * @throws {BackendError} when the file cannot be opened or migrated
 * @example
 * const storage = openSqliteSaverStorage({ path: "./graph.db" });
 */
export function openSqliteSaverStorage(options: SqliteSaverStoreOptions = {}): SqlSaverStorage<SqliteDriver> {
  checkOptions("langgraph:sqlite", options, KEYS);
  const driver = new SqliteDriver("sqlite", options, langgraphMigrations("sqlite"), {
    defaultPath: DEFAULT_LANGGRAPH_SQLITE_PATH,
    incrementalVacuum: true,
  });
  return new SqlSaverStorage(driver);
}
