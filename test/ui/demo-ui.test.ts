/**
 * `npm run demo:durable` ends with the `dumplings ui` command that
 * shows the run it made: the command, run as printed (plus `--port 0`),
 * serves the run's page with its journal (the approved `tool:` step and the
 * completed status), and its default session and workflow stores, which do
 * not exist here, are shown as missing rather than failing the start.
 */
import { spawn, spawnSync } from "node:child_process";
import { rmSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { programArgs, ROOT } from "../cli/run-cli.js";

function cleanEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && k !== "REDIS_URL" && !k.startsWith("DUMPLINGS_")) env[k] = v;
  }
  return env;
}

describe("the durable demo's dumplings ui command", () => {
  it("shows the run the demo made", async () => {
    const demo = spawnSync(process.execPath, [...programArgs("demo/durable"), "--local"], {
      cwd: ROOT,
      env: cleanEnv(),
      encoding: "utf8",
      timeout: 150_000,
    });
    const out = `${demo.stdout}\n${demo.stderr}`;
    const db = /^journal: SQLite (\S+);/m.exec(out)?.[1];
    try {
      expect(demo.status, out).toBe(0);
      const lines = demo.stdout.trimEnd().split("\n");
      const ui = /^in a browser: npm run dumplings -- (ui --journal sqlite:(\S+))$/.exec(lines.at(-2) ?? "");
      expect(ui, out).not.toBeNull();
      const runId = /the run is at \/runs\/(\S+)\)$/.exec(lines.at(-1) ?? "")?.[1];
      expect(runId, out).toBeDefined();
      expect(ui?.[2]).toBe(db);
      // run the printed command (the `dumplings` that `npm run dumplings` starts), on any free port
      const child = spawn(
        process.execPath,
        [...programArgs("cli/index"), ...(ui?.[1] ?? "").split(" "), "--port", "0"],
        {
          cwd: path.join(ROOT, "test"), // no default stores here
          env: cleanEnv(),
          stdio: ["ignore", "pipe", "pipe"],
        },
      );
      let stderr = "";
      child.stderr.on("data", (d: Buffer) => {
        stderr += d.toString();
      });
      try {
        const address = await new Promise<string>((resolve, reject) => {
          let text = "";
          child.stdout.on("data", (d: Buffer) => {
            text += d.toString();
            if (text.includes("\n")) resolve(text.split("\n")[0] as string);
          });
          child.once("exit", (code) => reject(new Error(`dumplings ui exited ${code}: ${stderr}`)));
        });
        expect(address).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\?token=/);
        const login = await fetch(address, { redirect: "manual" });
        const cookie = (login.headers.get("set-cookie") ?? "").split(";")[0] as string;
        const page = await fetch(`${new URL(address).origin}/runs/${runId}`, { headers: { cookie } });
        expect(page.status).toBe(200);
        const html = await page.text();
        expect(html).toContain('<span data-run-status class="badge b-completed">completed</span>');
        expect(html).toMatch(/<code>tool:[a-z_]+<\/code>/);
        const home = await (await fetch(`${new URL(address).origin}/`, { headers: { cookie } })).text();
        expect(home).toContain("no store at");
        expect(stderr).toMatch(/does not exist; its pages say so/);
      } finally {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        expect(await exited).toBe(0);
      }
    } finally {
      if (db) rmSync(path.dirname(db), { recursive: true, force: true });
    }
  }, 180_000);
});
