/**
 * FileBackend keeps a key's lock and `.duas` descriptors open between saves
 * (outside Windows): a save uses them only while the path still names the file
 * they were opened on. These tests change the files behind a backend's back —
 * another instance deletes, rewrites or replaces them — and check that every
 * save lands in the file now at the path, and that revisions stay exact.
 */
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { ConflictError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import type { AgentState } from "../../src/core/state.js";
import { makeState } from "../../src/testing/states.js";

const root = mkdtempSync(path.join(tmpdir(), "duas-kept-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const KEY = "k";
const msg = (i: number): Message => ({ role: i % 2 ? "assistant" : "user", content: `message ${i}` });
const stateOf = (n: number, uuid = "u-1"): AgentState =>
  makeState(
    Array.from({ length: n }, (_, i) => msg(i)),
    { uuid, savedAt: `2026-12-01T00:00:${String(n % 60).padStart(2, "0")}.000Z` },
  );

async function fresh(dir: string): Promise<{ state: AgentState; revision: number } | undefined> {
  return new FileBackend({ baseDir: dir }).read(KEY);
}

describe("FileBackend: descriptors kept between saves", () => {
  it("two instances in one process take turns appending to one key: exact revisions, nothing lost", async () => {
    const dir = mkdtempSync(path.join(root, "d-"));
    const a = new FileBackend({ baseDir: dir });
    const b = new FileBackend({ baseDir: dir });
    let { revision } = await a.write(KEY, stateOf(1), { expectedRevision: null });
    for (let n = 2; n <= 40; n++) {
      const w = n % 2 ? a : b;
      const r = await w.write(KEY, stateOf(n), { expectedRevision: revision, baseLength: n - 1 });
      expect(r).toMatchObject({ revision: revision + 1, rewritten: false, written: 1 });
      revision = r.revision;
      // the other one's revision is now stale: a write with it is a ConflictError, nothing written
      await expect(
        (w === a ? b : a).write(KEY, stateOf(n + 1), { expectedRevision: revision - 1, baseLength: n }),
      ).rejects.toBeInstanceOf(ConflictError);
    }
    expect(await fresh(dir)).toEqual({ state: stateOf(40), revision });
  });

  it("concurrent saves of two instances: exactly one of each pair wins", async () => {
    const dir = mkdtempSync(path.join(root, "d-"));
    const a = new FileBackend({ baseDir: dir });
    const b = new FileBackend({ baseDir: dir });
    let { revision } = await a.write(KEY, stateOf(1), { expectedRevision: null });
    for (let n = 2; n <= 20; n++) {
      const results = await Promise.allSettled([
        a.write(KEY, stateOf(n), { expectedRevision: revision, baseLength: n - 1 }),
        b.write(KEY, stateOf(n, "u-2"), { expectedRevision: revision, baseLength: n - 1 }),
      ]);
      const won = results.filter((r) => r.status === "fulfilled");
      expect(won).toHaveLength(1);
      const lost = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
      expect(lost.reason).toBeInstanceOf(ConflictError);
      revision = (won[0] as PromiseFulfilledResult<{ revision: number }>).value.revision;
    }
    expect((await fresh(dir))?.revision).toBe(revision);
  });

  it("a save after another instance deleted the key and created it again writes the new file", async () => {
    const dir = mkdtempSync(path.join(root, "d-"));
    const a = new FileBackend({ baseDir: dir });
    const b = new FileBackend({ baseDir: dir });
    const r1 = await a.write(KEY, stateOf(1), { expectedRevision: null });
    const r2 = await a.write(KEY, stateOf(2), { expectedRevision: r1.revision, baseLength: 1 });
    expect(await b.delete(KEY)).toBe(true);
    const r3 = await b.write(KEY, stateOf(3, "u-2"), { expectedRevision: null });
    expect(r3.revision).toBeGreaterThan(r2.revision);
    // a's descriptors are of the deleted files: its stale revision is refused, then it appends to the new file
    await expect(a.write(KEY, stateOf(4), { expectedRevision: r2.revision, baseLength: 2 })).rejects.toBeInstanceOf(
      ConflictError,
    );
    const r4 = await a.write(KEY, stateOf(4, "u-2"), { expectedRevision: r3.revision, baseLength: 3 });
    expect(r4).toMatchObject({ revision: r3.revision + 1, rewritten: false });
    expect(await fresh(dir)).toEqual({ state: stateOf(4, "u-2"), revision: r4.revision });
  });

  it("a save after another instance rewrote the file whole (a new file renamed over it) appends to the new one", async () => {
    const dir = mkdtempSync(path.join(root, "d-"));
    const a = new FileBackend({ baseDir: dir });
    const b = new FileBackend({ baseDir: dir });
    const r1 = await a.write(KEY, stateOf(1), { expectedRevision: null });
    const r2 = await a.write(KEY, stateOf(2), { expectedRevision: r1.revision, baseLength: 1 });
    const r3 = await b.write(KEY, stateOf(5), { expectedRevision: r2.revision }); // no baseLength: whole file
    expect(r3.rewritten).toBe(true);
    const r4 = await a.write(KEY, stateOf(6), { expectedRevision: r3.revision, baseLength: 5 });
    expect(r4).toMatchObject({ revision: r3.revision + 1, rewritten: false, written: 1 });
    expect(await fresh(dir)).toEqual({ state: stateOf(6), revision: r4.revision });
  });

  it("a file replaced from outside (a copy renamed over it) is the one the next save reads and extends", async () => {
    const dir = mkdtempSync(path.join(root, "d-"));
    const a = new FileBackend({ baseDir: dir });
    const r1 = await a.write(KEY, stateOf(1), { expectedRevision: null });
    const r2 = await a.write(KEY, stateOf(2), { expectedRevision: r1.revision, baseLength: 1 });
    const file = path.join(dir, `${KEY}.duas`);
    const copy = `${file}.copy`;
    writeFileSync(copy, readFileSync(file));
    renameSync(copy, file); // same bytes, another inode: the kept descriptor is of the old one
    const r3 = await a.write(KEY, stateOf(3), { expectedRevision: r2.revision, baseLength: 2 });
    expect(r3.revision).toBe(r2.revision + 1);
    expect(await fresh(dir)).toEqual({ state: stateOf(3), revision: r3.revision });
  });

  it("close() releases the kept descriptors; the backend (and another one) saves on afterwards", async () => {
    const dir = mkdtempSync(path.join(root, "d-"));
    const a = new FileBackend({ baseDir: dir });
    const r1 = await a.write(KEY, stateOf(1), { expectedRevision: null });
    const r2 = await a.write(KEY, stateOf(2), { expectedRevision: r1.revision, baseLength: 1 });
    a.close();
    const r3 = await a.write(KEY, stateOf(3), { expectedRevision: r2.revision, baseLength: 2 });
    const b = new FileBackend({ baseDir: dir });
    const r4 = await b.write(KEY, stateOf(4), { expectedRevision: r3.revision, baseLength: 3 });
    b.close();
    expect(await fresh(dir)).toEqual({ state: stateOf(4), revision: r4.revision });
  });
});
