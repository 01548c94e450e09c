/**
 * The file backend's one-message save with a big prompt touches O(new
 * message) bytes, not O(prompt) (issue 11 item 6). Asserted without timing:
 * `node:fs` and `node:zlib` are wrapped so that every byte read from disk
 * (`readSync`, `readFileSync`), written (`writeSync`) and checksummed
 * (`crc32`) is seen, and so is every `Buffer.from` and `Buffer#equals`; after
 * the first save, a one-message save must not pass anything as large as the
 * prompt through any of them. The old code checksummed, converted, compared
 * and re-read the whole header on every save. The saves must still be exact,
 * and a changed prompt (the same length, spanning several pages: the header
 * journal path) must be written, after which saves are small again.
 *
 * (Kept apart from save-cost.test.ts: mocking `node:fs` applies to a whole test file.)
 */
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it, vi } from "vitest";

/** The largest byte count seen per operation while `counting` is on. */
const seen = { counting: false, read: 0, write: 0, crc: 0, from: 0, equals: 0 };

function note(kind: "read" | "write" | "crc" | "from" | "equals", n: number): void {
  if (seen.counting && n > seen[kind]) seen[kind] = n;
}

function sizeOf(data: unknown): number {
  if (typeof data === "string") return Buffer.byteLength(data);
  if (data instanceof Uint8Array) return data.byteLength;
  return 0;
}

vi.mock("node:fs", async (importOriginal) => {
  const fs = await importOriginal<typeof import("node:fs")>();
  const wrapped = {
    ...fs,
    readSync: ((...args: Parameters<typeof fs.readSync>) => {
      const n = fs.readSync(...args);
      note("read", n);
      return n;
    }) as typeof fs.readSync,
    readFileSync: ((...args: Parameters<typeof fs.readFileSync>) => {
      const out = fs.readFileSync(...args);
      note("read", sizeOf(out));
      return out;
    }) as typeof fs.readFileSync,
    writeSync: ((...args: unknown[]) => {
      const n = (fs.writeSync as (...a: unknown[]) => number)(...args);
      note("write", n);
      return n;
    }) as typeof fs.writeSync,
  };
  return { ...wrapped, default: wrapped };
});

vi.mock("node:zlib", async (importOriginal) => {
  const zlib = await importOriginal<typeof import("node:zlib") & { crc32?: (d: unknown, v?: number) => number }>();
  const crc32 = zlib.crc32;
  const wrapped = {
    ...zlib,
    crc32: crc32
      ? (data: string | Uint8Array, value?: number) => {
          note("crc", sizeOf(data));
          return crc32(data, value);
        }
      : undefined,
  };
  return { ...wrapped, default: wrapped };
});

const { FileBackend } = await import("../../src/backends/file/index.js");
const { BaseAgent, loadState, saveState } = await import("../../src/index.js");

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-save-cost-file-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const PROMPT = "You are a careful assistant. ".repeat(150_000); // ~4.3 MB, a JSON string literal (trailing space)
const BIG = Buffer.byteLength(PROMPT);
/** Anything a one-message save may legitimately touch is far below this. */
const SMALL = 64 * 1024;

/** The largest byte counts `fn` passed through reads, writes, checksums, Buffer.from and Buffer#equals. */
async function largest(fn: () => Promise<unknown>): Promise<Omit<typeof seen, "counting">> {
  const from = Buffer.from;
  const equals = Buffer.prototype.equals;
  const fromSpy = vi.spyOn(Buffer, "from").mockImplementation(((...args: Parameters<typeof Buffer.from>) => {
    const out = (from as (...a: unknown[]) => Buffer).apply(Buffer, args);
    note("from", out.length);
    return out;
  }) as typeof Buffer.from);
  const equalsSpy = vi.spyOn(Buffer.prototype, "equals").mockImplementation(function (
    this: Buffer,
    ...args: unknown[]
  ) {
    const other = args[0] as Uint8Array;
    note("equals", Math.max(this.length, other.length));
    return equals.call(this, other);
  });
  Object.assign(seen, { counting: true, read: 0, write: 0, crc: 0, from: 0, equals: 0 });
  try {
    await fn();
  } finally {
    seen.counting = false;
    fromSpy.mockRestore();
    equalsSpy.mockRestore();
  }
  const { counting: _, ...out } = seen;
  return out;
}

describe("file backend: a one-message save with a big prompt", () => {
  it("reads, writes, checksums, converts and compares O(message) bytes, never the prompt", async () => {
    const backend = new FileBackend({ baseDir: path.join(tmp, randomUUID()) });
    const agent = new BaseAgent({ name: "big-file", prompt: PROMPT });
    const key = `big-${randomUUID().slice(0, 8)}`;
    // the wrappers see the prompt when it is written (the first save writes the whole file)
    const first = await largest(() => saveState(agent, key, { backend }));
    expect(first.write).toBeGreaterThanOrEqual(BIG);
    expect(first.crc).toBeGreaterThanOrEqual(BIG);
    for (let i = 0; i < 3; i++) {
      agent.history.push({ role: i % 2 ? "assistant" : "user", content: `message ${i}` });
      const m = await largest(async () => {
        const r = await saveState(agent, undefined, { backend });
        expect(r).toMatchObject({ written: 1, rewritten: false });
      });
      for (const [kind, n] of Object.entries(m)) expect(n, `save ${i}: largest ${kind}`).toBeLessThan(SMALL);
    }
    expect((await loadState(key, { backend })).history).toEqual(agent.history);

    // A prompt changed in the middle (same length: the header is patched in place across several pages,
    // through the journal) is written; the saves after it are small again (the journal is not re-read).
    const middle = PROMPT.length / 2;
    agent.config.prompt = `${PROMPT.slice(0, middle - 10_000)}${"Be brief. ".repeat(2_000)}${PROMPT.slice(middle + 10_000)}`;
    expect(agent.config.prompt.length).toBe(PROMPT.length);
    agent.history.push({ role: "user", content: "after the change" });
    const changed = await saveState(agent, undefined, { backend });
    expect(changed).toMatchObject({ written: 1, rewritten: false });
    expect(existsSync(path.join(backend.baseDir, `.${key}.duas.hdr`)), "went through the header journal").toBe(true);
    for (let i = 0; i < 2; i++) {
      agent.history.push({ role: "assistant", content: `again ${i}` });
      const m = await largest(() => saveState(agent, undefined, { backend }));
      for (const [kind, n] of Object.entries(m)) expect(n, `save ${i} after the change: ${kind}`).toBeLessThan(SMALL);
    }
    const loaded = await loadState(key, { backend });
    expect(loaded.config.prompt).toBe(agent.config.prompt);
    expect(loaded.history).toEqual(agent.history);

    // Another instance (another process, for all it knows) saves with a new config: the first instance's
    // next save notices the file is not the one it wrote, and still appends exactly.
    const other = new FileBackend({ baseDir: backend.baseDir });
    const theirs = await loadState(key, { backend: other });
    theirs.config.modelName = "gpt-other";
    theirs.history.push({ role: "user", content: "from the other one" });
    await saveState(theirs, undefined, { backend: other });
    const mine = await loadState(key, { backend });
    mine.history.push({ role: "assistant", content: "and mine" });
    await saveState(mine, undefined, { backend });
    const end = await loadState(key, { backend: other });
    expect(end.config.modelName).toBe("gpt-other");
    expect(end.config.prompt).toBe(agent.config.prompt);
    expect(end.history).toEqual(mine.history);
  }, 120_000);
});
