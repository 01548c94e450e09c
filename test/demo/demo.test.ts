/**
 * `npm run demo` end to end: the real demo program as a child process on
 * temporary storage (DUMPLINGS_PERSISTENCE_DIR / _DB), run twice to show it
 * overwrites cleanly; then the CLI reads what it stored.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { loadSampleConversations } from "../../src/testing/samples.js";
import { programArgs, runCli } from "../cli/run-cli.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-demo-"));
const dir = path.join(tmp, "sessions");
const db = path.join(tmp, "sessions.db");
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function runDemo(where = { dir, db }): { code: number | null; stdout: string; stderr: string } {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("DUMPLINGS_")) env[k] = v;
  env.DUMPLINGS_PERSISTENCE_DIR = where.dir;
  env.DUMPLINGS_PERSISTENCE_DB = where.db;
  const r = spawnSync(process.execPath, programArgs("demo/main"), {
    cwd: ROOT,
    env,
    encoding: "utf8",
  });
  if (r.error) throw r.error;
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe("npm run demo", () => {
  const samples = loadSampleConversations();

  it("round-trips every bundled conversation through both backends and prints the table", () => {
    for (let run = 0; run < 2; run++) {
      const r = runDemo();
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/^key\s+protocol\s+messages\s+tool calls\s+file bytes\s+file save ms/m);
      for (const s of samples) {
        expect(r.stdout).toMatch(
          new RegExp(`^${s.id.replace(/\./g, "\\.")}\\s+${s.protocol}\\s+${s.messages.length}\\s.*\\syes$`, "m"),
        );
      }
      const total = samples.reduce((n, s) => n + s.messages.length, 0);
      expect(r.stdout).toMatch(new RegExp(`^total \\(${samples.length}\\)\\s+${total}\\s.*\\sall$`, "m"));
      expect(r.stdout).toContain("npm run dumplings -- ls");
      expect(r.stdout).toContain("--backend sqlite");
    }
    expect(readdirSync(dir).filter((f) => f.endsWith(".duas"))).toHaveLength(samples.length);
    expect(existsSync(db)).toBe(true);
    const ls = runCli(["ls", "--backend", "sqlite", "--db", db]);
    expect(ls.stdout.trimEnd().split("\n")).toEqual(samples.map((s) => s.id).sort());
  });

  it("exits non-zero with one line when it cannot store", () => {
    const blocker = path.join(tmp, "not-a-dir");
    writeFileSync(blocker, "a file where the sessions directory should be");
    const r = runDemo({ dir: path.join(blocker, "sessions"), db: path.join(tmp, "other.db") });
    expect(r.code).toBe(1);
    expect(r.stderr.trimEnd().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/^demo: .*\(BACKEND_ERROR\)\n$/);
  });
});
