/**
 * Two real processes saving one key (SQLite): compare-and-set reports every
 * lost race as a ConflictError, so after reload-and-retry no message is lost
 * or duplicated ("two processes auto-saving one key never lose a message silently").
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { BaseAgent, loadState } from "../../src/index.js";

const run = promisify(execFile);
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-2w-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const CHILD = path.resolve("test/persistence/children/cas-child.ts");

describe("two processes saving one key", () => {
  it("every message of both writers is stored exactly once, in each writer's order", async () => {
    const dbPath = path.join(tmp, "shared.db");
    const backend = new SQLiteBackend({ dbPath });
    await new BaseAgent({ name: "shared", history: [{ role: "system", content: "start" }] }).saveState("shared", {
      backend,
    });
    const N = 25;
    const outs = await Promise.all(
      ["A", "B"].map((who) =>
        run(process.execPath, ["--import", "tsx", CHILD, dbPath, "shared", who, String(N)], { timeout: 120_000 }),
      ),
    );
    const conflicts = outs.map((o) => (JSON.parse(o.stdout.trim()) as { conflicts: number }).conflicts);
    expect(conflicts.every((c) => Number.isInteger(c))).toBe(true);
    const final = await loadState("shared", { backend });
    // Only successful saves advance the revision: 1 (initial) + one per stored message.
    expect((await backend.read("shared"))?.revision).toBe(1 + 2 * N);
    backend.close();
    const contents = final.history.map((m) => m.content as string);
    expect(contents[0]).toBe("start");
    expect(contents).toHaveLength(1 + 2 * N);
    for (const who of ["A", "B"]) {
      const mine = contents.filter((c) => c.startsWith(`${who}-`));
      expect(mine).toEqual(Array.from({ length: N }, (_, i) => `${who}-${i}`));
    }
  });
});
