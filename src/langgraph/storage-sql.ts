/**
 * The store of {@link DumplingsSaver} written once for every SQL database,
 * over the async {@link SqlDriver} contract: `storage-sqlite.ts` and
 * `storage-postgres.ts` are this class with their driver. Three tables
 * (component `langgraph` in the driver's migration ledger):
 *
 * - `langgraph_checkpoints`: one row per checkpoint, channel values left out;
 * - `langgraph_blobs`: one row per channel and version (a full value, or the
 *   items appended since an earlier version), keyed `(thread, ns, channel,
 *   version)` and indexed by `(thread, ns, channel, anchor)` so one query
 *   returns every row a value is rebuilt from;
 * - `langgraph_writes`: pending writes, keyed `(thread, ns, checkpoint, task, idx)`.
 *
 * Only portable SQL (`ON CONFLICT`, row values); the dialects differ in the
 * binary column type (`BLOB` / `BYTEA`).
 *
 * @module
 */
import type { SqlDriver, SqlQuery } from "../drivers/sql.js";
import { rebuildAsRowid } from "../drivers/sqlite.js";
import type { BlobKind, BlobRow, CheckpointQuery, CheckpointRow, SaverStorage, WriteRow } from "./storage.js";

/** Column names of the saver's tables, in their order (copied as they are by a rebuild). */
const COLUMN_NAMES = {
  checkpoints: "thread_id, ns, checkpoint_id, parent_id, type, checkpoint, metadata_type, metadata",
  blobs: "thread_id, ns, channel, version, kind, anchor, base, depth, items, type, data",
  writes: "thread_id, ns, checkpoint_id, task_id, idx, channel, task_path, type, data",
};

/** The saver's versioned tables in one dialect, in the shape both drivers' migration lists take. */
export function langgraphMigrations(dialect: "sqlite" | "postgres"): {
  component: string;
  migrations: { version: number; name: string; up: string[] }[];
} {
  const pg = dialect === "postgres";
  const t = (name: string) => (pg ? `{s}."${name}"` : `"${name}"`);
  const bin = pg ? "BYTEA" : "BLOB";
  const keyed = pg ? "" : " WITHOUT ROWID";
  const CHECKPOINT_COLUMNS = `thread_id TEXT NOT NULL, ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL, parent_id TEXT,
    type TEXT NOT NULL, checkpoint ${bin} NOT NULL, metadata_type TEXT NOT NULL, metadata ${bin} NOT NULL,
    PRIMARY KEY (thread_id, ns, checkpoint_id)`;
  const BLOB_COLUMNS = `thread_id TEXT NOT NULL, ns TEXT NOT NULL, channel TEXT NOT NULL, version TEXT NOT NULL,
    kind TEXT NOT NULL, anchor TEXT NOT NULL, base TEXT, depth INTEGER NOT NULL, items INTEGER NOT NULL,
    type TEXT NOT NULL, data ${bin} NOT NULL,
    PRIMARY KEY (thread_id, ns, channel, version)`;
  const WRITE_COLUMNS = `thread_id TEXT NOT NULL, ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL,
    idx INTEGER NOT NULL, channel TEXT NOT NULL, task_path TEXT NOT NULL, type TEXT NOT NULL,
    data ${bin} NOT NULL,
    PRIMARY KEY (thread_id, ns, checkpoint_id, task_id, idx)`;
  return {
    component: "langgraph",
    migrations: [
      {
        version: 1,
        name: "checkpoints, channel values by version, pending writes",
        up: [
          `CREATE TABLE IF NOT EXISTS ${t("langgraph_checkpoints")} (
            ${CHECKPOINT_COLUMNS})${keyed}`,
          `CREATE TABLE IF NOT EXISTS ${t("langgraph_blobs")} (
            ${BLOB_COLUMNS})${keyed}`,
          `CREATE INDEX IF NOT EXISTS langgraph_blobs_anchor ON ${t("langgraph_blobs")} (thread_id, ns, channel, anchor)`,
          `CREATE TABLE IF NOT EXISTS ${t("langgraph_writes")} (
            ${WRITE_COLUMNS})${keyed}`,
        ],
      },
      {
        // In a WITHOUT ROWID table a row lives in its key's b-tree, and SQLite reads a row that overflows its
        // page (a checkpoint, a channel's messages, a pending write) whole at each key comparison of a seek:
        // the three tables become rowid tables keyed by a unique index (see rebuildAsRowid).
        version: 2,
        name: "checkpoints, channel values and writes in rowid tables",
        up: pg
          ? []
          : [
              "PRAGMA legacy_alter_table = ON",
              ...rebuildAsRowid(t, "langgraph_checkpoints", CHECKPOINT_COLUMNS, COLUMN_NAMES.checkpoints),
              ...rebuildAsRowid(t, "langgraph_blobs", BLOB_COLUMNS, COLUMN_NAMES.blobs),
              `CREATE INDEX IF NOT EXISTS langgraph_blobs_anchor ON ${t("langgraph_blobs")} (thread_id, ns, channel, anchor)`,
              ...rebuildAsRowid(t, "langgraph_writes", WRITE_COLUMNS, COLUMN_NAMES.writes),
              "PRAGMA legacy_alter_table = OFF",
            ],
      },
    ],
  };
}

const bytes = (b: Uint8Array): Buffer => Buffer.from(b.buffer, b.byteOffset, b.byteLength);
const asBytes = (v: unknown): Uint8Array => {
  if (v instanceof Uint8Array) return v;
  if (typeof v === "string") return Buffer.from(v, "utf8");
  throw new TypeError(`expected bytes, got ${typeof v}`);
};
const str = (v: unknown): string => String(v);

function checkpointFromRow(r: Record<string, unknown>): CheckpointRow {
  return {
    threadId: str(r.thread_id),
    ns: str(r.ns),
    checkpointId: str(r.checkpoint_id),
    parentId: r.parent_id == null ? null : str(r.parent_id),
    type: str(r.type),
    checkpoint: asBytes(r.checkpoint),
    metadataType: str(r.metadata_type),
    metadata: asBytes(r.metadata),
  };
}

function blobFromRow(r: Record<string, unknown>): BlobRow {
  return {
    channel: str(r.channel),
    version: str(r.version),
    kind: str(r.kind) as BlobKind,
    anchor: str(r.anchor),
    base: r.base == null ? null : str(r.base),
    depth: Number(r.depth),
    items: Number(r.items),
    type: str(r.type),
    data: asBytes(r.data),
  };
}

const CHECKPOINT_COLUMNS = "thread_id, ns, checkpoint_id, parent_id, type, checkpoint, metadata_type, metadata";
/** Rows per multi-row statement (PostgreSQL takes at most 65535 parameters; SQLite 32766). */
const CHUNK = 500;

/** The SQL implementation of {@link SaverStorage} (SQLite and PostgreSQL). */
export class SqlSaverStorage<D extends SqlDriver = SqlDriver> implements SaverStorage {
  readonly name: string;
  /** The driver the store runs on (closed by {@link close}). */
  readonly driver: D;
  private readonly checkpoints: string;
  private readonly blobs: string;
  private readonly writes: string;

  /** @param driver - a driver set up with {@link langgraphMigrations}; the store owns it */
  constructor(driver: D) {
    this.driver = driver;
    this.name = driver.name;
    this.checkpoints = driver.table("langgraph_checkpoints");
    this.blobs = driver.table("langgraph_blobs");
    this.writes = driver.table("langgraph_writes");
  }

  async putCheckpoint(row: CheckpointRow, blobs: readonly BlobRow[]): Promise<void> {
    await this.driver.transaction(
      `cannot write checkpoint "${row.checkpointId}" of thread "${row.threadId}"`,
      row.threadId,
      async (query) => {
        for (let i = 0; i < blobs.length; i += CHUNK) {
          await this.insertBlobs(query, row, blobs.slice(i, i + CHUNK));
        }
        await query(
          `INSERT INTO ${this.checkpoints} (${CHECKPOINT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
           ON CONFLICT (thread_id, ns, checkpoint_id) DO UPDATE SET parent_id = excluded.parent_id,
             type = excluded.type, checkpoint = excluded.checkpoint,
             metadata_type = excluded.metadata_type, metadata = excluded.metadata`,
          [
            row.threadId,
            row.ns,
            row.checkpointId,
            row.parentId,
            row.type,
            bytes(row.checkpoint),
            row.metadataType,
            bytes(row.metadata),
          ],
        );
      },
    );
  }

  private async insertBlobs(query: SqlQuery, row: CheckpointRow, blobs: readonly BlobRow[]): Promise<void> {
    if (blobs.length === 0) return;
    const values: unknown[] = [row.threadId, row.ns];
    const tuples = blobs.map((b) => {
      const at = values.length;
      values.push(b.channel, b.version, b.kind, b.anchor, b.base, b.depth, b.items, b.type, bytes(b.data));
      return `($1, $2, ${Array.from({ length: 9 }, (_, i) => `$${at + i + 1}`).join(", ")})`;
    });
    await query(
      `INSERT INTO ${this.blobs} (thread_id, ns, channel, version, kind, anchor, base, depth, items, type, data)
       VALUES ${tuples.join(", ")} ON CONFLICT (thread_id, ns, channel, version) DO NOTHING`,
      values,
    );
  }

  async getCheckpoint(threadId: string, ns: string, checkpointId?: string): Promise<CheckpointRow | undefined> {
    const what = `cannot read checkpoint ${checkpointId === undefined ? "(latest)" : `"${checkpointId}"`} of thread "${threadId}"`;
    const r =
      checkpointId === undefined
        ? await this.driver.query(
            what,
            threadId,
            `SELECT ${CHECKPOINT_COLUMNS} FROM ${this.checkpoints} WHERE thread_id = $1 AND ns = $2
             ORDER BY checkpoint_id DESC LIMIT 1`,
            [threadId, ns],
          )
        : await this.driver.query(
            what,
            threadId,
            `SELECT ${CHECKPOINT_COLUMNS} FROM ${this.checkpoints} WHERE thread_id = $1 AND ns = $2 AND checkpoint_id = $3`,
            [threadId, ns, checkpointId],
          );
    const row = r.rows[0];
    return row === undefined ? undefined : checkpointFromRow(row);
  }

  async *listCheckpoints(query: CheckpointQuery): AsyncIterable<CheckpointRow> {
    const where: string[] = [];
    const values: unknown[] = [];
    const add = (sql: string, v: unknown) => {
      values.push(v);
      where.push(`${sql} $${values.length}`);
    };
    if (query.threadId !== undefined) add("thread_id =", query.threadId);
    if (query.ns !== undefined) add("ns =", query.ns);
    if (query.checkpointId !== undefined) add("checkpoint_id =", query.checkpointId);
    if (query.before !== undefined) add("checkpoint_id <", query.before);
    // Pages of PAGE rows (keyset on the ordering columns), so a long thread is never read whole into memory.
    const PAGE = 200;
    let left = query.limit ?? Number.POSITIVE_INFINITY;
    let after: [string, string, string] | undefined;
    while (left > 0) {
      const conds = [...where];
      const vals = [...values];
      if (after !== undefined) {
        vals.push(...after);
        const n = vals.length;
        conds.push(`(checkpoint_id, thread_id, ns) < ($${n - 2}, $${n - 1}, $${n})`);
      }
      const take = Math.min(PAGE, left);
      const r = await this.driver.query(
        "cannot list checkpoints",
        query.threadId,
        `SELECT ${CHECKPOINT_COLUMNS} FROM ${this.checkpoints}${conds.length > 0 ? ` WHERE ${conds.join(" AND ")}` : ""}
         ORDER BY checkpoint_id DESC, thread_id DESC, ns DESC LIMIT ${take}`,
        vals,
      );
      for (const raw of r.rows) {
        const row = checkpointFromRow(raw);
        left -= 1;
        yield row;
      }
      if (r.rows.length < take) return;
      const last = r.rows[r.rows.length - 1] as Record<string, unknown>;
      after = [str(last.checkpoint_id), str(last.thread_id), str(last.ns)];
    }
  }

  async getBlobs(
    threadId: string,
    ns: string,
    wanted: readonly { channel: string; version: string }[],
  ): Promise<BlobRow[]> {
    const out: BlobRow[] = [];
    for (let i = 0; i < wanted.length; i += CHUNK) {
      const part = wanted.slice(i, i + CHUNK);
      const values: unknown[] = [threadId, ns];
      const pairs = part.map((w) => {
        values.push(w.channel, w.version);
        return `($${values.length - 1}, $${values.length})`;
      });
      const r = await this.driver.query(
        `cannot read channel values of thread "${threadId}"`,
        threadId,
        // The wanted rows' anchors first, once (MATERIALIZED), then each chain by anchor: as a
        // correlated IN, PostgreSQL without fresh statistics re-scanned the thread's rows for every
        // row of the thread (quadratic: a 10,000-step thread hit the statement timeout).
        `WITH a AS MATERIALIZED (
           SELECT w.channel, w.anchor FROM ${this.blobs} w
           WHERE w.thread_id = $1 AND w.ns = $2 AND (w.channel, w.version) IN (${pairs.join(", ")}))
         SELECT b.channel, b.version, b.kind, b.anchor, b.base, b.depth, b.items, b.type, b.data
         FROM a JOIN ${this.blobs} b
           ON b.thread_id = $1 AND b.ns = $2 AND b.channel = a.channel AND b.anchor = a.anchor`,
        values,
      );
      for (const row of r.rows) out.push(blobFromRow(row));
    }
    return out;
  }

  async putWrites(threadId: string, ns: string, checkpointId: string, rows: readonly WriteRow[]): Promise<void> {
    if (rows.length === 0) return;
    await this.driver.transaction(
      `cannot write pending writes of checkpoint "${checkpointId}" of thread "${threadId}"`,
      threadId,
      async (query) => {
        for (const row of rows) {
          await query(
            `INSERT INTO ${this.writes} (thread_id, ns, checkpoint_id, task_id, idx, channel, task_path, type, data)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (thread_id, ns, checkpoint_id, task_id, idx) ${
               row.idx < 0
                 ? "DO UPDATE SET channel = excluded.channel, task_path = excluded.task_path, type = excluded.type, data = excluded.data"
                 : "DO NOTHING"
             }`,
            [threadId, ns, checkpointId, row.taskId, row.idx, row.channel, row.taskPath, row.type, bytes(row.data)],
          );
        }
      },
    );
  }

  async getWrites(threadId: string, ns: string, checkpointId: string): Promise<WriteRow[]> {
    const r = await this.driver.query(
      `cannot read pending writes of checkpoint "${checkpointId}" of thread "${threadId}"`,
      threadId,
      `SELECT task_id, idx, channel, task_path, type, data FROM ${this.writes}
       WHERE thread_id = $1 AND ns = $2 AND checkpoint_id = $3`,
      [threadId, ns, checkpointId],
    );
    return r.rows.map((w) => ({
      taskId: str(w.task_id),
      idx: Number(w.idx),
      channel: str(w.channel),
      taskPath: str(w.task_path),
      type: str(w.type),
      data: asBytes(w.data),
    }));
  }

  async deleteThread(threadId: string): Promise<void> {
    await this.driver.transaction(`cannot delete thread "${threadId}"`, threadId, async (query) => {
      for (const table of [this.writes, this.blobs, this.checkpoints]) {
        await query(`DELETE FROM ${table} WHERE thread_id = $1`, [threadId]);
      }
    });
  }

  async close(): Promise<void> {
    await this.driver.close();
  }
}
