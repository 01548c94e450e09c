/**
 * The file backend's per-session header cache (issue 11 item 6): a save with
 * the config and state of the header on disk writes only the head of the
 * header, sealed with the body's cached CRC-32. These tests check that the
 * shortcut never writes other data than a whole encoding would: every change
 * of config, state or meta is written, the seal is the one `encodeHeader`
 * computes, and a file changed behind the backend's back is rescanned (a
 * corrupted prompt is a `FormatError` for the next save, which changes
 * nothing on disk).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { crc32 } from "node:zlib";
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { decodeStateDetailed } from "../../src/core/codec/bytes.js";
import { crc32Apply, crc32Shift } from "../../src/core/codec/crc.js";
import { encodeHeader, type PriorCommit } from "../../src/core/codec/header.js";
import { FormatError } from "../../src/core/errors.js";
import type { AgentState } from "../../src/core/state.js";
import { makeState } from "../../src/testing/states.js";

const root = mkdtempSync(path.join(tmpdir(), "duas-header-cache-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `[META] prior_commit` of a file's text, as the codec's layout takes it. */
function priorOf(text: string): PriorCommit {
  const m = /\nprior_commit = (\d+) (\d+) (\d+) ([0-9a-f]{8}) (\S+)/.exec(text);
  if (!m) throw new Error("no prior_commit");
  return {
    revision: Number(m[1]),
    messageCount: Number(m[2]),
    historyBytes: Number(m[3]),
    historyCrc32: m[4] as string,
    savedAt: m[5] as string,
  };
}

describe("crc32Shift", () => {
  it("carries a CRC-32 over any length: crc(A ‖ B) = shift(|B|)·crc(A) ^ crc(B)", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), fc.uint8Array({ maxLength: 3000 }), (a, b) => {
        const joined = Buffer.concat([a, b]);
        expect((crc32Apply(crc32Shift(b.length), crc32(a)) ^ crc32(b)) >>> 0).toBe(crc32(joined));
      }),
      { numRuns: 300 },
    );
  });
});

describe("FileBackend: saves with the cached header", () => {
  const PROMPT = `Answer "briefly".\n${"Be kind. ".repeat(2_000)}`;

  function fresh(): { backend: FileBackend; dir: string; file: string } {
    const dir = mkdtempSync(path.join(root, "d-"));
    return { backend: new FileBackend({ baseDir: dir }), dir, file: path.join(dir, "k.duas") };
  }

  /** The stored file as a fresh reader sees it (header_crc32 and history_crc32 checked). */
  function onDisk(file: string): AgentState {
    return decodeStateDetailed(readFileSync(file, "utf8"), { source: file }).state;
  }

  it("writes every change of config, state and meta, with the seal encodeHeader computes", async () => {
    const { backend, dir, file } = fresh();
    const state = makeState([{ role: "user", content: "hi" }], { name: "cache", config: { prompt: PROMPT } });
    let { revision } = await backend.write("k", state, { expectedRevision: null });
    const steps: ((s: AgentState) => void)[] = [
      () => {},
      (s) => {
        s.config.maxTokens = 77;
      },
      () => {},
      (s) => {
        s.config.prompt = `${PROMPT.slice(0, -4)}Xyz.`; // same length, changed at the end
      },
      (s) => {
        s.state.currentTaskId = "task-9";
      },
      (s) => {
        s.state.fields = { counter: 1 };
      },
      (s) => {
        (s.state.fields as { counter: number }).counter = 2; // the same object, changed in place
      },
      (s) => {
        s.meta.agentName = "a much longer agent name than before"; // the head grows: re-encoded whole
      },
      () => {},
      (s) => {
        s.config = { ...s.config }; // a new object with the same values: still the cached body
      },
    ];
    for (const [i, step] of steps.entries()) {
      step(state);
      const base = state.history.length;
      state.history.push({ role: i % 2 ? "assistant" : "user", content: `m${i}` });
      const r = await backend.write("k", state, { expectedRevision: revision, baseLength: base });
      expect(r, `step ${i}`).toMatchObject({ written: 1, rewritten: false });
      revision = r.revision;
      // what is on disk is exactly the state, with the header encodeHeader would write (same seal)
      const loaded = onDisk(file);
      expect(loaded.config, `step ${i}`).toEqual(state.config);
      expect(loaded.state, `step ${i}`).toEqual(state.state);
      expect(loaded.meta.agentName).toBe(state.meta.agentName);
      expect(loaded.history).toEqual(state.history);
      const text = readFileSync(file, "utf8");
      const sealed = /\nheader_crc32 = ([0-9a-f]{8})\n/.exec(text)?.[1];
      const expected = /\nheader_crc32 = ([0-9a-f]{8})\n/.exec(
        encodeHeader({ ...state, meta: loaded.meta }, state.history.length, {
          revision,
          generation: /\ngeneration = ([0-9a-f]+)\n/.exec(text)?.[1],
          key: "k",
          historyCrc32: /\nhistory_crc32 = ([0-9a-f]{8})\n/.exec(text)?.[1],
          checksum: true,
          historyBytes: Number(/\nhistory_bytes = (\d+)/.exec(text)?.[1]),
          prior: priorOf(text),
        }),
      )?.[1];
      expect(sealed, `step ${i}`).toBe(expected);
      expect((await new FileBackend({ baseDir: dir }).read("k"))?.state).toEqual(loaded);
    }
  });

  it("rescans a file changed behind its back: a corrupted prompt is a FormatError, and nothing is written", async () => {
    const { backend, file } = fresh();
    const state = makeState([{ role: "user", content: "hi" }], { name: "cache", config: { prompt: PROMPT } });
    let { revision } = await backend.write("k", state, { expectedRevision: null });
    state.history.push({ role: "assistant", content: "one" });
    ({ revision } = await backend.write("k", state, { expectedRevision: revision, baseLength: 1 }));
    await sleep(30); // past the file system's timestamp granularity
    const bytes = readFileSync(file);
    const at = bytes.indexOf("Be kind.") + 3;
    bytes[at] = "K".charCodeAt(0); // same size, same head: only the body differs
    writeFileSync(file, bytes);
    state.history.push({ role: "user", content: "two" });
    await expect(backend.write("k", state, { expectedRevision: revision, baseLength: 2 })).rejects.toBeInstanceOf(
      FormatError,
    );
    expect(readFileSync(file).equals(bytes)).toBe(true);
    // repaired by hand (the original bytes back): saving goes on
    bytes[at] = "k".charCodeAt(0);
    writeFileSync(file, bytes);
    const r = await backend.write("k", state, { expectedRevision: revision, baseLength: 2 });
    expect(r).toMatchObject({ written: 1, rewritten: false });
    expect(onDisk(file).history).toEqual(state.history);
  });
});
