/**
 * Real processes writing one SQLite file at once (issue 4 §4, pb-15): 4
 * children × 500 iterations, each saving a distinct key and attempting a
 * compare-and-set append to one shared key.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { makeState } from "../../src/testing/states.js";

const CHILD = fileURLToPath(new URL("../fixtures/sqlite/stress-child.ts", import.meta.url));
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-sqlite-stress-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface ChildReport {
  id: string;
  appended: string[];
  conflicts: number;
  errors: string[];
}

function startChild(args: string[]): { child: ChildProcess; ready: Promise<void>; done: Promise<ChildReport> } {
  const child = spawn(process.execPath, ["--import", "tsx", CHILD, ...args], { stdio: ["pipe", "pipe", "pipe"] });
  let out = "";
  let err = "";
  let onReady: () => void = () => {};
  const ready = new Promise<void>((r) => {
    onReady = r;
  });
  child.stdout?.on("data", (d: Buffer) => {
    out += d.toString();
    if (out.startsWith("ready\n")) onReady();
  });
  child.stderr?.on("data", (d: Buffer) => {
    err += d.toString();
  });
  const done = new Promise<ChildReport>((resolve, reject) => {
    child.on("exit", (code) => {
      if (code !== 0) return reject(new Error(`child ${args[1]} exited ${code}: ${err}`));
      const line = out
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .pop();
      if (!line) return reject(new Error(`child ${args[1]} printed no report: ${out} ${err}`));
      resolve(JSON.parse(line) as ChildReport);
    });
  });
  return { child, ready, done };
}

describe("SQLite under load: 4 processes x 500 saves into one file", () => {
  it("no SQLITE_BUSY escapes, every shared-key conflict is reported, the shared history has exactly the successful appends", async () => {
    const dbPath = path.join(dir, "stress.db");
    const setup = new SQLiteBackend({ dbPath });
    const start = await setup.write("shared", makeState([], { name: "shared" }), { expectedRevision: null });
    setup.close();
    const SAVES = 500;
    const children = ["0", "1", "2", "3"].map((id) => startChild([dbPath, id, String(SAVES), "shared"]));
    await Promise.all(children.map((c) => c.ready));
    for (const c of children) c.child.stdin?.write("go\n");
    const reports = await Promise.all(children.map((c) => c.done));

    for (const r of reports) expect(r.errors, `child ${r.id}`).toEqual([]);
    for (const r of reports) expect(r.appended.length + r.conflicts).toBe(SAVES);
    const totalConflicts = reports.reduce((n, r) => n + r.conflicts, 0);
    const appended = reports.flatMap((r) => r.appended);
    console.log(`sqlite stress: ${appended.length} shared appends, ${totalConflicts} conflicts reported`);
    expect(totalConflicts).toBeGreaterThan(0); // the processes really raced

    const backend = new SQLiteBackend({ dbPath });
    const shared = await backend.read("shared");
    const contents = (shared?.state.history ?? []).map((m) => m.content as string);
    expect([...contents].sort()).toEqual([...appended].sort());
    expect(shared?.revision).toBe(start.revision + appended.length);
    for (const r of reports) {
      // Each child's own appends appear in the order it made them.
      const mine = contents.filter((c) => c.startsWith(`c${r.id}-`));
      expect(mine).toEqual(r.appended);
    }
    const keys = backend.listKeys();
    expect(keys).toHaveLength(4 * SAVES + 1);
    for (const id of ["0", "1", "2", "3"]) {
      expect(backend.load(`c${id}-${SAVES - 1}`).history).toEqual([{ role: "user", content: `c${id}-${SAVES - 1}` }]);
    }
    backend.close();
  });
});
