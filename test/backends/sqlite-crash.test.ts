/**
 * kill -9 in the middle of saves (issue 4 §7): afterwards every session loads
 * as its last complete save (or the one in flight), never torn, and the
 * database takes further writes.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";

const CHILD = fileURLToPath(new URL("../fixtures/sqlite/crash-child.ts", import.meta.url));
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-sqlite-crash-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Same rule as configPrompt() in the child. */
const configPrompt = (i: number) => `prompt ${Math.floor(i / 5)}`;

/** Same rule as fullHistory() in the child. */
const fullHistory = (v: number) =>
  Array.from({ length: (v % 40) + 1 }, (_, j) => ({ role: "user", content: `v${v}-${j} ${"x".repeat(v % 300)}` }));

/** Runs the child; kills it with SIGKILL after `killAfter` more iterations (or lets it finish). Returns the last i printed. */
function runChild(
  dbPath: string,
  opts: { killAfter?: number; limit?: number },
): Promise<{ last: number; signal: string | null }> {
  const args = ["--import", "tsx", CHILD, dbPath, ...(opts.limit === undefined ? [] : [String(opts.limit)])];
  const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"] });
  let buffer = "";
  let seen = 0;
  let last = -1;
  let err = "";
  child.stderr.on("data", (d: Buffer) => {
    err += d.toString();
  });
  child.stdout.on("data", (d: Buffer) => {
    buffer += d.toString();
    const lines = buffer.split("\n");
    buffer = lines.pop() ?? "";
    for (const line of lines) {
      last = Number(line);
      seen++;
      if (opts.killAfter !== undefined && seen === opts.killAfter) child.kill("SIGKILL");
    }
  });
  return new Promise((resolve, reject) => {
    child.on("exit", (code, signal) => {
      if (opts.killAfter !== undefined && signal !== "SIGKILL")
        reject(new Error(`child was not killed: ${code} ${err}`));
      else if (opts.killAfter === undefined && code !== 0) reject(new Error(`child failed (${code}): ${err}`));
      else resolve({ last, signal });
    });
  });
}

async function checkConsistent(dbPath: string, lastPrinted: number): Promise<number> {
  const backend = new SQLiteBackend({ dbPath });
  const appendSession = await backend.read("crash-append");
  const history = appendSession?.state.history ?? [];
  // The last printed save is durable; the one in flight may or may not have landed.
  expect([lastPrinted + 1, lastPrinted + 2]).toContain(history.length);
  history.forEach((m, j) => {
    expect(m).toEqual({ role: "user", content: `m${j}` });
  });
  expect(appendSession?.state.state.fields.i).toBe(history.length - 1);
  expect(appendSession?.state.config.prompt).toBe(configPrompt(history.length - 1));
  expect(appendSession?.state.meta.messageCount).toBe(history.length);
  const full = backend.load("crash-full");
  const version = full.state.fields.version as number;
  expect(version % 3).toBe(0);
  expect(version).toBeGreaterThanOrEqual(lastPrinted - (lastPrinted % 3));
  expect(version).toBeLessThanOrEqual(history.length - 1);
  expect(full.history).toEqual(fullHistory(version));
  expect(full.meta.messageCount).toBe(full.history.length);
  backend.close();
  return history.length;
}

describe("SQLite kill -9 in the middle of saves", () => {
  it("every session loads as its last complete save after SIGKILL, twice, and writing goes on", async () => {
    const dbPath = path.join(dir, "crash.db");
    const first = await runChild(dbPath, { killAfter: 300 });
    expect(first.last).toBeGreaterThanOrEqual(299);
    const afterFirst = await checkConsistent(dbPath, first.last);
    const second = await runChild(dbPath, { killAfter: 200 });
    expect(second.last).toBeGreaterThanOrEqual(afterFirst + 199);
    const afterSecond = await checkConsistent(dbPath, second.last);
    const final = await runChild(dbPath, { limit: 10 });
    expect(final.last).toBe(afterSecond + 9);
    expect(await checkConsistent(dbPath, final.last)).toBe(final.last + 1);
  });
});
