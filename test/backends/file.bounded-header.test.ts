/**
 * A header with a value of many MB (a long prompt) is read in bounded memory
 * by `readHeader(key, { clipAt })`, by `iterHistory` and by `dumplings show`:
 * the long line is read in 64 KB pieces, its start and length kept, and its
 * bytes checked against `header_crc32` as they pass. What cannot be checked
 * that way (a header without `header_crc32`, bytes that do not match it) is
 * read whole, with the whole read's result or error.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { LongValueSummary } from "../../src/backends/file/value-summary.js";
import { encodeState } from "../../src/core/codec/encode.js";
import { encodeIniString } from "../../src/core/codec/escape.js";
import { FormatError, InvalidOptionError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import { makeState } from "../../src/testing/states.js";
import { runCli } from "../cli/run-cli.js";

const root = mkdtempSync(path.join(os.tmpdir(), "duas-bounded-header-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const history: Message[] = Array.from({ length: 30 }, (_, i) =>
  i % 2 ? { role: "assistant", content: `answer ${i}` } : { role: "user", content: `question ${i}` },
);
/** About 3 MB, on one line once quoted, with escapes (quote, newline, a C1 control) and non-ASCII. */
const PROMPT = `Réponds "brièvement".\n${"Règle : vérifier deux fois \u0085 😀 ".repeat(90_000)}fin`;

async function historyOf(backend: FileBackend, key: string): Promise<Message[]> {
  const out: Message[] = [];
  for await (const m of backend.iterHistory(key)) out.push(m);
  return out;
}

describe("LongValueSummary", () => {
  it("gives the decoded start and length of any INI string, however its text is split", () => {
    const alphabet = [
      "a",
      "b",
      '"',
      "\\",
      "\n",
      "\u0001",
      "é",
      "😀",
      "\u2028",
      " ",
      "=",
      "#",
      "\u007f",
      "\ud800",
      "\u0085",
    ];
    let seed = 7;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let t = 0; t < 3000; t++) {
      let value = "";
      for (let k = random(40) + 1; k > 0; k--) value += alphabet[random(alphabet.length)];
      const text = ` ${encodeIniString(value)}`;
      const summary = new LongValueSummary("string", 7);
      for (let p = 0; p < text.length; ) {
        const q = p + 1 + random(5);
        summary.push(text.slice(p, q));
        p = q;
      }
      expect(summary.finish(), JSON.stringify(text)).toEqual({ preview: value.slice(0, 7), length: value.length });
    }
  });

  it("refuses what is not one string literal", () => {
    for (const text of [' "abc', ' "a\\qb"', ' "a" b', ' "a\\u12"', ' "a\\']) {
      const summary = new LongValueSummary("string", 5);
      summary.push(text);
      expect(summary.finish(), text).toBeUndefined();
    }
  });
});

describe("FileBackend.readHeader with clipAt", () => {
  it("clips the long values, checks them against header_crc32, and streams the history after them", async () => {
    const dir = path.join(root, "clip");
    const backend = new FileBackend({ baseDir: dir });
    const notes = { text: "n".repeat(200_000), list: [1, 2, 3] };
    const state = makeState(history, {
      config: { prompt: PROMPT },
      currentTaskId: `task-${"t".repeat(300_000)}`,
      fields: { notes, step: 3 },
    });
    await backend.save("k", state);
    const r = await backend.readHeader("k", { clipAt: 40 });
    expect(r?.clipped).toEqual([
      { path: "config.prompt", kind: "string", preview: PROMPT.slice(0, 40), length: PROMPT.length },
      {
        path: "state.currentTaskId",
        kind: "string",
        preview: state.state.currentTaskId?.slice(0, 40),
        length: state.state.currentTaskId?.length,
      },
      {
        path: "state.fields.notes",
        kind: "json",
        preview: JSON.stringify(notes).slice(0, 40),
        length: JSON.stringify(notes).length,
      },
    ]);
    expect(r?.header.config.prompt).toBe(PROMPT.slice(0, 40));
    expect(r?.header.state.fields).toEqual({ notes: null, step: 3 });
    expect(r?.header.meta).toEqual((await backend.readHeader("k"))?.header.meta);
    // clipAt above every value's length: nothing clipped, every value whole
    const all = await backend.readHeader("k", { clipAt: 10_000_000 });
    expect(all?.clipped).toBeUndefined();
    expect(all?.header.config.prompt).toBe(PROMPT);
    expect(all?.header.state).toEqual(state.state);
    expect(await historyOf(backend, "k")).toEqual(history);
  });

  it("reads a header whose long value does not match header_crc32 whole, and fails as load fails", async () => {
    const dir = path.join(root, "tampered");
    const backend = new FileBackend({ baseDir: dir });
    await backend.save("k", makeState(history, { config: { prompt: PROMPT } }));
    const file = path.join(dir, "k.duas");
    const bytes = readFileSync(file);
    const at = bytes.indexOf("vérifier deux fois", 2_000_000);
    bytes.write("verifier", at, "latin1"); // same length: only the checksum can tell
    writeFileSync(file, bytes);
    for (const read of [
      () => backend.readHeader("k", { clipAt: 40 }),
      () => historyOf(backend, "k"),
      () => backend.load("k"),
    ]) {
      await expect(read()).rejects.toSatisfy(
        (e: unknown) => e instanceof FormatError && /header_crc32/.test((e as Error).message),
      );
    }
  });

  it("reads a header without header_crc32 (a .duas written by encodeState) whole", async () => {
    const dir = path.join(root, "unsealed");
    mkdirSync(dir, { recursive: true });
    const state = makeState(history, { config: { prompt: PROMPT } });
    writeFileSync(path.join(dir, "k.duas"), encodeState(state));
    const backend = new FileBackend({ baseDir: dir });
    const r = await backend.readHeader("k", { clipAt: 40 });
    expect(r?.clipped).toBeUndefined();
    expect(r?.header.config.prompt).toBe(PROMPT);
    expect(await historyOf(backend, "k")).toEqual(history);
  });

  it("refuses a bad clipAt", async () => {
    const backend = new FileBackend({ baseDir: path.join(root, "bad") });
    for (const bad of [{ clipAt: -1 }, { clipAt: 0.5 }, { clipAt: "10" }, { clip: 10 }]) {
      await expect(backend.readHeader("k", bad as never)).rejects.toBeInstanceOf(InvalidOptionError);
    }
  });
});

describe("dumplings show", () => {
  it("shows a session with a 40 MB prompt in a 64 MB heap (the whole prompt would not fit)", async () => {
    const dir = path.join(root, "show");
    const prompt = `${"é".repeat(40_000_000)}!`; // 80 MB as a JS string
    const backend = new FileBackend({ baseDir: dir });
    await backend.save("big", makeState(history, { config: { prompt }, name: "big" }));
    const env = { NODE_OPTIONS: "--max-old-space-size=64" };
    const shown = runCli(["show", "big", "--dir", dir, "--last", "1"], { env });
    expect(shown.stderr).toBe("");
    expect(shown.code).toBe(0);
    expect(shown.stdout).toContain(`"${"é".repeat(79)}…" (${prompt.length} chars)`);
    expect(shown.stdout).toMatch(/messages {4}30 {2}\(user 15, assistant 15\)/);
    expect(shown.stdout).toContain("#29  assistant  answer 29");
    // The control: `--json` prints the whole prompt, which does not fit that heap.
    expect(runCli(["show", "big", "--dir", dir, "--json"], { env }).code).not.toBe(0);
  }, 60_000);
});

describe("FileBackend.iterHistory of an edited file", () => {
  it("fails before returning any message when a committed line was changed, swapped or duplicated", async () => {
    const dir = path.join(root, "edited");
    const backend = new FileBackend({ baseDir: dir });
    const file = path.join(dir, "k.duas");
    const edits: [string, (lines: string[], at: number) => void][] = [
      ["one byte", (lines, at) => (lines[at + 3] = (lines[at + 3] as string).replace("question 2", "question 3"))],
      [
        "two lines swapped",
        (lines, at) => ([lines[at + 2], lines[at + 3]] = [lines[at + 3] as string, lines[at + 2] as string]),
      ],
      ["a line duplicated over the next", (lines, at) => (lines[at + 4] = lines[at + 3] as string)],
    ];
    for (const [name, edit] of edits) {
      await backend.save("k", makeState(history));
      const lines = readFileSync(file, "utf8").split("\n");
      edit(lines, lines.indexOf("[HISTORY]"));
      writeFileSync(file, lines.join("\n"));
      const seen: Message[] = [];
      await expect(
        (async () => {
          for await (const m of backend.iterHistory("k")) seen.push(m);
        })(),
        name,
      ).rejects.toBeInstanceOf(FormatError);
      expect(seen, name).toEqual([]);
      await backend.delete("k");
    }
  });

  it("streams a history with blank and CRLF lines (a hand-made file), checked as load checks it", async () => {
    const dir = path.join(root, "blank-lines");
    const backend = new FileBackend({ baseDir: dir });
    await backend.save("k", makeState(history));
    const file = path.join(dir, "k.duas");
    const lines = readFileSync(file, "utf8").split("\n");
    const at = lines.indexOf("[HISTORY]");
    lines[at + 2] = `${lines[at + 2]}\r`;
    lines.splice(at + 3, 0, "   ", "\u3000");
    writeFileSync(file, lines.join("\n"));
    expect((await backend.load("k"))?.history).toEqual(history);
    expect(await historyOf(backend, "k")).toEqual(history);
  });
});
