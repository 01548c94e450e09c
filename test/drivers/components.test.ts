/**
 * A driver that keeps several components' tables (an array of migration sets): each is
 * versioned in the ledger under its own name; the first decides `create: false`, the others
 * are added to a store that has it. On a real SQLite file and a real PostgreSQL schema.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { PostgresDriver } from "../../src/drivers/postgres.js";
import { StoreNotFoundError } from "../../src/drivers/sql.js";
import { SqliteDriver } from "../../src/drivers/sqlite.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const set = (component: string, table: string, pgSchema: boolean) => ({
  component,
  migrations: [
    { version: 1, name: `${table} table`, up: [`CREATE TABLE ${pgSchema ? "{s}." : ""}${table} (x INTEGER)`] },
  ],
});

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-components-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("SQLite: several components on one driver", () => {
  it("creates each, adds a new one to an existing store opened with create: false, refuses a missing first one", async () => {
    const file = path.join(tmp, "c.db");
    const first = new SqliteDriver("t", { path: file }, [set("main", "main_t", false), set("extra", "extra_t", false)]);
    const ledger = () =>
      first.db.prepare("SELECT component, version FROM dumplings_migrations ORDER BY component").all();
    expect(ledger()).toEqual([
      { component: "extra", version: 1 },
      { component: "main", version: 1 },
    ]);
    const later = new SqliteDriver("t", { path: file, create: false }, [
      set("main", "main_t", false),
      set("added", "added_t", false),
    ]);
    expect(ledger()).toContainEqual({ component: "added", version: 1 });
    await later.close();
    expect(() => new SqliteDriver("t", { path: file, create: false }, [set("absent", "absent_t", false)])).toThrow(
      StoreNotFoundError,
    );
    expect(ledger()).not.toContainEqual({ component: "absent", version: 1 });
    await first.close();
  });
});

describe("PostgreSQL: several components on one driver", async () => {
  const skip = await postgresSkipReason();
  it.skipIf(skip !== undefined)(
    `creates each, adds a new one with create: false, refuses a missing first one${skip ? ` (${skip})` : ""}`,
    async () => {
      const schema = `components_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
      const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
      const open = (sets: ReturnType<typeof set>[], create?: false) =>
        new PostgresDriver("t", { pool, schema, ...(create === false ? { create } : {}) }, sets);
      const ledger = async () =>
        (await pool.query(`SELECT component FROM "${schema}".dumplings_migrations ORDER BY component`)).rows.map(
          (r: { component: string }) => r.component,
        );
      try {
        const first = open([set("main", "main_t", true), set("extra", "extra_t", true)]);
        await first.ready();
        expect(await ledger()).toEqual(["extra", "main"]);
        const later = open([set("main", "main_t", true), set("added", "added_t", true)], false);
        await later.ready();
        expect(await ledger()).toEqual(["added", "extra", "main"]);
        await pool.query(`SELECT x FROM "${schema}".added_t`);
        await expect(open([set("absent", "absent_t", true)], false).ready()).rejects.toBeInstanceOf(StoreNotFoundError);
        expect(await ledger()).toEqual(["added", "extra", "main"]);
      } finally {
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await pool.end();
      }
    },
  );
});

describe("SQLite: one file for every component (issue 22: one store per kind)", () => {
  it("sessions, workflow checkpoints and durable runs in one fresh file make at most 14 tables, no old workflow table", async () => {
    const { SQLiteBackend } = await import("../../src/backends/sqlite.js");
    const { CheckpointStore, SqliteColdStore, createWorkflowState } = await import("../../src/workflow/index.js");
    const { SqliteJournal } = await import("../../src/durable/journal-sqlite.js");
    const file = path.join(tmp, "all.db");
    const sessions = new SQLiteBackend({ path: file });
    sessions.listKeys();
    sessions.close();
    const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
    await store.save(createWorkflowState({ workflowId: "w" }), { expectedStep: null });
    await store.close();
    const journal = new SqliteJournal({ path: file });
    await journal.createRun({ runId: "r", workflow: "t", input: null });
    await journal.close();
    const { default: Database } = await import("better-sqlite3");
    const db = new Database(file, { readonly: true });
    const tables = db
      .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
      .pluck()
      .all() as string[];
    const views = db.prepare("SELECT name FROM sqlite_master WHERE type = 'view'").pluck().all();
    db.close();
    expect(tables.length).toBeLessThanOrEqual(14);
    expect(tables.filter((t) => t.startsWith("workflow"))).toEqual([]);
    expect(views).toEqual(["workflow_snapshots"]);
  });
});
