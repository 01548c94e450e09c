/** `dumplings workflows ls|show|rm|prune` on a real SQLite store. */
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { workflowsCommand } from "../../src/cli/workflow-commands.js";
import { END, ResumableGraphRunner, WorkflowNotFoundError } from "../../src/workflow/index.js";
import { sqliteStore, tempDir } from "./helpers.js";

const tmp = tempDir("cli");
const storeSpec = `sqlite:${path.join(tmp.dir, "checkpoints.db")}`;

async function run(...args: string[]): Promise<string> {
  let out = "";
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string | Uint8Array) => {
    out += String(chunk);
    return true;
  }) as typeof process.stdout.write;
  try {
    await workflowsCommand()
      .exitOverride()
      .parseAsync([...args, "--store", storeSpec], { from: "user" });
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
    await expect(run("show", "nope")).rejects.toBeInstanceOf(WorkflowNotFoundError);
  });

  it("prune and rm", async () => {
    expect(await run("prune", "--older-than", "1ms", "--keep-last", "1")).toMatch(/deleted \d+ checkpoints/);
    expect(JSON.parse(await run("show", "cli-2", "--json")).history).toHaveLength(1);
    expect(await run("rm", "cli-2")).toContain("deleted cli-2");
    await expect(run("rm", "cli-2")).rejects.toBeInstanceOf(WorkflowNotFoundError);
  });
});
