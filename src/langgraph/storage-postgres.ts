/**
 * PostgreSQL store of {@link DumplingsSaver}: the SQL store on the shared
 * PostgreSQL driver, its tables in a schema (default `dumplings`) versioned
 * in the schema's migration ledger. Nothing connects until the first call;
 * `pg` is loaded when the first store is created.
 *
 * @module
 */
import { checkOptions, optionKeys } from "../core/options.js";
import { POSTGRES_CONNECTION_KEYS, type PostgresConnectionOptions, PostgresDriver } from "../drivers/postgres.js";
import { langgraphMigrations, SqlSaverStorage } from "./storage-sql.js";

/**
 * Options of the PostgreSQL store: `url` (default `DATABASE_URL`, else
 * `postgres://127.0.0.1:5432/postgres`) or an injected `pool`,
 * `schema` (default `dumplings`), `maxConnections`, `connectTimeoutMs`,
 * `statementTimeoutMs`, `create`. See {@link PostgresConnectionOptions}.
 */
export interface PostgresSaverStoreOptions extends PostgresConnectionOptions {}

const KEYS = optionKeys<PostgresSaverStoreOptions>({
  ...POSTGRES_CONNECTION_KEYS,
});

/**
 * Creates the store; the tables are created or migrated at the first call.
 *
 * @param options - see {@link PostgresSaverStoreOptions}
 * @returns the store
 * @throws {InvalidOptionError} on a bad or unknown option
 * @example
 * const storage = openPostgresSaverStorage({ url: process.env.DATABASE_URL, schema: "graphs" });
 */
export function openPostgresSaverStorage(options: PostgresSaverStoreOptions = {}): SqlSaverStorage<PostgresDriver> {
  checkOptions("langgraph:postgres", options, KEYS);
  return new SqlSaverStorage(new PostgresDriver("postgres", options, langgraphMigrations("postgres")));
}
