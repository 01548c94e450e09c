/**
 * A deleted file session never comes back inside a new one: the header journal
 * is bound to the file's incarnation (`[META] generation`), so a journal left
 * by a crash between a delete's two unlinks is garbage for a session created
 * later under the same key — even when the new file reuses the old inode and
 * revision numbers (ext4 reuses a freed inode at once). Checked with the
 * journal put back by hand, and with a real child process SIGKILLed before
 * each file-system operation of delete → create → append.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { decodeStateBytes } from "../../src/core/codec/bytes.js";
import { ConflictError } from "../../src/core/errors.js";
import type { AgentState } from "../../src/core/state.js";
import { deletedAt, recreatedAt } from "../fixtures/crash/file-identity.js";

const root = mkdtempSync(path.join(tmpdir(), "duas-file-identity-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const child = fileURLToPath(new URL("../fixtures/crash/file-recreate.ts", import.meta.url));
const KEY = "reused";

/** A session whose last save went through the header journal (the journal file stays). */
async function oldSessionWithJournal(dir: string): Promise<string> {
  const backend = new FileBackend({ baseDir: dir });
  const { revision } = await backend.write(KEY, deletedAt(3), { expectedRevision: null });
  const r = await backend.write(KEY, deletedAt(4), { expectedRevision: revision, baseLength: 3 });
  expect(r.rewritten).toBe(false);
  const journal = path.join(dir, `.${KEY}.duas.hdr`);
  expect(existsSync(journal), "the append went through the header journal").toBe(true);
  return journal;
}

/** Everything a reader can get for KEY, through every read path, from a backend with no cache. */
async function readAll(dir: string): Promise<{ state: AgentState; revision: number } | undefined> {
  const backend = new FileBackend({ baseDir: dir });
  const read = await backend.read(KEY);
  if (read === undefined) {
    expect(await backend.readHeader(KEY)).toBeUndefined();
    return undefined;
  }
  const streamed = [];
  for await (const m of backend.iterHistory(KEY)) streamed.push(m);
  expect(streamed).toEqual(read.state.history);
  const header = await backend.readHeader(KEY);
  const { history: _, ...rest } = read.state;
  expect(header?.header).toEqual(rest);
  expect(header?.revision).toBe(read.revision);
  return read;
}

describe("file backend: session identity", () => {
  it.each([
    ["a journal", false],
    ["a journal of an older version (no generation)", true],
  ])("%s left by a deleted session never applies to a new session that reuses its inode", async (_, v2) => {
    const dir = mkdtempSync(path.join(root, "manual-"));
    const journal = await oldSessionWithJournal(dir);
    const bytes = readFileSync(journal);
    const backend = new FileBackend({ baseDir: dir });
    expect(await backend.delete(KEY)).toBe(true);
    const { revision } = await backend.write(KEY, recreatedAt(1), { expectedRevision: null });
    // What a SIGKILL between the two unlinks of a delete leaves behind, once the new file got the freed inode
    // (ext4 hands a freed inode out again at once): an intact journal naming the new file's inode.
    // (Its revision is set to the new file's too: new sessions start above every deleted revision, so only
    // the generation is left to tell the journal is not this file's.)
    writeFileSync(journal, rebind(bytes, statSync(path.join(dir, `${KEY}.duas`)).ino, revision, v2));
    const read = await readAll(dir);
    expect(read?.state).toEqual(recreatedAt(1));
    expect(read?.revision).toBe(revision);
    // the next save (another process: no cache) is not a ConflictError, and what it leaves is the new session
    const w = await new FileBackend({ baseDir: dir }).write(KEY, recreatedAt(2), {
      expectedRevision: revision,
      baseLength: 1,
    });
    expect(w.revision).toBe(revision + 1);
    expect((await readAll(dir))?.state).toEqual(recreatedAt(2));
    expect(decodeStateBytes(readFileSync(path.join(dir, `${KEY}.duas`)))).toEqual(recreatedAt(2));
  });
});

describe("file backend: revisions of a re-created session", () => {
  it("start above every deleted revision: a stale writer of the deleted session gets a ConflictError", async () => {
    const dir = mkdtempSync(path.join(root, "floor-"));
    const backend = new FileBackend({ baseDir: dir });
    let { revision } = await backend.write(KEY, deletedAt(1), { expectedRevision: null });
    ({ revision } = await backend.write(KEY, deletedAt(2), { expectedRevision: revision, baseLength: 1 }));
    const stale = revision;
    expect(await backend.delete(KEY)).toBe(true);
    // another process (no cache) re-creates the key
    const created = await new FileBackend({ baseDir: dir }).write(KEY, recreatedAt(1), { expectedRevision: null });
    expect(created.revision).toBeGreaterThan(stale);
    const e = await new FileBackend({ baseDir: dir })
      .write(KEY, deletedAt(3), { expectedRevision: stale, baseLength: 2 })
      .catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ConflictError);
    expect((await readAll(dir))?.state).toEqual(recreatedAt(1));
    // other keys start above the floor too, and listKeys never shows the floor file
    const other = await backend.write("other", recreatedAt(1), { expectedRevision: null });
    expect(other.revision).toBeGreaterThan(stale);
    expect(await backend.listKeys()).toEqual(["other", KEY].sort());
  });
});

/**
 * The journal `bytes` re-sealed for inode `ino` and `revision` (in the `/2` layout of older versions when `v2`): intact in
 * every respect a reader checks, except that it belongs to another incarnation of the file.
 */
function rebind(bytes: Buffer, ino: number, revision: number, v2: boolean): Buffer {
  const nl = bytes.indexOf(0x0a);
  const fields = bytes.toString("latin1", 0, nl).split(" ");
  const body = bytes.subarray(nl + 1);
  const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
  // /3: magic ino generation revision headerLength dataOffset linesLength sha256(head + body); /2: no generation
  const rest = [String(revision), ...(fields[0] === "duas-header-journal/3" ? fields.slice(4, 7) : fields.slice(3, 6))];
  if (v2) {
    return Buffer.concat([Buffer.from(`duas-header-journal/2 ${ino} ${rest.join(" ")} ${sha(body)}\n`), body]);
  }
  const head = `duas-header-journal/3 ${ino} ${fields[2]} ${rest.join(" ")}`;
  return Buffer.concat([Buffer.from(`${head} ${sha(Buffer.concat([Buffer.from(head), body]))}\n`), body]);
}

/** Runs the child with `crashAt`; resolves whether it was killed and how many operations it counted. */
function runChild(dir: string, crashAt: number): Promise<{ killed: boolean; ops: number }> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ["--import", "tsx", child, dir, KEY, String(crashAt)], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    proc.stdout?.on("data", (c: Buffer) => {
      out += c.toString();
    });
    proc.stderr?.on("data", (c: Buffer) => {
      err += c.toString();
    });
    proc.on("error", reject);
    proc.on("exit", (code, signal) => {
      if (signal === "SIGKILL") resolve({ killed: true, ops: crashAt });
      else if (code === 0) resolve({ killed: false, ops: Number(/^ops (\d+)/.exec(out)?.[1]) });
      else reject(new Error(`child exited with ${code}: ${err}`));
    });
  });
}

describe("file backend: SIGKILL before each file-system operation of delete → create → append", () => {
  it("leaves the old session, nothing, or the new one at a save it made — never a mix — and saving goes on", async () => {
    const allowed = [deletedAt(4), recreatedAt(1), recreatedAt(2)];
    const seen = new Set<string>();
    let total = Number.POSITIVE_INFINITY;
    const check = async (crashAt: number) => {
      const dir = mkdtempSync(path.join(root, `kill-${crashAt}-`));
      await oldSessionWithJournal(dir);
      const { killed, ops } = await runChild(dir, crashAt);
      if (!killed) total = Math.min(total, ops);
      const read = await readAll(dir);
      const which =
        read === undefined ? -1 : allowed.findIndex((s) => JSON.stringify(s) === JSON.stringify(read.state));
      if (read !== undefined) {
        // never a mix (the new session with the old one's name or messages): one of the three states, exactly
        expect(which, `SIGKILL before operation ${crashAt}: ${JSON.stringify(read.state.meta)}`).not.toBe(-1);
        expect(read.state).toEqual(allowed[which]);
      }
      seen.add(read === undefined ? "none" : (read.state.meta.agentName ?? "?") + read.state.history.length);
      // The next writer (a new process: no cache) goes on without a ConflictError.
      const next = new FileBackend({ baseDir: dir });
      if (read === undefined || read.state.meta.agentName === "old-session") {
        if (read) expect(await next.delete(KEY)).toBe(true);
        await next.write(KEY, recreatedAt(1), { expectedRevision: null });
        await next.write(KEY, recreatedAt(2), { expectedRevision: (await next.read(KEY))?.revision, baseLength: 1 });
      } else if (read.state.history.length === 1) {
        await next.write(KEY, recreatedAt(2), { expectedRevision: read.revision, baseLength: 1 });
      }
      expect((await readAll(dir))?.state).toEqual(recreatedAt(2));
      rmSync(dir, { recursive: true, force: true });
      return killed;
    };
    // Operations are counted by the child; run in small parallel batches until one gets through them all.
    for (let at = 1; at <= 80 && at <= total; at += 3) {
      await Promise.all([at, at + 1, at + 2].filter((n) => n <= total + 1).map(check));
    }
    expect(Number.isFinite(total), "the child finished within 80 operations").toBe(true);
    expect(total).toBeGreaterThan(15);
    expect(seen).toContain("old-session4");
    expect(seen).toContain("none");
    expect(seen).toContain("new-session1");
    expect(seen).toContain("new-session2");
  }, 180_000);
});
