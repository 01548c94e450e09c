/**
 * `create: false` on the SQLite and PostgreSQL drivers, through the
 * components a library user opens (journal, cold store, session backend): an
 * existing store opens as usual; a missing file, a missing schema, or a store
 * without the component's tables is a `StoreNotFoundError` (a
 * `BackendError`) and nothing — file, directory, schema, ledger or table — is
 * created.
 */
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { BackendError, FormatError } from "../../src/core/errors.js";
import { StoreNotFoundError } from "../../src/drivers/sql.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const postgresReason = await postgresSkipReason();
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-create-false-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const tablesOf = (file: string) => {
  const db = new Database(file, { readonly: true });
  try {
    return (
      db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as { name: string }[]
    ).map((r) => r.name);
  } finally {
    db.close();
  }
};

describe("SQLite, create: false", () => {
  it("an existing file without the component's tables is refused unchanged: journal mode, size and bytes", () => {
    const foreign = path.join(tmp, "foreign.db");
    const db = new Database(foreign);
    db.pragma("journal_mode = DELETE");
    db.exec("CREATE TABLE foo (x)");
    db.close();
    const before = readFileSync(foreign);
    for (const open of [
      () => new SQLiteBackend({ dbPath: foreign, create: false }),
      () => new SqliteJournal({ path: foreign, create: false }),
      () => new SqliteColdStore({ path: foreign, create: false }),
    ]) {
      expect(open).toThrow(StoreNotFoundError);
    }
    expect(readFileSync(foreign).equals(before)).toBe(true);
    const check = new Database(foreign, { readonly: true });
    expect(check.pragma("journal_mode", { simple: true })).toBe("delete");
    check.close();
    expect(existsSync(`${foreign}-wal`)).toBe(false);

    const empty = path.join(tmp, "empty.db");
    writeFileSync(empty, "");
    expect(() => new SQLiteBackend({ dbPath: empty, create: false })).toThrow(/an empty file/);
    expect(statSync(empty).size).toBe(0);

    const text = path.join(tmp, "notes.txt");
    writeFileSync(text, "not a database, just some notes that are long enough to fill a header page\n".repeat(20));
    const textBefore = readFileSync(text);
    expect(() => new SQLiteBackend({ dbPath: text, create: false })).toThrow(FormatError);
    expect(readFileSync(text).equals(textBefore)).toBe(true);
  });

  it("a missing file is StoreNotFoundError, and neither it nor its directory is created", () => {
    const file = path.join(tmp, "nope", "journal.db");
    let error: unknown;
    try {
      new SqliteJournal({ path: file, create: false });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(StoreNotFoundError);
    expect(error).toBeInstanceOf(BackendError);
    expect((error as StoreNotFoundError).store).toBe(file);
    expect((error as Error).message).toMatch(/no such file \(opened with create: false, so nothing was created\)/);
    expect(existsSync(path.dirname(file))).toBe(false);
    expect(() => new SqliteColdStore({ path: file, create: false })).toThrow(StoreNotFoundError);
    expect(() => new SQLiteBackend({ path: file, create: false })).toThrow(StoreNotFoundError);
  });

  it("a file without the component's tables is refused and gains none; an existing store opens", async () => {
    const file = path.join(tmp, "journal.db");
    const journal = new SqliteJournal({ path: file });
    await journal.close();
    const before = tablesOf(file);
    expect(() => new SQLiteBackend({ path: file, create: false })).toThrow(/no sessions tables in this file/);
    expect(tablesOf(file)).toEqual(before);
    // A session file has no journal: neither the journal nor the workflow store (a journal's runs) opens it.
    const sessions = path.join(tmp, "sessions.db");
    const backend = new SQLiteBackend({ path: sessions });
    await backend.listKeys();
    await backend.close();
    const sessionTables = tablesOf(sessions);
    expect(() => new SqliteColdStore({ path: sessions, create: false })).toThrow(/no journal tables in this file/);
    expect(() => new SqliteJournal({ path: sessions, create: false })).toThrow(/no journal tables in this file/);
    expect(tablesOf(sessions)).toEqual(sessionTables);
    const reopened = new SqliteJournal({ path: file, create: false });
    expect(await reopened.listRuns()).toEqual([]);
    await reopened.close();
    // The workflow store is the journal's: it opens the journal's file.
    const cold = new SqliteColdStore({ path: file, create: false });
    try {
      await cold.init();
      expect(await cold.summary("none")).toBeUndefined();
    } finally {
      await cold.close();
    }
    expect(tablesOf(file)).toEqual(before);
  });
});

describe.skipIf(postgresReason)("PostgreSQL, create: false", () => {
  const schema = `create_false_${randomBytes(4).toString("hex")}`;
  const query = async (text: string, values: unknown[] = []) => {
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    try {
      return (await client.query(text, values)).rows;
    } finally {
      await client.end();
    }
  };
  afterAll(async () => {
    await query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  });

  it("a missing schema is StoreNotFoundError at the first call and is not created", async () => {
    const backend = new PostgresBackend({ url: DATABASE_URL, schema, create: false });
    try {
      await expect(backend.listKeys()).rejects.toThrow(StoreNotFoundError);
      await expect(backend.listKeys()).rejects.toThrow(/postgres:create_false_\w+: no such schema/);
    } finally {
      await backend.close();
    }
    expect(await query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema])).toEqual([]);
  });

  it("a database that does not exist is StoreNotFoundError too (a read command's exit 3), not a driver error", async () => {
    const url = new URL(DATABASE_URL);
    url.pathname = `/no_such_db_${randomBytes(4).toString("hex")}`;
    const backend = new PostgresBackend({ url: url.href, schema, create: false });
    try {
      await expect(backend.listKeys()).rejects.toThrow(StoreNotFoundError);
      await expect(backend.listKeys()).rejects.toThrow(/no such database/);
    } finally {
      await backend.close();
    }
  });

  it("a schema without the component's tables gains none; an existing store opens", async () => {
    const journal = new PostgresJournal({ url: DATABASE_URL, schema });
    await journal.listRuns();
    await journal.close();
    const tables = () => query("SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1", [schema]);
    const ledger = () => query(`SELECT component, version FROM ${schema}.dumplings_migrations ORDER BY 1, 2`);
    const before = { tables: await tables(), ledger: await ledger() };
    const backend = new PostgresBackend({ url: DATABASE_URL, schema, create: false });
    try {
      await expect(backend.listKeys()).rejects.toThrow(/no sessions tables in this schema/);
    } finally {
      await backend.close();
    }
    expect({ tables: await tables(), ledger: await ledger() }).toEqual(before);
    const reopened = new PostgresJournal({ url: DATABASE_URL, schema, create: false });
    try {
      expect(await reopened.listRuns()).toEqual([]);
    } finally {
      await reopened.close();
    }
  });
});
