/**
 * FileBackend's OS locks (`locks: "os"`, the default where fs-native-extensions
 * loads): an advisory lock on an open descriptor of `.<key>.duas.lck`, a file
 * kept between saves. A holder in another process makes a write wait, then
 * time out; the OS releases the lock of a process killed with SIGKILL (no
 * stale lock to break); saves create and remove no file; `delete` removes the
 * lock file while holding it and a writer waiting on it takes the next one.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { BackendError, InvalidOptionError } from "../../src/core/errors.js";
import type { AgentState } from "../../src/core/state.js";
import { makeState } from "../../src/testing/states.js";

const root = mkdtempSync(path.join(tmpdir(), "duas-locks-"));
const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) c.kill("SIGKILL");
  rmSync(root, { recursive: true, force: true });
});

const st = (n: number): AgentState =>
  makeState(
    Array.from({ length: n }, (_, i) => ({ role: "user" as const, content: `m${i}` })),
    { name: "locks", uuid: "00000000-0000-4000-8000-00000000010c" },
  );

/** A child process that takes the OS lock on `file` and prints "locked", then holds it until killed. */
async function holder(file: string): Promise<ChildProcess> {
  const code = `
    const fs = require("node:fs");
    const { tryLock } = require("fs-native-extensions");
    const fd = fs.openSync(${JSON.stringify(file)}, fs.constants.O_RDWR | fs.constants.O_CREAT, 0o644);
    if (!tryLock(fd)) { process.stdout.write("busy"); process.exit(3); }
    process.stdout.write("locked");
    setInterval(() => {}, 1000);
  `;
  const child = spawn(process.execPath, ["-e", code], { cwd: process.cwd(), stdio: ["ignore", "pipe", "inherit"] });
  children.push(child);
  const said = await new Promise<string>((resolve) => child.stdout?.once("data", (d: Buffer) => resolve(d.toString())));
  expect(said).toBe("locked");
  return child;
}

describe('FileBackend locks: "os"', () => {
  it("saves keep one lock file (same inode), create no other file, and remove nothing", async () => {
    const dir = mkdtempSync(path.join(root, "d-"));
    const b = new FileBackend({ baseDir: dir });
    let { revision } = await b.write("k", st(1), { expectedRevision: null });
    const lck = path.join(dir, ".k.duas.lck");
    const ino = statSync(lck).ino;
    for (let n = 2; n <= 20; n++) {
      ({ revision } = await b.write("k", st(n), { expectedRevision: revision, baseLength: n - 1 }));
    }
    expect(statSync(lck).ino).toBe(ino);
    expect(existsSync(path.join(dir, "k.duas.lock"))).toBe(false);
    expect((await b.read("k"))?.state.history).toHaveLength(20);
  });

  it("a holder in another process makes a write wait, then time out; once it is SIGKILLed the write goes on", async () => {
    const dir = mkdtempSync(path.join(root, "d-"));
    const b = new FileBackend({ baseDir: dir, lockTimeoutMs: 300 });
    const { revision } = await b.write("k", st(1), { expectedRevision: null });
    const child = await holder(path.join(dir, ".k.duas.lck"));
    const started = Date.now();
    const e = await b.write("k", st(2), { expectedRevision: revision, baseLength: 1 }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(BackendError);
    expect((e as Error).message).toMatch(/timed out after 300 ms waiting for the lock/);
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect((await b.read("k"))?.revision).toBe(revision); // nothing written
    // A write waiting when the holder dies gets the lock: the OS released it, nothing stale to break.
    const slow = new FileBackend({ baseDir: dir, lockTimeoutMs: 10_000 });
    const two = st(2);
    const waiting = slow.write("k", two, { expectedRevision: revision, baseLength: 1 });
    await new Promise((r) => setTimeout(r, 100));
    child.kill("SIGKILL");
    const w = await waiting;
    expect(w.revision).toBe(revision + 1);
    expect((await b.read("k"))?.state).toEqual(two);
  });

  it("delete removes the lock file while holding it; a writer waiting on it takes the next one", async () => {
    const dir = mkdtempSync(path.join(root, "d-"));
    const b = new FileBackend({ baseDir: dir });
    await b.write("k", st(1), { expectedRevision: null });
    const lck = path.join(dir, ".k.duas.lck");
    expect(existsSync(lck)).toBe(true);
    // many writers and deletes at once, across instances: every outcome is a whole state or nothing
    const others = [0, 1, 2].map(() => new FileBackend({ baseDir: dir }));
    const results = await Promise.allSettled([
      b.delete("k"),
      ...others.map((o, i) => o.write("k", st(3 + i), { force: true })),
      b.delete("k"),
    ]);
    for (const r of results) expect(r.status).toBe("fulfilled");
    const last = await new FileBackend({ baseDir: dir }).read("k");
    if (last) expect([3, 4, 5]).toContain(last.state.history.length);
    expect(await b.delete("k")).toBe(last !== undefined);
    expect(existsSync(lck)).toBe(false);
    expect(await b.listKeys()).toEqual([]);
  });

  it("DUMPLINGS_FILE_LOCKS sets the default kind for every FileBackend of the process; a bad value names it", async () => {
    const before = process.env.DUMPLINGS_FILE_LOCKS;
    try {
      process.env.DUMPLINGS_FILE_LOCKS = "files";
      const dir = mkdtempSync(path.join(root, "d-"));
      const b = new FileBackend({ baseDir: dir });
      await b.write("k", st(1), { expectedRevision: null });
      expect(existsSync(path.join(dir, ".k.duas.lck"))).toBe(false); // a lock file per save, removed after it
      expect(existsSync(path.join(dir, "k.duas.lock"))).toBe(false);
      const os = new FileBackend({ baseDir: dir, locks: "os" }); // the option wins
      await os.write("k", st(2), { force: true });
      expect(existsSync(path.join(dir, ".k.duas.lck"))).toBe(true);
      process.env.DUMPLINGS_FILE_LOCKS = "flock";
      expect(() => new FileBackend({ baseDir: dir })).toThrow(/DUMPLINGS_FILE_LOCKS/);
      expect(() => new FileBackend({ baseDir: dir, locks: "files" })).not.toThrow();
    } finally {
      if (before === undefined) delete process.env.DUMPLINGS_FILE_LOCKS;
      else process.env.DUMPLINGS_FILE_LOCKS = before;
    }
  });

  it("a bad locks value is an InvalidOptionError", () => {
    expect(() => new FileBackend({ baseDir: root, locks: "flock" as "os" })).toThrow(InvalidOptionError);
    expect(() => new FileBackend({ baseDir: root, locks: "files" })).not.toThrow();
  });
});
