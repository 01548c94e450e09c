/**
 * The closing hint of `npm run demo:durable` (issue 11, item 17; issue 14):
 * by default the journal is kept and the demo ends with commands that work in
 * this repository (`npm run dumplings -- runs …`, `… ui …`); with `--clean`
 * the journal is removed and the hint names no path.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { programArgs, ROOT, runCli } from "../cli/run-cli.js";

function demo(...args: string[]): { status: number | null; out: string } {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && k !== "REDIS_URL") env[k] = v;
  const r = spawnSync(process.execPath, [...programArgs("demo/durable"), "--local", ...args], {
    cwd: ROOT,
    env,
    encoding: "utf8",
    timeout: 150_000,
  });
  return { status: r.status, out: `${r.stdout}\n${r.stderr}` };
}

describe("the durable demo's closing hint", () => {
  it("by default, keeps the journal and ends with commands that work here (dumplings ui last)", () => {
    const { status, out } = demo();
    const db = /^journal: SQLite (\S+);/m.exec(out)?.[1];
    try {
      expect(status, out).toBe(0);
      const hint =
        /^see it yourself \(the journal is kept\): npm run dumplings -- (runs \S+ --journal sqlite:(\S+))$/m.exec(out);
      expect(hint, out).not.toBeNull();
      const [, command, journal] = hint as RegExpExecArray;
      expect(journal).toBe(db);
      expect(existsSync(journal as string)).toBe(true);
      // `npm run dumplings` runs `node dist/cli/index.js` (after rebuilding a stale dist/): the program runCli starts
      const scripts = (
        JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> }
      ).scripts;
      expect(scripts.dumplings).toMatch(/(^|&& )node dist\/cli\/index\.js$/);
      const r = runCli((command as string).split(" "));
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/ completed /);
      expect(out.trimEnd().split("\n").at(-2)).toBe(`in a browser: npm run dumplings -- ui --journal sqlite:${db}`);
    } finally {
      if (db) rmSync(path.dirname(db), { recursive: true, force: true });
    }
  }, 180_000);

  it("with --clean, the journal is gone and the hint names no path", () => {
    const { status, out } = demo("--clean");
    expect(status, out).toBe(0);
    const db = /^journal: SQLite (\S+);/m.exec(out)?.[1];
    expect(db && existsSync(db)).toBe(false);
    expect(out).toMatch(/^the journal is removed now \(--clean\); to look at it yourself: npm run demo:durable /m);
    expect(out).not.toMatch(/see it yourself/);
  }, 180_000);
});
