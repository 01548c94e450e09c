/**
 * The closing hint of `npm run demo:durable` (issue 11, item 17): with
 * `--keep` it names a journal that still exists and a command that works in
 * this repository (`npm run dumplings -- runs …`); without `--keep` the
 * journal is removed and the hint names no path, only how to keep it.
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
  it("with --keep, names the kept journal and a command that works here", () => {
    const { status, out } = demo("--keep");
    const db = /^journal: SQLite (\S+);/m.exec(out)?.[1];
    try {
      expect(status, out).toBe(0);
      const hint =
        /^see it yourself \(the journal is kept\): npm run dumplings -- (runs \S+ --journal sqlite:(\S+))$/m.exec(out);
      expect(hint, out).not.toBeNull();
      const [, command, journal] = hint as RegExpExecArray;
      expect(journal).toBe(db);
      expect(existsSync(journal as string)).toBe(true);
      // `npm run dumplings` is `node dist/cli/index.js`: the same program runCli starts
      const scripts = (
        JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> }
      ).scripts;
      expect(scripts.dumplings).toBe("node dist/cli/index.js");
      const r = runCli((command as string).split(" "));
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/ completed /);
    } finally {
      if (db) rmSync(path.dirname(db), { recursive: true, force: true });
    }
  }, 180_000);

  it("without --keep, the journal is gone and the hint names no path", () => {
    const { status, out } = demo();
    expect(status, out).toBe(0);
    const db = /^journal: SQLite (\S+);/m.exec(out)?.[1];
    expect(db && existsSync(db)).toBe(false);
    expect(out).toMatch(/^the journal is removed now; to look at it yourself: npm run demo:durable -- --keep/m);
    expect(out).not.toMatch(/see it yourself/);
  }, 180_000);
});
