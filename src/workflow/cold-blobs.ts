/**
 * The blob table of the SQL cold store: large `sharedMemory` values kept in
 * the cold store's own database (the same SQLite file, the same PostgreSQL
 * schema), so every process that opens the store — from any directory, on any
 * machine — reads them, and deleting a workflow deletes its blobs.
 *
 * `workflow_blobs(ref PRIMARY KEY, bytes, size, created_at)`, content-addressed
 * (`ref` = `sha256:<hex>` of the bytes), is its own ledger component
 * (`workflow-blobs`), added beside the `workflow` tables of a store that has
 * them. `workflow_blob_refs` (component `workflow`) says which snapshot holds
 * which reference.
 *
 * - **Writing** runs in the checkpoint's transaction: the blobs the snapshot
 *   references that the table does not hold are inserted, the others are only
 *   locked (PostgreSQL `FOR KEY SHARE`), so an unchanged large value is not
 *   written again at every checkpoint and a snapshot never names a blob that
 *   is not stored.
 * - **Deleting** runs in the transaction that removes references (a workflow,
 *   pruned snapshots, a dropped month): the candidate blobs are locked first
 *   (`FOR UPDATE`, in `ref` order), then their references are counted by a
 *   new statement — which, under PostgreSQL's READ COMMITTED, sees every
 *   checkpoint committed while it waited for the lock — and only blobs nothing
 *   references are deleted. A checkpoint racing the delete either holds the
 *   lock first (the blob stays) or finds the blob gone and writes it again.
 *   SQLite's `BEGIN IMMEDIATE` serialises writers, so there the lock is the
 *   file's.
 *
 * @module
 */
import { BackendError } from "../core/errors.js";
import type { SqlDriver, SqlQuery } from "../drivers/sql.js";

/** Ledger component of the blob table. */
export const WORKFLOW_BLOBS_COMPONENT = "workflow-blobs";

/** Values bound per statement built from a list (far below both databases' limits). */
const CHUNK = 500;

/**
 * The blob table of one dialect, for the driver's migration ledger (component `workflow-blobs`).
 *
 * @param dialect - `sqlite` or `postgres` (table names carry the driver's `{s}` schema placeholder)
 * @returns the component and its migrations
 * @example
 * const driver = new SqliteDriver("sqlite", { path: "wf.db" }, [workflowMigrations("sqlite"), workflowBlobMigrations("sqlite")]);
 */
export function workflowBlobMigrations(dialect: "sqlite" | "postgres"): {
  component: string;
  migrations: readonly { version: number; name: string; up: readonly string[] }[];
} {
  const pg = dialect === "postgres";
  const v1 = [
    `CREATE TABLE IF NOT EXISTS ${pg ? "{s}.workflow_blobs" : "workflow_blobs"} (
      ref TEXT PRIMARY KEY,
      bytes ${pg ? "BYTEA" : "BLOB"} NOT NULL,
      size ${pg ? "BIGINT" : "INTEGER"} NOT NULL,
      created_at ${pg ? "BIGINT" : "INTEGER"} NOT NULL)`,
  ];
  return { component: WORKFLOW_BLOBS_COMPONENT, migrations: [{ version: 1, name: "workflow blob table", up: v1 }] };
}

/** The same bytes as a Buffer (both drivers bind a Buffer as a blob/bytea), not copied. */
const asBuffer = (b: Uint8Array): Buffer =>
  Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);

/** `$from, $from+1, …` for `count` values. */
const placeholders = (count: number, from = 1): string =>
  Array.from({ length: count }, (_, i) => `$${from + i}`).join(", ");

function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/**
 * The SQL of the blob table over a driver, for the cold store's transactions.
 *
 * @example
 * const blobs = new SqlBlobTable(driver);
 * await driver.transaction("…", id, (query) => blobs.store(query, new Map([[ref, bytes]])));
 */
export class SqlBlobTable {
  /** `workflow_blobs`, ready for SQL. */
  readonly table: string;
  private readonly refs: string;
  /** Row locks: PostgreSQL's (SQLite's `BEGIN IMMEDIATE` holds the whole file). */
  private readonly pg: boolean;
  /** PostgreSQL: whether the server's encoding is UTF-8 (undefined until asked). */
  private utf8Server: boolean | undefined;

  /** @param driver - the cold store's driver, set up with {@link workflowBlobMigrations} */
  constructor(private readonly driver: SqlDriver) {
    this.table = driver.table("workflow_blobs");
    this.refs = driver.table("workflow_blob_refs");
    this.pg = driver.name === "postgres";
  }

  /**
   * Makes every blob of `blobs` present when the transaction commits: inserts those the table
   * does not hold, locks the others against a concurrent delete (see the module comment).
   *
   * @param query - the transaction's query function
   * @param blobs - bytes by reference (`sha256:<hex>` of the bytes)
   * @returns the number of blobs inserted
   * @throws {BackendError} when a blob keeps vanishing between the insert and the lock (a loop of deletes)
   */
  async store(query: SqlQuery, blobs: ReadonlyMap<string, Uint8Array>): Promise<number> {
    let missing = [...blobs.keys()];
    let inserted = 0;
    for (let attempt = 0; missing.length > 0; attempt++) {
      const held = await this.lock(query, missing, " FOR KEY SHARE");
      missing = missing.filter((ref) => !held.has(ref));
      if (missing.length === 0) break;
      if (attempt === 3) {
        throw new BackendError(this.driver.name, `blob ${missing[0]} keeps vanishing while it is being stored`);
      }
      const still: string[] = [];
      for (const ref of missing) {
        const bytes = blobs.get(ref)!;
        // A concurrent writer's insert of the same blob wins: then the next round locks it.
        const r = await query(
          `INSERT INTO ${this.table} (ref, bytes, size, created_at) VALUES ($1, $2, $3, ${this.driver.nowMs})
           ON CONFLICT (ref) DO NOTHING RETURNING ref`,
          [ref, asBuffer(bytes), bytes.byteLength],
        );
        if (r.rows.length === 1) inserted++;
        else still.push(ref);
      }
      missing = still;
    }
    return inserted;
  }

  /**
   * Of `refs` (whose references this transaction has just deleted), deletes the blobs nothing
   * references any more and returns their references (also those the table did not hold: they
   * may live in a separate blob store).
   *
   * @param query - the transaction's query function
   * @param refs - candidate references (duplicates allowed)
   */
  async dropOrphans(query: SqlQuery, refs: readonly string[]): Promise<string[]> {
    const unique = [...new Set(refs)].sort();
    if (unique.length === 0) return [];
    // Lock first; the reference count below is a new statement, so it sees what committed meanwhile.
    if (this.pg) await this.lock(query, unique, " FOR UPDATE");
    const still = new Set<string>();
    for (const part of chunks(unique, CHUNK)) {
      const r = await query(`SELECT DISTINCT ref FROM ${this.refs} WHERE ref IN (${placeholders(part.length)})`, part);
      for (const x of r.rows) still.add(x.ref as string);
    }
    const orphans = unique.filter((ref) => !still.has(ref));
    for (const part of chunks(orphans, CHUNK)) {
      await query(`DELETE FROM ${this.table} WHERE ref IN (${placeholders(part.length)})`, part);
    }
    return orphans;
  }

  /**
   * Deletes, in batches, the blobs no snapshot references at all (left by a step written again
   * with another value, by a process that stopped between its own transactions, or put outside
   * a checkpoint).
   *
   * @param query - the transaction's query function
   * @param limit - at most this many per call
   * @returns the references deleted
   */
  async sweep(query: SqlQuery, limit: number): Promise<string[]> {
    const r = await query(
      `SELECT b.ref FROM ${this.table} b WHERE NOT EXISTS (SELECT 1 FROM ${this.refs} r WHERE r.ref = b.ref)
       ORDER BY b.ref LIMIT $1`,
      [limit],
    );
    return this.dropOrphans(
      query,
      r.rows.map((x) => x.ref as string),
    );
  }

  /**
   * The bytes of a blob, or `undefined` when the table does not hold it.
   *
   * PostgreSQL sends a bytea slowly (hex text, or a binary field pg copies): a blob of UTF-8 text
   * (every value a checkpoint stores, JSON) is read as text on a UTF-8 server, about twice as
   * fast for 300 KB; other bytes as base64.
   *
   * @throws {BackendError} when the database fails
   */
  async read(ref: string): Promise<Uint8Array | undefined> {
    const what = `cannot read blob ${ref}`;
    const select = (column: string) =>
      this.driver.query(what, ref, `SELECT ${column} AS v FROM ${this.table} WHERE ref = $1`, [ref]);
    if (!this.pg) {
      const v = (await select("bytes")).rows[0]?.v;
      return v === undefined || v === null ? undefined : (v as Uint8Array);
    }
    if (this.utf8Server === undefined) {
      const r = await this.driver.query(what, ref, "SHOW server_encoding");
      this.utf8Server = String(r.rows[0]?.server_encoding ?? "").toUpperCase() === "UTF8";
    }
    if (this.utf8Server) {
      try {
        const v = (await select("convert_from(bytes, 'UTF8')")).rows[0]?.v;
        return v === undefined || v === null ? undefined : new Uint8Array(Buffer.from(v as string, "utf8"));
      } catch (e) {
        // 22021: not UTF-8 (or a NUL byte): a blob put on its own, read as base64 below.
        if ((e as { cause?: { code?: unknown } }).cause?.code !== "22021") throw e;
      }
    }
    const v = (await select("encode(bytes, 'base64')")).rows[0]?.v;
    return v === undefined || v === null ? undefined : new Uint8Array(Buffer.from(v as string, "base64"));
  }

  /** Locks the rows of `refs` that exist (PostgreSQL; a plain read on SQLite) and returns their references. */
  private async lock(query: SqlQuery, refs: readonly string[], mode: string): Promise<Set<string>> {
    const held = new Set<string>();
    for (const part of chunks([...refs].sort(), CHUNK)) {
      const r = await query(
        `SELECT ref FROM ${this.table} WHERE ref IN (${placeholders(part.length)}) ORDER BY ref${this.pg ? mode : ""}`,
        part,
      );
      for (const x of r.rows) held.add(x.ref as string);
    }
    return held;
  }
}
