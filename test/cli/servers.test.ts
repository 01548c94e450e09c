/**
 * `dumplings convert` and the storage commands against real Redis and
 * PostgreSQL through server SPECs (`redis:<url>`, `postgres:<url>`), on the
 * bundled real conversations. Each run uses its own key prefix / schema.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadSampleConversations } from "../../src/testing/samples.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { runCli, runJson } from "./run-cli.js";

const redisReason = await redisSkipReason();
const postgresReason = await postgresSkipReason();
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-cli-servers-"));
const dir = path.join(tmp, "sessions");
const samples = loadSampleConversations().filter((s) => s.bytes < 100_000);
const run = randomBytes(4).toString("hex");

beforeAll(() => {
  const r = runCli(["import", ...samples.map((s) => s.file), "--dir", dir, "-q"]);
  if (r.code !== 0) throw new Error(r.stderr);
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe.skipIf(redisReason)("convert through Redis", () => {
  const url = new URL(REDIS_URL);
  url.searchParams.set("prefix", `clitest-${run}:`);
  const spec = `redis:${url.href}`;
  afterAll(() => {
    runCli(["rm", "--force", ...samples.map((s) => s.id), "--backend", spec]);
  });

  it("copies file → Redis → SQLite, verifying each copy", () => {
    const toRedis = runJson<{ copied: number; mismatches: unknown[] }>([
      "convert",
      "--from",
      `file:${dir}`,
      "--to",
      spec,
      "-q",
    ]);
    expect(toRedis).toMatchObject({ copied: samples.length, mismatches: [] });
    const keys = runJson<{ sessions: { key: string }[] }>(["ls", "--backend", spec]).sessions.map((s) => s.key);
    expect(keys).toEqual(samples.map((s) => s.id).sort());
    const db = path.join(tmp, "from-redis.db");
    const back = runJson<{ verified: number }>(["convert", "--from", spec, "--to", `sqlite:${db}`, "-q"]);
    expect(back.verified).toBe(samples.length);
    const key = samples[0]?.id ?? "";
    expect(runCli(["export", key, "--backend", spec]).stdout).toBe(runCli(["export", key, "--dir", dir]).stdout);
  });
});

describe.skipIf(postgresReason)("convert through PostgreSQL", () => {
  const schema = `cli_test_${run}`;
  const url = new URL(DATABASE_URL);
  url.searchParams.set("schema", schema);
  const spec = `postgres:${url.href}`;
  afterAll(async () => {
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    try {
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    } finally {
      await client.end();
    }
  });

  it("copies file → PostgreSQL → file, verifying each copy", () => {
    const toPg = runJson<{ copied: number; mismatches: unknown[] }>([
      "convert",
      "--from",
      `file:${dir}`,
      "--to",
      spec,
      "-q",
    ]);
    expect(toPg).toMatchObject({ copied: samples.length, mismatches: [] });
    const shown = runJson<{ messages: { total: number } }>(["show", samples[0]?.id ?? "", "--backend", spec]);
    expect(shown.messages.total).toBe(samples[0]?.messages.length);
    const back = path.join(tmp, "from-pg");
    expect(runJson<{ verified: number }>(["convert", "--from", spec, "--to", `file:${back}`, "-q"]).verified).toBe(
      samples.length,
    );
  });
});

describe.skipIf(postgresReason)("a password in a connection URL's query", () => {
  it("is never printed: ls, show and a failing command hide ?password= and ?sslpassword= as they hide user:password@", () => {
    const url = new URL(DATABASE_URL);
    url.searchParams.set("schema", `clitest_pw_${run}`);
    url.searchParams.set("password", "S3cretQueryPw");
    url.searchParams.set("sslpassword", "S3cretSslPw");
    const spec = url.href;
    const outputs = [
      runCli(["ls", "--backend", spec, "--json"]),
      runCli(["ls", "--backend", spec]),
      runCli(["show", "no-such-session", "--backend", spec]),
    ];
    for (const r of outputs) {
      const all = `${r.stdout}\n${r.stderr}`;
      expect(all).not.toContain("S3cretQueryPw");
      expect(all).not.toContain("S3cretSslPw");
    }
    expect(`${outputs[0]?.stdout}${outputs[1]?.stdout}${outputs[1]?.stderr}`).toContain("password=***");
  });
});
