/**
 * One SPEC syntax in every command (issue 11, item 15): `postgres://…` and
 * `postgres:postgres://…`, `redis://…` and `redis:redis://…`, `sqlite:PATH`,
 * `file:DIR`, `memory:` are parsed by one function for `--backend`,
 * `convert --from/--to`, `--journal` and `--store`; a bare `redis` or
 * `postgres` gets a hint to add the URL; every command's `--help` lists the
 * forms it takes.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Command } from "commander";
import { describe, expect, it } from "vitest";
import { convertCommand } from "../../src/cli/commands/convert.js";
import { exportCommand } from "../../src/cli/commands/export.js";
import { gcCommand } from "../../src/cli/commands/gc.js";
import { importCommand } from "../../src/cli/commands/import.js";
import { lsCommand } from "../../src/cli/commands/ls.js";
import { rmCommand } from "../../src/cli/commands/rm.js";
import { showCommand } from "../../src/cli/commands/show.js";
import { durableCommands } from "../../src/cli/durable-commands.js";
import { workflowsCommand } from "../../src/cli/workflow-commands.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { parseSpec, SESSION_KINDS } from "../../src/ops/spec.js";
import { postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { runCli } from "./run-cli.js";

const redisReason = await redisSkipReason();
const postgresReason = await postgresSkipReason();
const all = { kinds: SESSION_KINDS, names: true, option: "--backend" };

describe("parseSpec", () => {
  it("reads both spellings of server URLs the same way", () => {
    const bare = parseSpec("postgres://u@h:5432/db?schema=s1", all);
    const prefixed = parseSpec("postgres:postgres://u@h:5432/db?schema=s1", all);
    expect(bare).toMatchObject({ kind: "postgres", url: "postgres://u@h:5432/db", param: "s1" });
    expect(prefixed).toMatchObject({ kind: "postgres", url: "postgres://u@h:5432/db", param: "s1" });
    expect(parseSpec("postgresql://h/db", all)).toMatchObject({ kind: "postgres", url: "postgresql://h/db" });
    expect(parseSpec("redis://h:6379/2?prefix=p:", all)).toMatchObject({
      kind: "redis",
      url: "redis://h:6379/2",
      param: "p:",
    });
    expect(parseSpec("redis:redis://h:6379/2?prefix=p:", all)).toMatchObject({ kind: "redis", param: "p:" });
    expect(parseSpec("rediss://h", all)).toMatchObject({ kind: "redis", url: "rediss://h" });
    expect(parseSpec("sqlite:./x.db", all)).toMatchObject({ kind: "sqlite", path: "./x.db" });
    expect(parseSpec("file:./dir", all)).toMatchObject({ kind: "file", path: "./dir" });
    expect(parseSpec("memory:", all)).toMatchObject({ kind: "memory" });
    expect(parseSpec("sqlite", all)).toMatchObject({ kind: "name", name: "sqlite" });
  });

  it("refuses what it cannot open, naming the accepted forms, never a password", () => {
    expect(() => parseSpec("redis", all)).toThrow(/--backend "redis": needs the server's URL, e.g. redis:redis:\/\//);
    expect(() => parseSpec("postgres", all)).toThrow(/needs the server's URL, e.g. postgres:postgres:\/\//);
    expect(() => parseSpec("postgres:", all)).toThrow(/needs the server's URL/);
    expect(() => parseSpec("sqlite:", all)).toThrow(/needs a database file/);
    expect(() => parseSpec("ftp:x", all)).toThrow(/unknown kind "ftp".*file:DIR, sqlite:PATH, postgres:\/\/URL/);
    expect(() => parseSpec("postgres:redis://h", all)).toThrow(
      /a postgres store needs a postgres:\/\/ or postgresql:\/\/ URL/,
    );
    expect(() => parseSpec("memory:x", all)).toThrow(/memory: takes no location/);
    const journal = { kinds: ["sqlite", "postgres", "redis"] as const, option: "--journal" };
    expect(() => parseSpec("file:./x", journal)).toThrow(/--journal "file:.\/x": a file store is not accepted here/);
    expect(() => parseSpec("journal.db", journal)).toThrow(/is not a store; write sqlite:PATH/);
    let message = "";
    try {
      parseSpec("postgres://user:s3cret@h/db", { kinds: ["sqlite"], option: "--store" });
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toMatch(/a postgres store is not accepted here/);
    expect(message).not.toContain("s3cret");
  });
});

describe("the CLI takes one syntax everywhere", () => {
  it("--backend redis and --journal postgres hint at the URL form (exit 2)", () => {
    const r = runCli(["ls", "--backend", "redis"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /--backend "redis": needs the server's URL, e.g. redis:redis:\/\/127\.0\.0\.1:6379.*\(USAGE\)$/m,
    );
    const j = runCli(["runs", "--journal", "postgres"]);
    expect(j.code).toBe(2);
    expect(j.stderr).toMatch(/--journal "postgres": needs the server's URL/);
  });

  it("every command's --help lists the forms it takes", () => {
    // in-process: the same commander objects the CLI adds, one helpInformation() each
    const server = [/postgres:\/\/URL \(or postgres:postgres:\/\/URL/, /redis:\/\/URL \(or redis:redis:\/\/URL/];
    const help = (c: Command) => c.helpInformation().replace(/\s+/g, " ");
    for (const c of [
      lsCommand(),
      showCommand(),
      exportCommand(),
      importCommand(),
      rmCommand(),
      gcCommand(),
      convertCommand(),
    ]) {
      for (const form of [/file:DIR/, /sqlite:PATH/, /memory:/, ...server]) expect(help(c), c.name()).toMatch(form);
    }
    for (const c of durableCommands()) {
      for (const form of [/sqlite:PATH/, ...server]) expect(help(c), c.name()).toMatch(form);
    }
    for (const c of workflowsCommand().commands) {
      for (const form of [/sqlite:PATH/, server[0] as RegExp]) expect(help(c), c.name()).toMatch(form);
    }
    // and the real process prints it
    expect(runCli(["convert", "--help"]).stdout.replace(/\s+/g, " ")).toMatch(server[1] as RegExp);
  });

  it.skipIf(redisReason)("a bare redis:// URL and redis:redis:// both work for --backend and --journal", () => {
    const url = new URL(REDIS_URL);
    url.searchParams.set("prefix", `clispec-${randomBytes(4).toString("hex")}:`);
    for (const spec of [url.href, `redis:${url.href}`]) {
      const ls = runCli(["ls", "--backend", spec, "--json"]);
      expect(ls.code, ls.stderr).toBe(0);
      expect(JSON.parse(ls.stdout)).toMatchObject({ count: 0 });
      const runs = runCli(["runs", "--journal", spec, "--json"]);
      expect(runs.code, runs.stderr).toBe(0);
      expect(JSON.parse(runs.stdout)).toEqual([]);
    }
  });

  it.skipIf(redisReason)("workflows --redis takes the same forms as the other options", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "dumplings-cli-spec-"));
    try {
      const file = path.join(dir, "wf.db");
      await new SqliteColdStore({ path: file }).close();
      const url = new URL(REDIS_URL);
      url.searchParams.set("prefix", `clispec-hot-${randomBytes(4).toString("hex")}:`);
      for (const hot of [url.href, `redis:${url.href}`]) {
        const r = runCli(["workflows", "ls", "--store", `sqlite:${file}`, "--redis", hot, "--json"]);
        expect(r.code, r.stderr).toBe(0);
        expect(JSON.parse(r.stdout)).toMatchObject({ items: [] });
      }
      const bare = runCli(["workflows", "ls", "--store", `sqlite:${file}`, "--redis", "redis"]);
      expect(bare.code).toBe(2);
      expect(bare.stderr).toMatch(/--redis "redis": needs the server's URL/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.skipIf(postgresReason)("postgres:postgres:// is accepted by --store as postgres:// is by --backend", () => {
    // (the schema does not exist: exit 3 shows the SPEC was understood and nothing created; see read-only.test.ts)
    const r = runCli([
      "workflows",
      "ls",
      "--store",
      "postgres:postgres://postgres@127.0.0.1:5432/test?schema=cli_nope_x",
    ]);
    expect(r.code, r.stderr).toBe(3);
  });
});

describe("a misspelled schema or prefix parameter", () => {
  it("is refused with the parameter it meant, instead of opening the default schema or prefix", () => {
    const all = { kinds: SESSION_KINDS, names: true, option: "--backend" };
    expect(() => parseSpec("redis://127.0.0.1:6379?prefx=typo:", all)).toThrow(/\?prefx=; did you mean \?prefix=/);
    expect(() => parseSpec("postgres://u@h/db?shema=s", all)).toThrow(/\?shema=; did you mean \?schema=/);
    expect(() => parseSpec("postgres://u@h/db?Schema=s", all)).toThrow(/did you mean \?schema=/);
    // the driver's own parameters pass through
    expect(parseSpec("postgres://u@h/db?sslmode=disable&schema=s", all)).toMatchObject({
      kind: "postgres",
      param: "s",
      url: "postgres://u@h/db?sslmode=disable",
    });
  });
});
