/**
 * `dumplings workflows ls|show|rm|prune` on a real SQLite store: one written by the journal-backed
 * store (workflow W is run W of the file's journal) and one written by an earlier release (the
 * fixture test/fixtures/workflow/pre-journal-0.1.db.gz, moved into the journal when opened). `show`
 * of a waiting workflow prints the `dumplings signal` command that answers it, and that command,
 * run as printed, answers it.
 */
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { workflowsCommand } from "../../src/cli/workflow-commands.js";
import { END, ResumableGraphRunner, WorkflowNotFoundError } from "../../src/workflow/index.js";
import { runCli } from "../cli/run-cli.js";
import { sqliteStore, tempDir } from "./helpers.js";

const tmp = tempDir("cli");
const storeSpec = `sqlite:${path.join(tmp.dir, "checkpoints.db")}`;

async function run(...args: string[]): Promise<string> {
  return runOn(storeSpec, ...args);
}

async function runOn(spec: string, ...args: string[]): Promise<string> {
  let out = "";
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string | Uint8Array) => {
    out += String(chunk);
    return true;
  }) as typeof process.stdout.write;
  try {
    await workflowsCommand()
      .exitOverride()
      .parseAsync([...args, "--store", spec], { from: "user" });
  } finally {
    process.stdout.write = write;
  }
  return out;
}

describe("dumplings workflows", () => {
  beforeAll(async () => {
    const store = await sqliteStore(tmp.dir);
    const runner = new ResumableGraphRunner({
      store,
      nodes: {
        a: () => ({ next: "b", updates: { x: 1 } }),
        b: async (_s, ctx) => ({ next: END, updates: { ok: await ctx.interrupt({ reason: "ok to ship?" }) } }),
      },
    });
    await runner.runOrResume("cli-1");
    await runner.runOrResume("cli-2");
    await runner.resume("cli-2", true);
    await store.close();
  });
  afterAll(() => tmp.cleanup());

  it("ls lists workflows and filters by status", async () => {
    const all = await run("ls");
    expect(all).toContain("cli-1");
    expect(all).toContain("cli-2");
    const waiting = await run("ls", "--status", "waiting");
    expect(waiting).toContain("cli-1");
    expect(waiting).not.toContain("cli-2");
    const json = JSON.parse(await run("ls", "--limit", "1", "--json"));
    expect(json.items).toHaveLength(1);
    expect(typeof json.nextCursor).toBe("string");
    await expect(run("ls", "--status", "sleeping")).rejects.toThrow(/unknown status/);
  });

  it("show prints the timeline and what the workflow waits on", async () => {
    const text = await run("show", "cli-1");
    expect(text).toMatch(/__start__/);
    expect(text).toMatch(/waiting: ok to ship\? \(interrupt cli-1:1:b:0\)/);
    expect(text).toContain(`answer it: dumplings signal --journal ${storeSpec} cli-1 interrupt:cli-1:1:b:0 '<JSON>'`);
    await expect(run("show", "nope")).rejects.toBeInstanceOf(WorkflowNotFoundError);
  });

  it("prune and rm", async () => {
    expect(await run("prune", "--older-than", "1ms", "--keep-last", "1")).toMatch(/deleted \d+ checkpoints/);
    expect(JSON.parse(await run("show", "cli-2", "--json")).history).toHaveLength(1);
    expect(await run("rm", "cli-2")).toContain("deleted cli-2");
    await expect(run("rm", "cli-2")).rejects.toBeInstanceOf(WorkflowNotFoundError);
  });
});

/** Tables and views of an SQLite file. */
function tablesOf(file: string): string[] {
  const db = new Database(file, { readonly: true });
  try {
    return (db.prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").all() as { name: string }[])
      .map((r) => r.name)
      .sort();
  } finally {
    db.close();
  }
}

describe("dumplings workflows on a file written by an earlier release", () => {
  const old = tempDir("cli-old");
  afterAll(() => old.cleanup());
  it("opens it (moving its workflow tables into the journal), lists, shows, answers, prunes and removes", async () => {
    const file = path.join(old.dir, "pre-journal.db");
    const gz = fileURLToPath(new URL("../fixtures/workflow/pre-journal-0.1.db.gz", import.meta.url));
    writeFileSync(file, gunzipSync(readFileSync(gz)));
    expect(tablesOf(file)).toContain("workflows");
    const spec = `sqlite:${file}`;
    const ls = await runOn(spec, "ls");
    expect(ls).toMatch(/waiting-big\s+waiting\s+2\s+approve/);
    expect(ls).toMatch(/crashed\s+running/);
    // moved once, on open: the old tables are gone, the journal's are there
    expect(tablesOf(file)).not.toContain("workflows");
    expect(tablesOf(file)).toContain("durable_runs");
    const show = await runOn(spec, "show", "waiting-big");
    expect(show).toMatch(/waiting: send it\? \(interrupt waiting-big:1:approve:0\)/);
    const command = /^answer it: dumplings (.+) '<JSON>'$/m.exec(show)?.[1];
    expect(command).toBe(`signal --journal ${spec} waiting-big interrupt:waiting-big:1:approve:0`);
    // the printed command, run as printed by a real process, answers it
    const sent = runCli([...(command as string).split(" "), '{"ok":true}']);
    expect(sent.code, sent.stderr).toBe(0);
    expect(await runOn(spec, "show", "waiting-big")).toContain(
      'answered with {"ok":true}, pending resume (the application\'s runner.runOrResume continues it)',
    );
    const runs = runCli(["runs", "--journal", spec, "--json"]);
    expect(runs.code, runs.stderr).toBe(0);
    const row = (JSON.parse(runs.stdout) as { runId: string; workflow: string; status: string }[]).find(
      (r) => r.runId === "waiting-big",
    );
    expect(row).toMatchObject({ workflow: "graph", status: "waiting" });
    expect(await runOn(spec, "prune", "--older-than", "1ms", "--keep-last", "1")).toMatch(/deleted \d+ checkpoints/);
    expect(JSON.parse(await runOn(spec, "show", "waiting-big", "--json")).history.at(-1).state.status).toBe("waiting");
    expect(await runOn(spec, "rm", "crashed")).toContain("deleted crashed");
    expect(await runOn(spec, "ls")).not.toContain("crashed");
    await expect(runOn(spec, "show", "crashed")).rejects.toBeInstanceOf(WorkflowNotFoundError);
  }, 60_000);
});
