/**
 * `dumplings runs` on a journal where one run's step record was corrupted
 * (edited by hand, a bad restore), on each journal store (SQLite, PostgreSQL,
 * Redis), as a real process: every run is still listed, the bad one with its
 * `readError` (`UNREADABLE (FORMAT_ERROR)` in the table), named on stderr, and
 * the command exits 6 (`RUNS_UNREADABLE`). So is a run whose own row was
 * corrupted (`input_json`, `output_json`): listed with its `readError`, not
 * one error hiding every run (a second trial found that still failed).
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { step } from "../../src/durable/context.js";
import type { Journal } from "../../src/durable/journal.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { runCli } from "./run-cli.js";

const redisReason = await redisSkipReason();
const postgresReason = await postgresSkipReason();
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-cli-unreadable-runs-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const run = randomBytes(4).toString("hex");

/** Three finished runs of one step each. */
async function seed(journal: Journal): Promise<void> {
  try {
    for (const id of ["r1", "r2", "r3"]) {
      await runDurable(id, async () => step("fetch", () => ({ fetched: id })), { journal, input: null, workflow: "w" });
    }
  } finally {
    await journal.close();
  }
}

/** `runs` lists every run and marks r3, whose own row cannot be read; exit 6. */
function expectR3RowUnreadable(spec: string, column: string): void {
  const json = runCli(["runs", "--journal", spec, "--json"]);
  expect(json.code, json.stderr).toBe(6);
  const rows = JSON.parse(json.stdout) as { runId: string; readError?: { code: string; message: string } }[];
  expect(rows.map((r) => r.runId).sort()).toEqual(["r1", "r2", "r3"]);
  expect(rows.find((r) => r.runId === "r3")?.readError).toMatchObject({
    code: "FORMAT_ERROR",
    message: expect.stringContaining(`${column} of run "r3" is not valid JSON`),
  });
  expect(rows.find((r) => r.runId === "r1")?.readError).toBeUndefined();
  const text = runCli(["runs", "--journal", spec]);
  expect(text.code).toBe(6);
  expect(text.stdout).toMatch(/^r3 +w +completed +- +\S+ +\S+ +UNREADABLE \(FORMAT_ERROR\)$/m);
  expect(text.stdout).toMatch(/^r1 +w +completed +1 /m);
}

/** `runs --json` and `runs` list all three runs, r2 marked with its error; exit 6. */
function expectR2Unreadable(spec: string): void {
  const json = runCli(["runs", "--journal", spec, "--json"]);
  expect(json.code, json.stderr).toBe(6);
  const rows = JSON.parse(json.stdout) as { runId: string; steps: number | null; readError?: { code: string } }[];
  expect(rows.map((r) => r.runId).sort()).toEqual(["r1", "r2", "r3"]);
  for (const r of rows) {
    if (r.runId === "r2") {
      expect(r.steps).toBeNull();
      expect(r.readError).toMatchObject({ code: "FORMAT_ERROR", message: expect.stringMatching(/run "r2"/) });
    } else {
      expect(r.steps).toBe(1);
      expect(r.readError).toBeUndefined();
    }
  }
  expect(json.stderr).toMatch(
    /^dumplings: cannot read run "r2": journal: .*run "r2".* is not valid JSON.*\(FORMAT_ERROR\)$/m,
  );
  expect(json.stderr.trimEnd().split("\n").at(-1)).toMatch(
    /^dumplings: the journal records of 1 of 3 runs cannot be read: "r2" \(FORMAT_ERROR\); every run is still listed \(RUNS_UNREADABLE\)$/,
  );
  const text = runCli(["runs", "--journal", spec]);
  expect(text.code).toBe(6);
  expect(text.stdout).toMatch(/^r2 +w +completed +- +\S+ +\S+ +UNREADABLE \(FORMAT_ERROR\)$/m);
  expect(text.stdout).toMatch(/^r1 +w +completed +1 /m);
}

describe("runs on a journal with a corrupted record", () => {
  it("SQLite: lists every run, marks the one whose step cannot be read, exits 6; a corrupted run row is a typed error", async () => {
    const db = path.join(tmp, "j.db");
    await seed(new SqliteJournal({ path: db }));
    const raw = new Database(db);
    raw.prepare("UPDATE durable_steps SET output_json = '{\"fetched\":' WHERE run_id = 'r2'").run();
    raw.close();
    expectR2Unreadable(`sqlite:${db}`);
    const raw2 = new Database(db);
    raw2.prepare("UPDATE durable_runs SET input_json = '{' WHERE run_id = 'r3'").run();
    raw2.close();
    expectR3RowUnreadable(`sqlite:${db}`, "input_json");
    // the run itself, asked for by id, is the typed error naming it
    const one = runCli(["runs", "r3", "--journal", `sqlite:${db}`]);
    expect(one.code).toBe(4);
    expect(one.stderr).toMatch(/journal: input_json of run "r3" is not valid JSON .*\(FORMAT_ERROR\)$/m);
  });

  it.skipIf(postgresReason)(
    "PostgreSQL: lists every run, marks the one whose step cannot be read, exits 6",
    async () => {
      const schema = `cli_unreadable_runs_${run}`;
      const { PostgresJournal } = await import("../../src/durable/journal-postgres.js");
      await seed(new PostgresJournal({ url: DATABASE_URL, schema }));
      const client = new pg.Client({ connectionString: DATABASE_URL });
      await client.connect();
      try {
        await client.query(`UPDATE ${schema}.durable_steps SET output_json = '{"fetched":' WHERE run_id = 'r2'`);
        const url = new URL(DATABASE_URL);
        url.searchParams.set("schema", schema);
        expectR2Unreadable(`postgres:${url.href}`);
        await client.query(`UPDATE ${schema}.durable_runs SET output_json = '{"x":1' WHERE run_id = 'r3'`);
        expectR3RowUnreadable(`postgres:${url.href}`, "output_json");
      } finally {
        await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await client.end();
      }
    },
  );

  it.skipIf(redisReason)("Redis: lists every run, marks the one whose step cannot be read, exits 6", async () => {
    const prefix = `cli-unreadable-runs-${run}:`;
    const { RedisJournal } = await import("../../src/durable/journal-redis.js");
    await seed(new RedisJournal({ url: REDIS_URL, keyPrefix: prefix }));
    const redis = new Redis(REDIS_URL);
    try {
      const key = `${prefix}{r2}:steps`;
      const fields = await redis.hkeys(key);
      expect(fields).toHaveLength(1);
      await redis.hset(key, fields[0] as string, '{"seq":0,"name":');
      const url = new URL(REDIS_URL);
      url.searchParams.set("prefix", prefix);
      expectR2Unreadable(`redis:${url.href}`);
      await redis.hset(`${prefix}{r3}:run`, "output_json", '{"x":');
      expectR3RowUnreadable(`redis:${url.href}`, "output_json");
    } finally {
      const keys = await redis.keys(`${prefix}*`);
      if (keys.length > 0) await redis.del(...keys);
      redis.disconnect();
    }
  });
});
