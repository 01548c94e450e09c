/**
 * Readers of a `.duas` file that another process is appending to never see a
 * torn state: every load returns a complete, consistent history (a prefix of
 * what the writer wrote, its count equal to message_count), never a false
 * "truncated file" FormatError (found by a new-user test: a load that sized
 * its read before an append finished saw the new header with the old body).
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const dir = mkdtempSync(path.join(os.tmpdir(), "dumplings-file-read-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it("loads during another process's appends are always whole", async () => {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", path.join(here, "../fixtures/crash/file-appender.ts"), dir, "k", "3000"],
    {
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  let out = "";
  child.stdout.on("data", (d) => {
    out += String(d);
  });
  for (let i = 0; i < 1500 && !out.includes("ready"); i++) await new Promise((r) => setTimeout(r, 20));
  expect(out).toContain("ready");
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  const backend = new FileBackend({ baseDir: dir });
  let loads = 0;
  let last = 0;
  const errors: string[] = [];
  while (!out.includes("done")) {
    await new Promise((r) => setImmediate(r)); // let the child's output events in
    try {
      const state = await backend.load("k");
      expect(state.history.length).toBe(state.meta.messageCount);
      expect(state.history.length).toBeGreaterThanOrEqual(last);
      const n = state.history.length;
      if (n > 1)
        expect(state.history[n - 1]).toMatchObject({
          content: expect.stringMatching(new RegExp(`^message ${n - 1} `)),
        });
      last = n;
      loads++;
    } catch (e) {
      errors.push(String((e as Error).message));
    }
  }
  expect(await exited).toBe(0);
  expect(errors).toEqual([]);
  expect(loads).toBeGreaterThan(10);
});
