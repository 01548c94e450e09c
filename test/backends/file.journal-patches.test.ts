/**
 * The header journal holds only the header bytes a save changes: with a 5 MB
 * prompt, a save that changes `[STATE]` (and the head) journals and writes a
 * few hundred bytes, not the whole header, and the file stays exactly what a
 * whole-file write of the same state would hold. A save interrupted after its
 * journal (file untouched) is rolled forward by every reader and writer, from
 * a journal of this version (`/4`, patches) and of the previous one (`/3`, the
 * whole header).
 */
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { decodeState } from "../../src/core/codec/bytes.js";
import { encodeState } from "../../src/core/codec/encode.js";
import type { AgentState } from "../../src/core/state.js";
import { makeState } from "../../src/testing/states.js";

const root = mkdtempSync(path.join(os.tmpdir(), "duas-journal-patches-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const PROMPT = `You are careful.\n${"Rule: check twice. ".repeat(270_000)}`; // about 5 MB

function stateAt(n: number): AgentState {
  const history = Array.from(
    { length: n },
    (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `m${i}` }) as const,
  );
  return makeState([...history], {
    config: { prompt: PROMPT },
    uuid: "00000000-0000-4000-8000-000000000002",
    name: "patches",
    savedAt: new Date(1_700_000_000_000 + n * 1000).toISOString(),
    currentTaskId: `task-${n}`,
    fields: { step: n },
  });
}

async function readEverything(dir: string, key: string): Promise<AgentState> {
  const backend = new FileBackend({ baseDir: dir });
  const loaded = await backend.load(key);
  const streamed = [];
  for await (const m of backend.iterHistory(key)) streamed.push(m);
  expect(streamed).toEqual(loaded?.history);
  const header = await backend.readHeader(key);
  expect(header?.header.state).toEqual(loaded?.state);
  return loaded as AgentState;
}

it("a save that changes [STATE] under a 5 MB prompt journals and writes only the changed bytes", async () => {
  const dir = path.join(root, "small");
  const backend = new FileBackend({ baseDir: dir });
  let { revision } = await backend.write("k", stateAt(1), { expectedRevision: null });
  const file = path.join(dir, "k.duas");
  const journal = path.join(dir, ".k.duas.hdr");
  for (let n = 2; n <= 6; n++) {
    const r = await backend.write("k", stateAt(n), { expectedRevision: revision, baseLength: n - 1 });
    expect(r.rewritten).toBe(false);
    revision = r.revision;
    // head and [STATE] are pages apart: journaled, and the journal holds a few hundred bytes, not 5 MB
    expect(statSync(journal).size).toBeLessThan(4096);
    expect(await readEverything(dir, "k")).toEqual(stateAt(n));
  }
  // byte for byte what the format says (a strict decode checks header_crc32 and history_crc32)
  const text = readFileSync(file, "utf8");
  expect(decodeState(text)).toEqual(stateAt(6));
  expect(statSync(file).size).toBeGreaterThan(PROMPT.length);
  expect(encodeState(stateAt(6)).length).toBeLessThan(text.length + 1024);
});

/** The v3 journal (whole new header) of the save from `before` to `after` bytes, as the previous version wrote it. */
function journalV3(v4: Buffer, before: Buffer, after: Buffer): Buffer {
  const nl = v4.indexOf(0x0a);
  const [, ino, generation, revision, headerLength, dataOffset, linesLength] = v4.toString("latin1", 0, nl).split(" ");
  const header = after.subarray(0, Number(headerLength));
  const lines = after.subarray(Number(dataOffset), Number(dataOffset) + Number(linesLength));
  expect(before.length).toBe(Number(dataOffset));
  const head = ["duas-header-journal/3", ino, generation, revision, headerLength, dataOffset, linesLength].join(" ");
  const body = Buffer.concat([header, lines]);
  const sha = createHash("sha256")
    .update(Buffer.concat([Buffer.from(head, "latin1"), body]))
    .digest("hex");
  return Buffer.concat([Buffer.from(`${head} ${sha}\n`), body]);
}

for (const version of ["/4 (patches)", "/3 (whole header)"]) {
  it(`a save stopped after its ${version} journal is rolled forward by readers and by the next writer`, async () => {
    const dir = path.join(root, version.slice(1, 2));
    const backend = new FileBackend({ baseDir: dir });
    const first = await backend.write("k", stateAt(3), { expectedRevision: null });
    const file = path.join(dir, "k.duas");
    const journal = path.join(dir, ".k.duas.hdr");
    const before = readFileSync(file);
    const second = await backend.write("k", stateAt(4), { expectedRevision: first.revision, baseLength: 3 });
    const after = readFileSync(file);
    if (version.startsWith("/3")) writeFileSync(journal, journalV3(readFileSync(journal), before, after));
    // The crash: the journal is durable, the file not yet touched (same inode: bytes written back in place).
    writeFileSync(file, before);
    // (Buffer.equals: a deep toEqual of 5 MB buffers takes tens of seconds)
    expect(readFileSync(file).equals(before)).toBe(true);
    expect(await readEverything(dir, "k")).toEqual(stateAt(4));
    expect(readFileSync(file).equals(before), "readers never write").toBe(true);
    // The next writer rolls it forward under the lock, then appends.
    const fresh = new FileBackend({ baseDir: dir });
    const third = await fresh.write("k", stateAt(5), { expectedRevision: second.revision, baseLength: 4 });
    expect(third.revision).toBe(second.revision + 1);
    expect(decodeState(readFileSync(file, "utf8"))).toEqual(stateAt(5));
  });
}
