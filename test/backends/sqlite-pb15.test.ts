/**
 * pb-15 (sqlite-busy-multi-connection): three processes write one SQLite file
 * at once — one of them holding a read transaction open — and no
 * SQLITE_BUSY / "database is locked" reaches the caller.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";

const CHILD = fileURLToPath(new URL("../fixtures/sqlite/pb15-child.ts", import.meta.url));
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-sqlite-pb15-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function start(args: string[]) {
  const child = spawn(process.execPath, ["--import", "tsx", CHILD, ...args], { stdio: ["pipe", "pipe", "pipe"] });
  let out = "";
  let err = "";
  let onReady: () => void = () => {};
  const ready = new Promise<void>((r) => {
    onReady = r;
  });
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString();
    if (out.startsWith("ready\n")) onReady();
  });
  child.stderr.on("data", (d: Buffer) => {
    err += d.toString();
  });
  const done = new Promise<{ errors: string[] }>((resolve, reject) => {
    child.on("exit", (code) => {
      const line = out.split("\n").find((l) => l.startsWith("{"));
      if (code !== 0 || !line) reject(new Error(`child ${args.join(" ")} exited ${code}: ${err}`));
      else resolve(JSON.parse(line) as { errors: string[] });
    });
  });
  return { child, ready, done };
}

describe("pb-15: concurrent writers of one SQLite file never see SQLITE_BUSY", () => {
  it("P1 and P2 (holding a read transaction) save 200 keys each, P3 saves 'shared' 200 times: 401 keys, no errors", async () => {
    const dbPath = path.join(dir, "agent.db");
    new SQLiteBackend({ dbPath }).close(); // create the schema first, as an application's start-up would
    const children = [
      start([dbPath, "distinct", "p1", "200"]),
      start([dbPath, "hold-read", "p2", "200", "300"]),
      start([dbPath, "shared", "P3", "200"]),
    ];
    await Promise.all(children.map((c) => c.ready));
    for (const c of children) c.child.stdin.write("go\n");
    const results = await Promise.all(children.map((c) => c.done));
    for (const r of results) expect(r.errors).toEqual([]);

    const backend = new SQLiteBackend({ dbPath });
    const keys = backend.listKeys().sort();
    expect(keys).toHaveLength(401);
    for (let i = 0; i < 200; i++) {
      expect(keys).toContain(`p1-${i}`);
      expect(keys).toContain(`p2-${i}`);
    }
    const shared = backend.load("shared");
    expect(shared.state.fields).toEqual({ writer: "P3", n: 199 });
    expect(shared.history).toEqual([{ role: "user", content: "P3 199" }]);
    backend.close();
    const raw = new Database(dbPath);
    expect(raw.pragma("journal_mode", { simple: true })).toBe("wal");
    raw.close();
  });
});
