/**
 * Commands that only read never create a store (issue 11, item 14): a
 * mistyped journal, workflow store or session store is a not-found error
 * (`INPUT_NOT_FOUND`, exit 3) and leaves no file, directory, table or schema
 * behind; on an existing file of another kind they add no tables. Real
 * processes, real SQLite files, a real PostgreSQL server.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { runDurable } from "../../src/durable/run.js";
import { makeState } from "../../src/testing/states.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { runCli } from "./run-cli.js";

const postgresReason = await postgresSkipReason();
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-cli-ro-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** A fresh empty directory to run a command in. */
function emptyDir(name: string): string {
  const d = path.join(tmp, name);
  rmSync(d, { recursive: true, force: true });
  return mkdtempSync(`${d}-`);
}

function expectMissing(r: { code: number | null; stderr: string; stdout: string }, what: RegExp): void {
  expect(r.code, r.stderr).toBe(3);
  expect(r.stderr.trimEnd().split("\n")).toHaveLength(1);
  expect(r.stderr).toMatch(what);
  expect(r.stderr).toMatch(/nothing was created.*\(INPUT_NOT_FOUND\)$/m);
  expect(r.stderr.match(/nothing was created/g), "said once").toHaveLength(1);
}

const tables = (file: string): string[] => {
  const db = new Database(file, { readonly: true });
  try {
    return (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as { name: string }[])
      .map((r) => r.name)
      .filter((n) => !n.startsWith("sqlite_"));
  } finally {
    db.close();
  }
};

describe("read-only commands on a store that does not exist", () => {
  it("runs with no journal does not create ./.dumplingsAI_durable.db", () => {
    const cwd = emptyDir("no-journal");
    expectMissing(runCli(["runs"], { cwd }), /no store at sqlite:\.\/\.dumplingsAI_durable\.db/);
    expect(readdirSync(cwd)).toEqual([]);
  });

  it("runs with no journal reads the default journal of an earlier release (./.dumplings-durable.db) when it is the one there", async () => {
    const cwd = emptyDir("old-default-journal");
    const { SqliteJournal } = await import("../../src/durable/journal-sqlite.js");
    const old = new SqliteJournal({ path: path.join(cwd, ".dumplings-durable.db") });
    await old.createRun({ runId: "old-default-run", workflow: "w", input: null });
    await old.close();
    const r = runCli(["runs", "--json"], { cwd, sources: true });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("old-default-run");
    expect(readdirSync(cwd).filter((f) => f.startsWith(".dumplingsAI_"))).toEqual([]);
  });

  it("a workflow of the default store, asked of the default journal, is not found with the --journal that reaches it", async () => {
    const cwd = emptyDir("workflow-in-store");
    const { SqliteJournal } = await import("../../src/durable/journal-sqlite.js");
    const journal = new SqliteJournal({ path: path.join(cwd, ".dumplingsAI_durable.db") });
    await journal.createRun({ runId: "a-run", workflow: "w", input: null });
    await journal.close();
    mkdirSync(path.join(cwd, ".dumplingsAI_workflows"));
    const store = new SqliteJournal({ path: path.join(cwd, ".dumplingsAI_workflows", "workflows.db") });
    await store.createRun({ runId: "wf-1", workflow: "graph", input: null });
    await store.close();
    for (const args of [
      ["runs", "wf-1"],
      ["cancel", "wf-1"],
      ["signal", "wf-1", "go"],
    ]) {
      const r = runCli(args, { cwd, sources: true });
      expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(3);
      expect(r.stderr).toContain("RUN_NOT_FOUND");
      expect(r.stderr).toContain("--journal sqlite:./.dumplingsAI_workflows/workflows.db");
    }
    // a run found nowhere says nothing more; a journal named says nothing more
    expect(runCli(["runs", "nope"], { cwd, sources: true }).stderr).not.toContain("--journal sqlite:");
    const named = runCli(["runs", "wf-1", "--journal", "sqlite:.dumplingsAI_durable.db"], { cwd, sources: true });
    expect(named.stderr).not.toContain("workflow store");
    // the hinted journal reaches it
    const reached = runCli(["runs", "wf-1", "--journal", "sqlite:./.dumplingsAI_workflows/workflows.db", "--json"], {
      cwd,
      sources: true,
    });
    expect(reached.code, reached.stderr).toBe(0);
  });

  it("runs --journal sqlite:typo.db and runs RUN, approve, cancel on it create nothing", () => {
    const cwd = emptyDir("typo-journal");
    expectMissing(runCli(["runs", "--journal", "sqlite:rusn.db"], { cwd }), /sqlite:rusn\.db/);
    expectMissing(runCli(["runs", "r1", "--journal", "sqlite:rusn.db"], { cwd }), /sqlite:rusn\.db/);
    expectMissing(runCli(["approve", "r1", "call_1", "--journal", "sqlite:rusn.db"], { cwd }), /sqlite:rusn\.db/);
    expectMissing(runCli(["cancel", "r1", "--journal", "sqlite:rusn.db"], { cwd }), /sqlite:rusn\.db/);
    // the environment variable is read the same way
    expectMissing(runCli(["runs"], { cwd, env: { DUMPLINGS_DURABLE_JOURNAL: "sqlite:env.db" } }), /sqlite:env\.db/);
    expect(readdirSync(cwd)).toEqual([]);
  });

  it("workflows ls/show/rm --store sqlite:./typo/wf.db create neither the folder nor the database", () => {
    const cwd = emptyDir("typo-store");
    expectMissing(runCli(["workflows", "ls", "--store", "sqlite:./typo/wf.db"], { cwd }), /sqlite:\.\/typo\/wf\.db/);
    expectMissing(runCli(["workflows", "show", "w1", "--store", "sqlite:./typo/wf.db"], { cwd }), /typo/);
    expectMissing(runCli(["workflows", "rm", "w1", "--store", "sqlite:./typo/wf.db"], { cwd }), /typo/);
    expectMissing(runCli(["workflows", "ls"], { cwd }), /\.dumplingsAI_workflows\/workflows\.db/);
    expect(readdirSync(cwd)).toEqual([]);
  });

  it("ls/show/export/rm/gc on a mistyped session store create nothing", () => {
    const cwd = emptyDir("typo-sessions");
    expectMissing(runCli(["ls", "--backend", "sqlite", "--db", "typo.db"], { cwd }), /sqlite:typo\.db/);
    expectMissing(runCli(["ls", "--backend", "sqlite:typo.db"], { cwd }), /sqlite:typo\.db/);
    expectMissing(runCli(["ls", "--dir", "typo"], { cwd }), /file:typo/);
    expectMissing(runCli(["ls"], { cwd }), /file:\.\/\.dumplingsAI_sessions/);
    expectMissing(runCli(["show", "k", "--backend", "sqlite", "--db", "typo.db"], { cwd }), /typo\.db/);
    expectMissing(runCli(["export", "k", "--backend", "sqlite:typo.db"], { cwd }), /typo\.db/);
    expectMissing(runCli(["rm", "k", "--backend", "sqlite:typo.db"], { cwd }), /typo\.db/);
    expectMissing(runCli(["gc", "--older-than", "1d", "--backend", "sqlite", "--db", "typo.db"], { cwd }), /typo/);
    expect(readdirSync(cwd)).toEqual([]);
  });

  it("a journal or workflow command on an SQLite file of sessions adds no tables to it", async () => {
    const file = path.join(tmp, "sessions.db");
    const backend = new SQLiteBackend({ path: file });
    await backend.save("k1", makeState([{ role: "user", content: "hi" }]));
    await backend.close();
    const before = tables(file);
    expectMissing(runCli(["runs", "--journal", `sqlite:${file}`]), /no journal tables in this file/);
    // An SQLite workflow store is the file's journal: the same refusal names the journal's tables.
    expectMissing(runCli(["workflows", "ls", "--store", `sqlite:${file}`]), /no journal tables in this file/);
    expect(tables(file)).toEqual(before);
    // and the sessions in it are read as before
    const ls = runCli(["ls", "--backend", `sqlite:${file}`]);
    expect(ls.code, ls.stderr).toBe(0);
    expect(ls.stdout.trim()).toBe("k1");
  });
});

describe.skipIf(postgresReason)("read-only commands on a PostgreSQL schema that does not exist", () => {
  const schema = `cli_ro_${randomBytes(4).toString("hex")}`;
  const url = new URL(DATABASE_URL);
  url.searchParams.set("schema", schema);
  const schemaExists = async (name: string) => {
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    try {
      return (await client.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [name])).rows.length > 0;
    } finally {
      await client.end();
    }
  };
  afterAll(async () => {
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    try {
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.query(`DROP SCHEMA IF EXISTS ${schema}_j CASCADE`);
    } finally {
      await client.end();
    }
  });

  it("ls, runs and workflows ls create neither the schema nor tables (both URL spellings)", async () => {
    expectMissing(runCli(["ls", "--backend", url.href]), new RegExp(`no store at postgres://.*schema=${schema}`));
    expectMissing(runCli(["ls", "--backend", `postgres:${url.href}`]), /postgres:cli_ro_\w+: no such schema/);
    expectMissing(runCli(["runs", "--journal", url.href]), /no such schema/);
    expectMissing(runCli(["runs", "--journal", `postgres:${url.href}`]), /no such schema/);
    expectMissing(runCli(["workflows", "ls", "--store", url.href]), /no such schema/);
    expectMissing(runCli(["workflows", "ls", "--store", `postgres:${url.href}`]), /no such schema/);
    expect(await schemaExists(schema)).toBe(false);
  });

  it("an existing journal is read through either spelling, and --schema works as ?schema=", async () => {
    const journal = new PostgresJournal({ url: DATABASE_URL, schema: `${schema}_j` });
    try {
      await runDurable("pg-run-1", async () => "done", { journal, input: null, workflow: "quick" });
    } finally {
      await journal.close();
    }
    const u = new URL(DATABASE_URL);
    u.searchParams.set("schema", `${schema}_j`);
    for (const spec of [u.href, `postgres:${u.href}`]) {
      const r = runCli(["runs", "--journal", spec, "--json"]);
      expect(r.code, r.stderr).toBe(0);
      expect((JSON.parse(r.stdout) as { runId: string }[]).map((x) => x.runId)).toEqual(["pg-run-1"]);
    }
    const bySchema = runCli(["runs", "--journal", DATABASE_URL, "--schema", `${schema}_j`]);
    expect(bySchema.code, bySchema.stderr).toBe(0);
    expect(bySchema.stdout).toContain("pg-run-1");
    // the schema exists but holds no sessions tables: reading them adds none
    const tablesOf = async () => {
      const client = new pg.Client({ connectionString: DATABASE_URL });
      await client.connect();
      try {
        const r = await client.query("SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1", [
          `${schema}_j`,
        ]);
        return r.rows.map((row) => String(row.tablename));
      } finally {
        await client.end();
      }
    };
    const before = await tablesOf();
    expectMissing(runCli(["ls", "--backend", u.href]), /no sessions tables in this schema/);
    // A workflow store is a journal: this one opens and lists no workflow (its run is a durable run, not a graph's).
    const workflows = runCli(["workflows", "ls", "--store", `postgres:${u.href}`, "--json"]);
    expect(workflows.code, workflows.stderr).toBe(0);
    expect(JSON.stringify(JSON.parse(workflows.stdout))).not.toContain("pg-run-1");
    expect(await tablesOf()).toEqual(before);
  });
});
