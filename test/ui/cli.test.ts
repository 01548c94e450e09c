/**
 * The `dumplings ui` command line (real processes) and where the web server
 * may be imported from: a bad port is a usage error (exit 2), a named store
 * that does not exist is exit 3 with nothing created, `--host 0.0.0.0`
 * prints a warning; `--journal` naming the workflow store's file lists its workflows as runs and
 * answers a waiting one from its run page; hono is imported only inside src/ui (and the command
 * loads src/ui only when it runs), and nothing below the CLI imports src/ui.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { RedisRunStream } from "../../src/durable/stream.js";
import { END, ResumableGraphRunner } from "../../src/workflow/index.js";
import { CheckpointStore } from "../../src/workflow/store.js";
import { programArgs, ROOT, runCli } from "../cli/run-cli.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const redisSkip = await redisSkipReason();

/** Starts `dumplings ui ARGS` as a real process; resolves with the child and the address it printed. */
async function startUi(args: string[]): Promise<{ child: ChildProcess; address: string; stderr: () => string }> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("DUMPLINGS_")) env[k] = v;
  const child = spawn(process.execPath, [...programArgs("cli/index"), "ui", ...args], {
    cwd: path.join(ROOT, "test"),
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const address = await new Promise<string>((resolve, reject) => {
    let out = "";
    child.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      if (out.includes("\n")) resolve(out.split("\n")[0] as string);
    });
    child.once("exit", (code) => reject(new Error(`exited ${code}: ${stderr}`)));
  });
  return { child, address, stderr: () => stderr };
}

/** Stops it with SIGTERM; resolves with the exit code. */
async function stop(child: ChildProcess): Promise<number | null> {
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  return exited;
}

describe("dumplings ui, the command", () => {
  it("refuses a bad port (exit 2) and a named store that does not exist (exit 3, nothing created)", () => {
    const bad = runCli(["ui", "--port", "http"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^dumplings: --port "http" is not a port .*\(USAGE\)$/m);
    const dir = mkdtempSync(path.join(tmpdir(), "dumplings-ui-cli-"));
    try {
      const missing = path.join(dir, "nope.db");
      const r = runCli(["ui", "--journal", `sqlite:${missing}`, "--port", "0"]);
      expect(r.code).toBe(3);
      expect(r.stderr).toContain("INPUT_NOT_FOUND");
      expect(r.stdout).toBe("");
      expect(existsSync(missing)).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("warns when it listens on 0.0.0.0, and stops on SIGTERM with exit 0", async () => {
    const { child, address, stderr } = await startUi(["--host", "0.0.0.0", "--port", "0"]);
    expect(address).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\?token=[A-Za-z0-9_-]{32}$/);
    const r = await fetch(address, { redirect: "manual" });
    expect(r.status).toBe(303);
    expect(await stop(child)).toBe(0);
    expect(stderr()).toMatch(/WARNING: listening on 0\.0\.0\.0/);
  });

  it("--journal naming the workflow store's file: workflows are runs of graph, a waiting one's run page answers it", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "dumplings-ui-same-"));
    try {
      const file = path.join(dir, "app.db");
      const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
      try {
        const runner = new ResumableGraphRunner({
          store,
          nodes: { ask: async (_s, ctx) => ({ next: END, updates: { ok: await ctx.interrupt({ reason: "ship?" }) } }) },
        });
        expect((await runner.runOrResume("wf-1")).status).toBe("waiting");
      } finally {
        await store.close();
      }
      const { child, address } = await startUi(["--store", `sqlite:${file}`, "--journal", `sqlite:${file}`]);
      try {
        const cookie = ((await fetch(address, { redirect: "manual" })).headers.get("set-cookie") ?? "").split(
          ";",
        )[0] as string;
        const origin = new URL(address).origin;
        const list = await (await fetch(`${origin}/runs`, { headers: { cookie } })).text();
        expect(list).toMatch(/<a href="\/runs\/wf-1">wf-1<\/a><\/td><td class="hide-sm">graph<\/td>/);
        const run = await (await fetch(`${origin}/runs/wf-1`, { headers: { cookie } })).text();
        expect(run).toContain('<input type="text" name="name" value="interrupt:wf-1:0:ask:0" required>');
        expect(run).toContain('href="/workflows/wf-1"'); // one journal: the run links to its workflow page
        const r = await fetch(`${origin}/runs/wf-1/signal`, {
          method: "POST",
          headers: { cookie, origin, "content-type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({ name: "interrupt:wf-1:0:ask:0", value: "true" }).toString(),
          redirect: "manual",
        });
        expect(r.status).toBe(303);
        const wf = await (await fetch(`${origin}/workflows/wf-1`, { headers: { cookie } })).text();
        expect(wf).toContain("Interrupt answered, pending resume");
      } finally {
        expect(await stop(child)).toBe(0);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.skipIf(!!redisSkip)(
    `--stream follows a run's Redis side channel from Last-Event-ID${redisSkip ? ` (skipped: ${redisSkip})` : ""}`,
    async () => {
      const keyPrefix = `dumplings:ui-test:${process.pid}:`;
      const stream = new RedisRunStream({ url: REDIS_URL, keyPrefix });
      const dir = mkdtempSync(path.join(tmpdir(), "dumplings-ui-stream-"));
      try {
        for (const text of ["a", "b", "c"]) await stream.append("run-s", { type: "token", text });
        const { SqliteJournal } = await import("../../src/durable/journal-sqlite.js");
        const journal = new SqliteJournal({ path: path.join(dir, "j.db") });
        await journal.createRun({ runId: "run-s", workflow: "w", input: null });
        await journal.close();
        const url = new URL(REDIS_URL);
        url.searchParams.set("prefix", keyPrefix);
        const { child, address } = await startUi([
          "--journal",
          `sqlite:${path.join(dir, "j.db")}`,
          "--stream",
          url.toString(),
          "--port",
          "0",
        ]);
        try {
          const cookie = ((await fetch(address, { redirect: "manual" })).headers.get("set-cookie") ?? "").split(
            ";",
          )[0] as string;
          const origin = new URL(address).origin;
          expect(await (await fetch(`${origin}/runs/run-s`, { headers: { cookie } })).text()).toContain(
            'data-stream="/runs/run-s/stream"',
          );
          const abort = new AbortController();
          const r = await fetch(`${origin}/runs/run-s/stream`, {
            headers: { cookie, "last-event-id": "1" },
            signal: abort.signal,
          });
          const reader = r.body!.getReader();
          let text = "";
          while (!/^id: 3$/m.test(text)) text += new TextDecoder().decode((await reader.read()).value);
          abort.abort();
          expect([...text.matchAll(/^id: (\d+)$/gm)].map((m) => m[1])).toEqual(["2", "3"]);
          expect(text).toContain('"text":"b"');
        } finally {
          expect(await stop(child)).toBe(0);
        }
      } finally {
        await stream.delete("run-s");
        await stream.close();
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});

function sources(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith(".ts"))
    .map((e) => path.join(e.parentPath, e.name));
}

describe("where the web server is imported from", () => {
  const src = path.join(ROOT, "src");
  const rel = (f: string) => path.relative(src, f);

  it("hono is imported only by src/ui, and the command loads src/ui only when it runs", () => {
    for (const file of sources(src)) {
      const text = readFileSync(file, "utf8");
      if (/from "(hono|@hono\/node-server)(\/[^"]*)?"/.test(text)) expect(rel(file)).toMatch(/^ui\//);
    }
    const command = readFileSync(path.join(src, "cli", "ui.ts"), "utf8");
    for (const m of command.matchAll(/^import (type )?.*from "\.\.\/ui\/[^"]+";$/gm)) expect(m[1], m[0]).toBe("type ");
    expect(command).toContain('await import("../ui/server.js")');
  });

  it("nothing but the ui command imports src/ui", () => {
    for (const file of sources(src)) {
      const r = rel(file);
      if (r.startsWith("ui/") || r === path.join("cli", "ui.ts")) continue;
      expect(readFileSync(file, "utf8"), r).not.toMatch(/from "[./]*\/ui\//);
    }
  });
});
