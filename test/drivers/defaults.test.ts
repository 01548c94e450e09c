/**
 * One default per setting (issue 24 item 5): every SQLite component opens its file with the same
 * `synchronous` and `busy_timeout`, every PostgreSQL component without `url` or `DATABASE_URL`
 * reaches the same URL (not a `test` database), and the default files are one family
 * (`./.dumplingsAI_*`) — with a default file of an earlier release still found.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { DEFAULT_BASE_DIR, DEFAULT_DB_PATH } from "../../src/backends/registry.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import {
  DEFAULT_FILES,
  DEFAULT_POSTGRES_URL,
  defaultPostgresUrl,
  existingDefaultFile,
  SQLITE_BUSY_TIMEOUT_MS,
  SQLITE_SYNCHRONOUS,
} from "../../src/core/defaults.js";
import { InvalidOptionError } from "../../src/core/errors.js";
import { PostgresColdStore } from "../../src/durable/checkpoints/postgres.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { openPostgresSaverStorage } from "../../src/langgraph/storage-postgres.js";
import { DEFAULT_LANGGRAPH_SQLITE_PATH, openSqliteSaverStorage } from "../../src/langgraph/storage-sqlite.js";
import { DEFAULT_DB, DEFAULT_DIR } from "../../src/ops/backend.js";
import { DEFAULT_JOURNAL } from "../../src/ops/journal.js";
import { DEFAULT_WORKFLOW_STORE } from "../../src/ops/workflows.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-defaults-"));
const cwd = process.cwd();
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
afterEach(() => process.chdir(cwd));

type Db = { pragma(source: string, options?: { simple?: boolean }): unknown };
const Database = createRequire(import.meta.url)("better-sqlite3") as { prototype: Db };

/**
 * Opens a component and returns the `synchronous` and `busy_timeout` values it set on its own
 * connection (recorded from the driver's pragma calls: a session backend keeps its connection private).
 */
function pragmasOf(open: () => { close(): unknown }): { synchronous?: string; busyTimeout?: string } {
  const original = Database.prototype.pragma;
  const seen: { synchronous?: string; busyTimeout?: string } = {};
  Database.prototype.pragma = function (this: Db, source: string, options?: { simple?: boolean }) {
    const m = /^\s*(synchronous|busy_timeout)\s*=\s*(\S+)\s*$/i.exec(source);
    if (m) seen[m[1]!.toLowerCase() === "synchronous" ? "synchronous" : "busyTimeout"] ??= m[2]!.toUpperCase();
    return original.call(this, source, options);
  };
  try {
    const component = open();
    void component.close();
  } finally {
    Database.prototype.pragma = original;
  }
  return seen;
}

describe("SQLite: one synchronous and one busy timeout for every component", () => {
  it("sessions, journal, workflow checkpoints and the LangGraph store open with synchronous = FULL and 5000 ms", () => {
    const file = (name: string) => path.join(tmp, `${name}.db`);
    const opened = {
      sessions: pragmasOf(() => new SQLiteBackend({ dbPath: file("sessions") })),
      journal: pragmasOf(() => new SqliteJournal({ path: file("journal") })),
      checkpoints: pragmasOf(() => new SqliteColdStore({ path: file("checkpoints") })),
      langgraph: pragmasOf(() => openSqliteSaverStorage({ path: file("langgraph") })),
    };
    const expected = { synchronous: SQLITE_SYNCHRONOUS, busyTimeout: String(SQLITE_BUSY_TIMEOUT_MS) };
    expect(expected).toEqual({ synchronous: "FULL", busyTimeout: "5000" });
    for (const [component, seen] of Object.entries(opened))
      expect({ component, ...seen }).toEqual({ component, ...expected });
  });

  it("an explicit option still wins", () => {
    const seen = pragmasOf(
      () => new SQLiteBackend({ dbPath: path.join(tmp, "explicit.db"), synchronous: "NORMAL", busyTimeoutMs: 250 }),
    );
    expect(seen).toEqual({ synchronous: "NORMAL", busyTimeout: "250" });
  });
});

describe("PostgreSQL: one default URL, not a test database", () => {
  const saved = { DATABASE_URL: process.env.DATABASE_URL, PGUSER: process.env.PGUSER, USER: process.env.USER };
  beforeEach(() => {
    // the default URL names no user: the driver's rule takes PGUSER, else USER (unset in many containers)
    process.env.PGUSER = "postgres";
  });
  afterEach(() => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  });

  it("a URL without a user, where neither PGUSER nor USER is set, is refused at construction, naming the URL and the fix", () => {
    delete process.env.DATABASE_URL;
    delete process.env.PGUSER;
    delete process.env.USER;
    for (const make of [
      () => new PostgresJournal(),
      () => new PostgresBackend({ url: "postgres://:pw@127.0.0.1/x" }),
    ]) {
      const e = (() => {
        try {
          make();
        } catch (error) {
          return error;
        }
        return undefined;
      })();
      expect(e).toBeInstanceOf(InvalidOptionError);
      expect(String((e as Error).message)).toMatch(/postgres:\/\/127\.0\.0\.1[^ ]* names no user.*PGUSER/);
      expect(String((e as Error).message)).not.toContain("pw");
    }
    process.env.USER = "someone";
    return new PostgresJournal().close();
  });

  it("without url or DATABASE_URL every component uses postgres://127.0.0.1:5432/postgres", async () => {
    delete process.env.DATABASE_URL;
    expect(defaultPostgresUrl()).toBe(DEFAULT_POSTGRES_URL);
    expect(new URL(DEFAULT_POSTGRES_URL).pathname).toBe("/postgres");
    const urlOf = (pool: unknown) => (pool as { options: { connectionString: string } }).options.connectionString;
    const journal = new PostgresJournal();
    const cold = new PostgresColdStore();
    const langgraph = openPostgresSaverStorage();
    const backend = new PostgresBackend();
    try {
      expect([urlOf(journal.pool), urlOf(cold.pool), urlOf(langgraph.driver.pool)]).toEqual([
        DEFAULT_POSTGRES_URL,
        DEFAULT_POSTGRES_URL,
        DEFAULT_POSTGRES_URL,
      ]);
      expect(backend.storeId).toContain("127.0.0.1:5432/postgres");
    } finally {
      await Promise.all([journal.close(), cold.close(), langgraph.close(), backend.close()]);
    }
  });

  it("DATABASE_URL, when set, is the default of every component", async () => {
    process.env.DATABASE_URL = "postgres://app@db.internal:6543/agents";
    expect(defaultPostgresUrl()).toBe("postgres://app@db.internal:6543/agents");
    const journal = new PostgresJournal();
    try {
      expect((journal.pool as unknown as { options: { connectionString: string } }).options.connectionString).toBe(
        "postgres://app@db.internal:6543/agents",
      );
    } finally {
      await journal.close();
    }
  });
});

describe("default files: one family", () => {
  it("every default file name is ./.dumplingsAI_*, and each component reads the one list", () => {
    for (const file of Object.values(DEFAULT_FILES))
      expect(file).toMatch(/^\.\/\.dumplingsAI_[a-z]+(\.db|\/[a-z]+\.db)?$/);
    expect([DEFAULT_BASE_DIR, DEFAULT_DB_PATH, DEFAULT_DIR, DEFAULT_DB]).toEqual([
      DEFAULT_FILES.sessionsDir,
      DEFAULT_FILES.sessionsDb,
      DEFAULT_FILES.sessionsDir,
      DEFAULT_FILES.sessionsDb,
    ]);
    expect(DEFAULT_JOURNAL).toBe("sqlite:./.dumplingsAI_durable.db");
    expect(DEFAULT_WORKFLOW_STORE).toBe("sqlite:./.dumplingsAI_workflows/workflows.db");
    expect(DEFAULT_LANGGRAPH_SQLITE_PATH).toBe("./.dumplingsAI_langgraph.db");
  });

  it("a default journal of an earlier release (./.dumplings-durable.db) is still found, and used while the new one is absent", async () => {
    const dir = path.join(tmp, "legacy-journal");
    mkdirSync(dir);
    process.chdir(dir);
    const old = new SqliteJournal({ path: "./.dumplings-durable.db" });
    await old.createRun({ runId: "kept-run", workflow: "w", input: null });
    await old.close();
    expect(existingDefaultFile("./.dumplingsAI_durable.db")).toBe(path.join(dir, ".dumplings-durable.db"));
    const journal = new SqliteJournal();
    try {
      expect((await journal.getRun("kept-run"))?.runId).toBe("kept-run");
      expect(existsSync(path.join(dir, ".dumplingsAI_durable.db"))).toBe(false);
    } finally {
      await journal.close();
    }
  });

  it("a path given by name is opened as given, even the new default's name beside an old file", async () => {
    const dir = path.join(tmp, "explicit-journal");
    mkdirSync(dir);
    process.chdir(dir);
    const old = new SqliteJournal({ path: "./.dumplings-durable.db" });
    await old.createRun({ runId: "old-run", workflow: "w", input: null });
    await old.close();
    const named = new SqliteJournal({ path: "./.dumplingsAI_durable.db" });
    try {
      expect(await named.getRun("old-run")).toBeUndefined();
      expect(existsSync(path.join(dir, ".dumplingsAI_durable.db"))).toBe(true);
    } finally {
      await named.close();
    }
  });

  it("without an old file the new default is created; once it exists it wins over an old one", async () => {
    const dir = path.join(tmp, "fresh-journal");
    mkdirSync(dir);
    process.chdir(dir);
    const journal = new SqliteJournal();
    await journal.close();
    expect(existsSync(path.join(dir, ".dumplingsAI_durable.db"))).toBe(true);
    await new SqliteJournal({ path: "./.dumplings-durable.db" }).close();
    expect(existingDefaultFile("./.dumplingsAI_durable.db")).toBe("./.dumplingsAI_durable.db");
    expect(existingDefaultFile(path.join(dir, "other.db"))).toBe(path.join(dir, "other.db"));
  });

  it("the LangGraph store's old default file is found the same way", async () => {
    const dir = path.join(tmp, "legacy-langgraph");
    mkdirSync(dir);
    process.chdir(dir);
    await openSqliteSaverStorage({ path: "./.dumplings-langgraph.db" }).close();
    await openSqliteSaverStorage().close();
    expect(existsSync(path.join(dir, ".dumplingsAI_langgraph.db"))).toBe(false);
  });
});
