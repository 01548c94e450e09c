/**
 * The part of better-sqlite3's API the library calls, declared here so that
 * the published declarations never import `better-sqlite3` (an optional peer
 * dependency whose types, `@types/better-sqlite3`, an app may not have): an
 * app without it type-checks with `skipLibCheck: false`. These are
 * structural types, a subset of `@types/better-sqlite3`'s (MIT), so a
 * better-sqlite3 `Database` fits `SqliteConnectionOptions.database` as is.
 *
 * Use as a namespace: `import type * as BetterSqlite3 from "./sqlite-types.js"`.
 *
 * @module
 */

/** Any function, as a transaction body. */
// biome-ignore lint/suspicious/noExplicitAny: the transaction body's parameters are the caller's
type AnyFunction = (...params: any[]) => unknown;
/** The parameters of `F` (written as better-sqlite3's types write it, so its transactions fit). */
type ArgumentTypes<F extends AnyFunction> = F extends (...args: infer A) => unknown ? A : never;

/** What `Statement.run` returns. */
export interface RunResult {
  changes: number;
  lastInsertRowid: number | bigint;
}

/** Options of `new Database(file, options)`. */
export interface Options {
  readonly?: boolean | undefined;
  fileMustExist?: boolean | undefined;
  timeout?: number | undefined;
}

/** Options of `Database.pragma`. */
export interface PragmaOptions {
  simple?: boolean | undefined;
}

/** A prepared statement. */
export interface Statement<BindParameters extends unknown[] = unknown[], Result = unknown> {
  /** The SQL text. */
  source: string;
  /** True when the statement returns rows. */
  reader: boolean;
  run(...params: BindParameters): RunResult;
  get(...params: BindParameters): Result | undefined;
  all(...params: BindParameters): Result[];
  iterate(...params: BindParameters): IterableIterator<Result>;
  pluck(toggleState?: boolean): this;
  raw(toggleState?: boolean): this;
}

/** A function run in a transaction (`Database.transaction(fn)`). */
export interface Transaction<F extends AnyFunction> {
  (...params: ArgumentTypes<F>): ReturnType<F>;
  immediate(...params: ArgumentTypes<F>): ReturnType<F>;
}

/** An open database connection. */
export interface Database {
  memory: boolean;
  readonly: boolean;
  name: string;
  open: boolean;
  inTransaction: boolean;
  // biome-ignore lint/complexity/noBannedTypes: better-sqlite3's own signature (named parameters), so its Database fits
  prepare<BindParameters extends unknown[] | {} = unknown[], Result = unknown>(
    source: string,
  ): BindParameters extends unknown[] ? Statement<BindParameters, Result> : Statement<[BindParameters], Result>;
  transaction<F extends AnyFunction>(fn: F): Transaction<F>;
  exec(source: string): this;
  pragma(source: string, options?: PragmaOptions): unknown;
  close(): this;
}

/** The module's export: the `Database` class. */
export interface DatabaseConstructor {
  new (filename?: string | Buffer, options?: Options): Database;
}
