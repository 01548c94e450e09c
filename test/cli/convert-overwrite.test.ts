/**
 * `dumplings convert` never overwrites a session the target holds unless
 * `--overwrite` (issue 11, item 13): without it nothing is copied and the
 * clashing keys are named (`KEY_EXISTS`); with it the replaced sessions are
 * reported as replaced, never as "verified identical" new copies.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { makeState } from "../../src/testing/states.js";
import { runCli } from "./run-cli.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-cli-convert-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

let n = 0;
let from: string;
let to: string;
const older = makeState([{ role: "user", content: "old question" }]);
const newer = makeState([
  { role: "user", content: "old question" },
  { role: "assistant", content: "a newer answer only the target has" },
]);

async function targetHistory(key: string): Promise<unknown[] | undefined> {
  const b = new SQLiteBackend({ path: to.slice("sqlite:".length) });
  try {
    return (await b.listKeys()).includes(key) ? (await b.load(key))?.history : undefined;
  } finally {
    await b.close();
  }
}

beforeEach(async () => {
  n++;
  const dir = path.join(tmp, `src-${n}`);
  const db = path.join(tmp, `target-${n}.db`);
  from = `file:${dir}`;
  to = `sqlite:${db}`;
  const source = new FileBackend({ baseDir: dir });
  await source.save("a", older);
  await source.save("b", older);
  const target = new SQLiteBackend({ path: db });
  await target.save("a", newer);
  await target.close();
});

describe("convert into a target that already holds a key", () => {
  it("refuses it without --overwrite, names the key and copies nothing", async () => {
    const r = runCli(["convert", "--from", from, "--to", to, "-q"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(
      /1 session of file:.* already exists in sqlite:.*: "a"; nothing was copied; pass --overwrite.*\(KEY_EXISTS\)$/m,
    );
    expect(r.stdout).not.toMatch(/verified identical/);
    expect(await targetHistory("a")).toEqual(newer.history);
    expect(await targetHistory("b")).toBeUndefined();
  });

  it("with --json, the error is JSON on stdout with its code", () => {
    const r = runCli(["convert", "--from", from, "--to", to, "-q", "--json"]);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({ error: { code: "KEY_EXISTS", exitCode: 1 } });
  });

  it("replaces it with --overwrite and reports it as replaced, not as a verified new copy", async () => {
    const r = runCli(["convert", "--from", from, "--to", to, "-q", "--overwrite"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(
      /copied 2 sessions .*; 1 of 1 new verified identical; replaced 1 existing session of the target \(--overwrite\): a\n$/,
    );
    expect(await targetHistory("a")).toEqual(older.history);
    const j = runCli(["convert", "--from", from, "--to", to, "-q", "--overwrite", "--json"]);
    expect(JSON.parse(j.stdout)).toMatchObject({ copied: 2, created: 0, overwritten: ["a", "b"], mismatches: [] });
  });
});
