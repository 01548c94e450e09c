/**
 * The tables of `SQLiteBackend` (`sqlite.ts`): their migrations (component `sessions` of
 * the file's ledger), the statements the backend prepares on them, and the reads of the layouts of
 * earlier builds (the seed's JSONL `history` column, the original design's snake_case rows).
 *
 * ## Schema (`PRAGMA user_version = 3`)
 *
 * ```sql
 * CREATE TABLE sessions (
 *   key TEXT PRIMARY KEY,
 *   meta TEXT NOT NULL,       -- JSON of state.meta
 *   config TEXT NOT NULL,     -- '': in session_parts; a row of an older build holds the JSON of state.config here
 *   state TEXT NOT NULL,      -- '': in session_parts; likewise the JSON of state.state
 *   history TEXT,             -- NULL; only legacy (seed) rows hold their whole history here as JSONL
 *   saved_at TEXT NOT NULL,   -- UTC ISO-8601 time of the last write, to within 1 s (retention/gc uses it)
 *   revision INTEGER NOT NULL DEFAULT 1,  -- +1 per write, for compare-and-set
 *   message_count INTEGER,    -- rows in `messages`; NULL marks a legacy row
 *   sid INTEGER               -- the session's number in `messages` ids (1, 2, …; NULL only on a legacy row)
 * );
 * CREATE INDEX sessions_saved_at ON sessions (saved_at);  -- for gc()
 * CREATE UNIQUE INDEX sessions_sid ON sessions (sid);
 * CREATE TABLE messages (      -- one row per history message
 *   id INTEGER PRIMARY KEY,    -- (sid << 32) | seq, seq = 0-based index in the history
 *   body                       -- TEXT: the message's JSON; BLOB: the same JSON gzip-compressed
 * );
 * CREATE TABLE session_parts (  -- config and state, out of the row every save rewrites
 *   session_key TEXT NOT NULL, part TEXT NOT NULL CHECK (part IN ('config', 'state')),
 *   body TEXT NOT NULL,       -- the part's JSON
 *   PRIMARY KEY (session_key, part)
 * );
 * CREATE TABLE dumplings_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
 *   -- 'revision_floor': highest revision ever deleted (re-created keys start above it)
 * ```
 *
 * Why one integer key for `messages`: an append then writes one B-tree, the
 * table's (a key of `(session_key, seq)` is a second B-tree, its index, whose
 * leaf every append dirtied too), and a session's messages are one contiguous
 * range of it, appended at its end like the rows of a plain log table. Rows up
 * to ~4 KB stay in their leaf page (a `WITHOUT ROWID` table would spill rows
 * over ~1 KB to overflow pages). Schema 2 (`messages` keyed by `(session_key,
 * seq)`) is migrated when first opened, in one transaction.
 *
 * Why `session_parts`: SQLite rewrites a whole record (or at best reads and
 * compares it, overflow pages included) when any of its columns changes, and
 * every save changes the session row (meta, revision, count, time). A 50 MB
 * prompt in that row made each one-message save cost 110–270 ms of CPU; beside
 * it, the prompt is written only when it changes.
 *
 * The seed's database (one `sessions` table, `user_version` 0, whole history
 * as JSONL in `history`) is migrated when first opened, in one transaction:
 * columns are added and every history moves into `messages` line by line.
 *
 * @module
 */
import { BackendError, FormatError } from "../core/errors.js";
import { fromOriginalRecord, isOriginalRecord } from "../core/original.js";
import type { SqliteMigrations } from "../drivers/sqlite.js";
import type * as BetterSqlite3 from "../drivers/sqlite-types.js";

/** `PRAGMA user_version` of the schema this build writes. */
export const SQLITE_SCHEMA_VERSION = 3;

/** Messages per page of a history stream. */
export const PAGE_SIZE = 512;

/**
 * A message's id in `messages` is `(sid << 32) | seq`: fewer than ID_SPAN (2^32) messages a session,
 * 2^31 sessions (ids stay below 2^63; SQLite computes them, JavaScript never holds one).
 */
export const ID_SPAN = 4294967296;

/** A JSON object (not null, not an array). */
export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export interface HeadRow {
  revision: number;
  message_count: number | null;
  /** The session's number in `messages` ids (`sid * 2^32 + seq`); null only on a legacy row. */
  sid: number | null;
}
/** The write's view of a row: whether its config and state live in `session_parts` (their column holds `''`). */
export interface WriteHeadRow extends HeadRow {
  config_apart: 0 | 1;
  state_apart: 0 | 1;
}
export interface SessionRow extends HeadRow {
  meta: string;
  /** The stored config text (from `session_parts` when the row's column holds `''`); null when that part is missing. */
  config: string | null;
  state: string | null;
  history: string | null;
}
export type Body = string | Buffer;

export interface Statements {
  head: BetterSqlite3.Statement<[string], HeadRow>;
  writeHead: BetterSqlite3.Statement<[string], WriteHeadRow>;
  headMeta: BetterSqlite3.Statement<[string], HeadRow & { meta: string }>;
  row: BetterSqlite3.Statement<[string], SessionRow>;
  /** (sid, sid, count) */
  bodies: BetterSqlite3.Statement<[Sid, Sid, number], Body>;
  /** (sid, from, sid, to): [seq, body] rows */
  page: BetterSqlite3.Statement<[Sid, number, Sid, number], [number, Body]>;
  bodyAt: BetterSqlite3.Statement<[Sid, number], Body>;
  insert: BetterSqlite3.Statement<[Sid, number, Body]>;
  /** (sid, from, sid) */
  deleteFrom: BetterSqlite3.Statement<[Sid, number, Sid]>;
  /** (sid, sid) */
  deleteMessages: BetterSqlite3.Statement<[Sid, Sid]>;
  nextSid: BetterSqlite3.Statement<[], number>;
  deleteSession: BetterSqlite3.Statement<[string]>;
  putPart: BetterSqlite3.Statement<[string, "config" | "state", string]>;
  deleteParts: BetterSqlite3.Statement<[string]>;
  deleteOrphanParts: BetterSqlite3.Statement<[]>;
  insertSession: BetterSqlite3.Statement<[string, string, string, number, number, number]>;
  update: BetterSqlite3.Statement<[string, string, number, number, number, string]>;
  appendHead: BetterSqlite3.Statement<[string, number, number, string, number, number, number]>;
  appendHeadAt: BetterSqlite3.Statement<[string, string, number, number, string, number, number, number]>;
  keys: BetterSqlite3.Statement<[], string>;
  floor: BetterSqlite3.Statement<[], number>;
  raiseFloor: BetterSqlite3.Statement<[number]>;
  older: BetterSqlite3.Statement<[string], { key: string; revision: number; sid: Sid }>;
}

/** A session's number in `messages` ids; null on a legacy row (which has no message rows). */
export type Sid = number | null;

export type HeadMetaRow = HeadRow & { meta: string };
/** The first read of a history stream: the head and the first page, from one snapshot. */
export interface FirstPage {
  head: HeadMetaRow | undefined;
  rows: [number, Body][];
}

/** The parts of a `sessions` row {@link originalRow} reads. */
interface RowTexts {
  meta: string;
  config?: string | null;
  state?: string | null;
  history?: string | null;
  message_count: number | null;
}

function jsonObjectOrUndefined(text: string | null | undefined): Record<string, unknown> | undefined {
  if (text === undefined) return {};
  if (text === null) return undefined;
  try {
    const v: unknown = JSON.parse(text);
    return isObject(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A row written by the original design (dumplingsAI 0.4.0: `meta`, `config`,
 * `state` as snake_case JSON) with those texts in the current shape, so every
 * read path checks and returns it like any other row; other rows are returned
 * as they are. The stored row is not changed (the next save writes the
 * current shape). A row that is not JSON is left to the usual checks.
 *
 * @throws {FormatError} for an unknown `meta`/`config` key, or a `message_count`
 *   that differs from the stored history's length
 */
export function originalRow<R extends RowTexts>(row: R | undefined, key: string, file: string): R | undefined {
  if (row === undefined || (!row.meta.includes('"format_version"') && !row.meta.includes('"agent_uuid"'))) return row;
  const meta = jsonObjectOrUndefined(row.meta);
  if (meta === undefined || !isOriginalRecord(meta)) return row;
  const config = jsonObjectOrUndefined(row.config);
  const state = jsonObjectOrUndefined(row.state);
  if (config === undefined || state === undefined) return row;
  const label = `stored state of key ${JSON.stringify(key)}`;
  let mapped: ReturnType<typeof fromOriginalRecord>;
  try {
    mapped = fromOriginalRecord({ meta, config, state }, label);
  } catch (cause) {
    throw new FormatError((cause as Error).message, { file, cause });
  }
  const count =
    row.message_count ?? (row.history ? splitLegacyHistory(row.history).length : row.history === undefined ? -1 : 0);
  const stored = mapped.meta.messageCount as number | undefined;
  if (stored === undefined && count >= 0) mapped.meta.messageCount = count;
  else if (count >= 0 && stored !== count) {
    throw new FormatError(
      `${label} is corrupt: meta.message_count is ${String(stored)} but the history holds ${count} messages`,
      { file },
    );
  }
  const out = { ...row, meta: JSON.stringify(mapped.meta) };
  if (row.config !== undefined) out.config = JSON.stringify(mapped.config);
  if (row.state !== undefined) out.state = JSON.stringify(mapped.state);
  return out;
}

/** Splits a legacy `history` column: JSONL (the seed's layout), or a JSON array. */
export function splitLegacyHistory(text: string): string[] {
  const trimmed = text.trimStart();
  if (trimmed.startsWith("[")) {
    try {
      const arr = JSON.parse(trimmed) as unknown;
      if (Array.isArray(arr)) return arr.map((m) => JSON.stringify(m));
    } catch {
      // not a JSON array: fall through to JSONL, whose line parser reports the bad line
    }
  }
  return text.split("\n").filter((line) => line.trim() !== "");
}

/** A session's head with its meta (the history stream's first read). */
export const HEAD_META_SQL = "SELECT revision, message_count, sid, meta FROM sessions WHERE key = ?";
/** (sid, from, sid, to): the `[seq, body]` rows of messages `from` to `to - 1` (see `prepare`). */
export const PAGE_SQL =
  "SELECT id & 4294967295, body FROM messages WHERE id >= ((? << 32) | ?) AND id < ((? << 32) | ?) ORDER BY id";

/** The head of `key` and its first page (at most `PAGE_SIZE` messages), through one connection's statements. */
export function firstPage(
  s: {
    headMeta: BetterSqlite3.Statement<[string], HeadMetaRow>;
    page: BetterSqlite3.Statement<[Sid, number, Sid, number], [number, Body]>;
  },
  key: string,
): FirstPage {
  const head = s.headMeta.get(key);
  const count = head?.message_count;
  const rows =
    head !== undefined && typeof count === "number" && count > 0
      ? s.page.all(head.sid, 0, head.sid, Math.min(count, PAGE_SIZE))
      : [];
  return { head, rows };
}

export function prepare(db: BetterSqlite3.Database): Statements {
  return {
    head: db.prepare("SELECT revision, message_count, sid FROM sessions WHERE key = ?"),
    writeHead: db.prepare(
      "SELECT revision, message_count, sid, config = '' AS config_apart, state = '' AS state_apart FROM sessions WHERE key = ?",
    ),
    headMeta: db.prepare(HEAD_META_SQL),
    // A column holding '' means "in session_parts"; any other text (a row of an older build) is the part itself.
    row: db.prepare(
      `SELECT meta,
        CASE WHEN config = '' THEN (SELECT body FROM session_parts WHERE session_key = sessions.key AND part = 'config')
          ELSE config END AS config,
        CASE WHEN state = '' THEN (SELECT body FROM session_parts WHERE session_key = sessions.key AND part = 'state')
          ELSE state END AS state,
        history, revision, message_count, sid
      FROM sessions WHERE key = ?`,
    ),
    // A message's id is `(sid << 32) | seq`: a session's messages are the id range [sid << 32,
    // (sid + 1) << 32), in order. SQLite's bit operators work on 64-bit integers (better-sqlite3 binds a
    // number as a REAL; `<<` and `|` make it an integer). A NULL sid (a legacy row) matches no id.
    // Bounded to [0, message_count): with ids unique, `count === message_count` then means no gap.
    bodies: db
      .prepare<[Sid, Sid, number], Body>(
        "SELECT body FROM messages WHERE id >= (? << 32) AND id < ((? << 32) | ?) ORDER BY id",
      )
      .pluck(),
    page: db.prepare<[Sid, number, Sid, number], [number, Body]>(PAGE_SQL).raw(),
    bodyAt: db.prepare<[Sid, number], Body>("SELECT body FROM messages WHERE id = ((? << 32) | ?)").pluck(),
    insert: db.prepare("INSERT INTO messages (id, body) VALUES ((? << 32) | ?, ?)"),
    deleteFrom: db.prepare("DELETE FROM messages WHERE id >= ((? << 32) | ?) AND id < ((? + 1) << 32)"),
    deleteMessages: db.prepare("DELETE FROM messages WHERE id >= (? << 32) AND id < ((? + 1) << 32)"),
    nextSid: db.prepare<[], number>("SELECT COALESCE(MAX(sid), 0) + 1 FROM sessions").pluck(),
    deleteSession: db.prepare("DELETE FROM sessions WHERE key = ?"),
    putPart: db.prepare(
      `INSERT INTO session_parts (session_key, part, body) VALUES (?, ?, ?)
       ON CONFLICT (session_key, part) DO UPDATE SET body = excluded.body`,
    ),
    deleteParts: db.prepare("DELETE FROM session_parts WHERE session_key = ?"),
    deleteOrphanParts: db.prepare(
      "DELETE FROM session_parts WHERE NOT EXISTS (SELECT 1 FROM sessions WHERE key = session_parts.session_key)",
    ),
    insertSession: db.prepare(
      `INSERT INTO sessions (key, meta, config, state, history, saved_at, revision, message_count, sid)
       VALUES (?, ?, '', '', NULL, ?, ?, ?, ?)`,
    ),
    update: db.prepare(
      `UPDATE sessions SET meta = ?, config = '', state = '', history = NULL, saved_at = ?, revision = ?,
       message_count = ?, sid = ? WHERE key = ?`,
    ),
    appendHead: db.prepare(
      `UPDATE sessions SET meta = ?, revision = ?, message_count = ?
       WHERE key = ? AND revision = ? AND message_count = ? AND sid = ? AND config = '' AND state = ''`,
    ),
    appendHeadAt: db.prepare(
      `UPDATE sessions SET meta = ?, saved_at = ?, revision = ?, message_count = ?
       WHERE key = ? AND revision = ? AND message_count = ? AND sid = ? AND config = '' AND state = ''`,
    ),
    keys: db.prepare<[], string>("SELECT key FROM sessions").pluck(),
    floor: db.prepare<[], number>("SELECT value FROM dumplings_meta WHERE name = 'revision_floor'").pluck(),
    raiseFloor: db.prepare(
      `INSERT INTO dumplings_meta (name, value) VALUES ('revision_floor', ?)
       ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)`,
    ),
    older: db.prepare("SELECT key, revision, sid FROM sessions WHERE saved_at < ?"),
  };
}

/**
 * The session tables' migrations (component `sessions` in the file's ledger,
 * run by the driver in one IMMEDIATE transaction, safe when several processes
 * open the file at once). Version 1 creates the schema, or migrates the seed's
 * single-table layout (user_version 0). A file written by dumplings-ai 0.1
 * (user_version 1, no ledger) is adopted. Version 2 adds `session_parts`, which
 * holds config and state out of the session row; existing rows keep theirs in
 * their columns until their next save moves them (a column holding `''` means
 * "in `session_parts`", any other text is the part itself), so opening a big
 * file stays cheap and a process of an older build still writing rows in the
 * old shape is read right. `user_version` becomes 2: a 0.1 build, which cannot
 * read split rows, refuses the file instead of misreading it. Version 3 moves
 * `messages` from a `(session_key, seq)` key (a table and its index: two
 * B-trees written by every append) to one integer key, `(sid << 32) | seq`,
 * with `sid` a new column of `sessions`: every message row is copied once, in
 * the migration's transaction. `user_version` becomes 3; a build of schema 2
 * refuses the file (its ledger holds a newer version) instead of writing rows
 * in the old table, which no longer exists.
 */
export const SESSION_MIGRATIONS: SqliteMigrations = {
  component: "sessions",
  // The original design's single `sessions` table: migrated (not refused) by a read-only open.
  present: (db) =>
    db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sessions'").get() !== undefined,
  adopt(db) {
    const version = Number(db.pragma("user_version", { simple: true }));
    if (version > SQLITE_SCHEMA_VERSION) {
      throw new BackendError(
        "sqlite",
        `database ${JSON.stringify(db.name)} has schema version ${version}, newer than this build supports (${SQLITE_SCHEMA_VERSION}); upgrade dumplings-ai`,
      );
    }
    return version;
  },
  migrations: [
    { version: 1, name: "sessions and messages", up: createOrMigrateSeed },
    {
      version: 2,
      name: "config and state beside the session row",
      up: [
        `CREATE TABLE IF NOT EXISTS session_parts (
          session_key TEXT NOT NULL, part TEXT NOT NULL CHECK (part IN ('config', 'state')), body TEXT NOT NULL,
          PRIMARY KEY (session_key, part))`,
        "PRAGMA user_version = 2",
      ],
    },
    {
      version: 3,
      name: "messages keyed by one integer, (sid << 32) | seq",
      up: [
        // Every row gets a distinct number (its rowid, unique now); new sessions take MAX(sid) + 1.
        "ALTER TABLE sessions ADD COLUMN sid INTEGER",
        "UPDATE sessions SET sid = rowid",
        "CREATE UNIQUE INDEX sessions_sid ON sessions (sid)",
        "CREATE TABLE messages_by_id (id INTEGER PRIMARY KEY, body)",
        // Rows no session owns, or outside [0, 2^32), were never readable: they are not carried over.
        `INSERT INTO messages_by_id (id, body)
          SELECT (s.sid << 32) | m.seq, m.body FROM messages AS m JOIN sessions AS s ON s.key = m.session_key
          WHERE m.seq >= 0 AND m.seq < ${ID_SPAN} ORDER BY 1`,
        "DROP TABLE messages",
        "ALTER TABLE messages_by_id RENAME TO messages",
        "PRAGMA user_version = 3",
      ],
    },
  ],
};

function createOrMigrateSeed(db: BetterSqlite3.Database): void {
  {
    db.exec(`CREATE TABLE IF NOT EXISTS sessions (
      key TEXT PRIMARY KEY, meta TEXT NOT NULL, config TEXT NOT NULL, state TEXT NOT NULL, history TEXT,
      saved_at TEXT NOT NULL, revision INTEGER NOT NULL DEFAULT 1, message_count INTEGER)`);
    const columns = new Set((db.pragma("table_info(sessions)") as { name: string }[]).map((c) => c.name));
    if (!columns.has("revision")) db.exec("ALTER TABLE sessions ADD COLUMN revision INTEGER NOT NULL DEFAULT 1");
    if (!columns.has("message_count")) db.exec("ALTER TABLE sessions ADD COLUMN message_count INTEGER");
    db.exec(`CREATE TABLE IF NOT EXISTS messages (
      session_key TEXT NOT NULL, seq INTEGER NOT NULL, body, PRIMARY KEY (session_key, seq))`);
    db.exec("CREATE TABLE IF NOT EXISTS dumplings_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID");
    db.exec("CREATE INDEX IF NOT EXISTS sessions_saved_at ON sessions (saved_at)");
    // Move legacy JSONL histories into `messages`, verbatim (a corrupt line is reported when that key is loaded).
    const legacy = db
      .prepare<[], { key: string; history: string | null; saved_at: string | null }>(
        "SELECT key, history, saved_at FROM sessions WHERE message_count IS NULL",
      )
      .all();
    const insert = db.prepare("INSERT OR REPLACE INTO messages (session_key, seq, body) VALUES (?, ?, ?)");
    const update = db.prepare("UPDATE sessions SET history = NULL, message_count = ?, saved_at = ? WHERE key = ?");
    for (const row of legacy) {
      const lines = row.history ? splitLegacyHistory(row.history) : [];
      lines.forEach((line, i) => {
        insert.run(row.key, i, line);
      });
      const t = row.saved_at ? new Date(row.saved_at) : new Date();
      update.run(lines.length, Number.isNaN(t.getTime()) ? new Date().toISOString() : t.toISOString(), row.key);
    }
    db.pragma("user_version = 1"); // migration 2 raises it
  }
}
