/**
 * Two keys, one file. A file system that folds case or normalises Unicode
 * (macOS and Windows by default; Docker bind mounts from them) opens
 * `Alice.duas` for the key `alice`, and the NFD spelling of `é` for the NFC
 * one: loading `alice` handed back Alice's agent (another user's
 * conversation), and deleting `alice` removed Alice's session. Files now
 * carry the key they were written under (`[META] key`), and the file backend
 * refuses a file reached under another key when both names lead to the same
 * file: on every read path (read/load, readHeader, iterHistory, the CLI),
 * writes (force included) and delete, with nothing read, written or removed.
 *
 * Linux file systems tell the names apart, so the second name is made here
 * the way such a file system presents it: a hard link, two names of one file.
 * A file merely copied to another key (two files) stays that key's own.
 */
import { copyFileSync, linkSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BaseAgent } from "../../src/agent/base-agent.js";
import { FileBackend } from "../../src/backends/file/index.js";
import { decodeStateBytes } from "../../src/core/codec/bytes.js";
import { KeyCollisionError } from "../../src/core/errors.js";
import type { AgentState } from "../../src/core/state.js";
import { loadState } from "../../src/index.js";
import { runCli } from "../cli/run-cli.js";

const root = mkdtempSync(path.join(tmpdir(), "duas-key-collision-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;

function agent(name: string, said: string): BaseAgent {
  const a = new BaseAgent({ name, prompt: `You help ${name}.` });
  a.history.push({ role: "user", content: said }, { role: "assistant", content: `noted: ${said}` });
  return a;
}

/** A directory holding `stored`'s session, reachable under `alias` too (one file, two names). */
async function aliased(
  stored: string,
  alias: string,
  gzip = false,
): Promise<{ dir: string; file: string; bytes: Buffer }> {
  const dir = path.join(root, `d${n++}`);
  const backend = new FileBackend({ baseDir: dir, gzip });
  const a = agent(stored, "my card ends in 4242");
  await a.saveState(stored, { backend });
  a.history.push({ role: "user", content: "and my address is 1 Main St" });
  await a.saveState(stored); // an append: the header is patched in place, its key kept
  const ext = gzip ? ".duas.gz" : ".duas";
  const file = path.join(dir, stored + ext);
  linkSync(file, path.join(dir, alias + ext));
  return { dir, file, bytes: readFileSync(file) };
}

describe("file backend: two keys naming one file", () => {
  it("writes [META] key, sealed by header_crc32, and keeps it through appends", async () => {
    const { file } = await aliased("Alice", "alice-unused");
    const text = readFileSync(file, "utf8");
    expect(text).toMatch(/\nkey = Alice\n/);
    expect(decodeStateBytes(readFileSync(file)).history).toHaveLength(3);
    // an edited key is caught by the header's checksum, like any other value
    const edited = path.join(path.dirname(file), "Edited.duas");
    const bytes = readFileSync(file);
    bytes.write("key = Alicf", bytes.indexOf("key = Alice"));
    writeFileSync(edited, bytes);
    await expect(new FileBackend({ baseDir: path.dirname(file) }).read("Edited")).rejects.toThrow(/header_crc32/);
  });

  it.each([
    ["case", "Alice", "alice", false],
    ["case, .duas.gz", "Alice", "alice", true],
    ["Unicode normalisation", "caf\u00e9", "cafe\u0301", false],
  ])("refuses every read, write and delete of the other name (%s)", async (_, stored, alias, gzip) => {
    const { dir, file, bytes } = await aliased(stored, alias, gzip);
    const backend = new FileBackend({ baseDir: dir, gzip });
    const refused = (p: Promise<unknown>) =>
      expect(p).rejects.toSatisfy(
        (e: unknown) => e instanceof KeyCollisionError && e.key === alias && e.storedKey === stored,
      );
    await refused(backend.read(alias));
    // spellings that print alike are told apart by their code points
    const message = await backend.read(alias).catch((e: Error) => e.message);
    if (stored.toLowerCase() !== alias.toLowerCase()) expect(message).toContain("U+0301");
    else expect(message).not.toContain("U+");
    await refused(backend.load(alias));
    await refused(backend.readHeader(alias));
    await refused(
      (async () => {
        for await (const _m of backend.iterHistory(alias)) {
          // a message of another key must never come out
          throw new Error("a message of another key was streamed");
        }
      })(),
    );
    await refused(loadState(alias, { backend }));
    // the user of the other name starting a session of their own (expected: none stored)
    await refused(agent(alias, "hello").saveState(alias, { backend }));
    const state = (await backend.read(stored))?.state as AgentState;
    await refused(backend.write(alias, state, { force: true }));
    await refused(backend.save(alias, state));
    await refused(backend.delete(alias));
    expect(readFileSync(file).equals(bytes), "nothing was written or removed").toBe(true);
    // the owner's key still works, on a fresh backend and on this one
    expect((await new FileBackend({ baseDir: dir, gzip }).read(stored))?.state.history).toHaveLength(3);
    const loaded = await loadState(stored, { backend });
    loaded.history.push({ role: "assistant", content: "saved." });
    await loaded.saveState(stored);
    expect((await backend.read(stored))?.state.history).toHaveLength(4);
  });

  it("the CLI reports the collision (exit 2) instead of showing or removing another key's session", async () => {
    const { dir, file, bytes } = await aliased("Bob", "bob");
    const show = runCli(["show", "bob", "--dir", dir]);
    expect(show.code).toBe(2);
    expect(show.stderr).toContain("KEY_COLLISION");
    expect(show.stdout).not.toContain("4242");
    const rm = runCli(["rm", "bob", "--dir", dir]);
    expect(rm.code).not.toBe(0);
    expect(readFileSync(file).equals(bytes)).toBe(true);
    expect(runCli(["show", "Bob", "--dir", dir]).code).toBe(0);
  });

  it("a file copied to another key (two files) is that key's own", async () => {
    const { dir, file } = await aliased("Carol", "carol-unused");
    copyFileSync(file, path.join(dir, "Dave.duas"));
    const backend = new FileBackend({ baseDir: dir });
    const read = await backend.read("Dave");
    expect(read?.state.history).toHaveLength(3);
    // its next whole-file write takes the new key
    await backend.write("Dave", read?.state as AgentState, { force: true });
    expect(readFileSync(path.join(dir, "Dave.duas"), "utf8")).toMatch(/\nkey = Dave\n/);
  });
});
