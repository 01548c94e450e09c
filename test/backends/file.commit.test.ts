/**
 * FileBackend's one-sync appends: the header names the newest commit and the
 * one before it (`history_bytes`, `prior_commit`), a save writes its lines and
 * that header and makes one `fdatasync`. What a power loss between the write
 * and the sync can leave — the header on disk, the lines not (the file not
 * extended, or extended with blocks never written: NUL bytes) — reads as the
 * save before on every read path, and the next writer continues from it. Any
 * other damage to the newest save's lines stays a `FormatError`.
 */
import { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { decodeState } from "../../src/core/codec/bytes.js";
import { crcHex, HISTORY_CRC_START, historyCrcOfLines } from "../../src/core/codec/crc.js";
import { encodeHistoryLines } from "../../src/core/codec/encode.js";
import { encodeHeader } from "../../src/core/codec/header.js";
import { ConflictError, FormatError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import type { AgentState } from "../../src/core/state.js";
import { makeState } from "../../src/testing/states.js";
import { runCli } from "../cli/run-cli.js";

const root = mkdtempSync(path.join(tmpdir(), "duas-commit-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const KEY = "c";
const first: Message[] = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "héllo, wörld" },
  { role: "assistant", content: "hi" },
];
const added: Message[] = [
  { role: "user", content: "and tomorrow?" },
  { role: "assistant", content: "rain — 12 °C" },
  // long enough for the second save's lines to span whole 512-byte sectors
  { role: "tool", tool_call_id: "call_1", content: `forecast: ${"drizzle, ".repeat(150)}` },
];

interface Saved {
  dir: string;
  file: string;
  before: AgentState;
  after: AgentState;
  /** Revisions of the two saves. */
  r1: number;
  r2: number;
  /** Byte offset where the second save's lines start (the first save's end). */
  priorEnd: number;
}

/** Two saves: a whole-file write of `first`, then an append of `added` (a different saved_at). */
async function twoSaves(): Promise<Saved> {
  const dir = mkdtempSync(path.join(root, "d-"));
  const backend = new FileBackend({ baseDir: dir });
  const before = makeState(first, { name: "commit", savedAt: "2026-12-01T00:00:00.000Z" });
  const { revision: r1 } = await backend.write(KEY, before, { expectedRevision: null });
  const file = path.join(dir, `${KEY}.duas`);
  const priorEnd = readFileSync(file).length;
  const history = [...first, ...added];
  const after: AgentState = {
    ...before,
    meta: { ...before.meta, savedAt: "2026-12-01T00:00:05.000Z", messageCount: history.length },
    history,
  };
  const w = await backend.write(KEY, after, { expectedRevision: r1, baseLength: first.length });
  expect(w).toMatchObject({ rewritten: false, written: added.length });
  return { dir, file, before, after, r1, r2: w.revision, priorEnd };
}

async function collect(it: AsyncIterable<Message>): Promise<Message[]> {
  const out: Message[] = [];
  for await (const m of it) out.push(m);
  return out;
}

/** What each read path of a fresh backend returns for KEY (or the error it throws). */
async function everyPath(dir: string) {
  const b = new FileBackend({ baseDir: dir });
  const attempt = async <T>(f: () => Promise<T>) => {
    try {
      return { ok: true as const, value: await f() };
    } catch (error) {
      return { ok: false as const, error };
    }
  };
  return {
    read: await attempt(() => b.read(KEY)),
    header: await attempt(() => b.readHeader(KEY)),
    clipped: await attempt(() => b.readHeader(KEY, { clipAt: 4 })),
    stream: await attempt(() => collect(b.iterHistory(KEY))),
  };
}

describe("FileBackend: one fdatasync per append (a commit and its prior in the header)", () => {
  it("the header names the newest commit and the one before it; the text is a valid .duas", async () => {
    const s = await twoSaves();
    const text = readFileSync(s.file, "utf8");
    const body = text.slice(text.indexOf("[HISTORY]\n") + "[HISTORY]\n".length);
    expect(Number(/\nhistory_bytes = (\d+) *\n/.exec(text)?.[1])).toBe(Buffer.byteLength(body));
    const firstBytes = Buffer.byteLength(encodeHistoryLines(first, "openai"));
    const firstCrc = crcHex(historyCrcOfLines(HISTORY_CRC_START, encodeHistoryLines(first, "openai")));
    expect(/\nprior_commit = (.*?) *\n/.exec(text)?.[1]).toBe(
      `${s.r1} ${first.length} ${firstBytes} ${firstCrc} 2026-12-01T00:00:00.000Z`,
    );
    // the strict decoder (loadStateString, dumplings import) reads it as the newest save
    expect(decodeState(text)).toEqual(s.after);
    // a whole-file write names its own commit twice
    const dir = mkdtempSync(path.join(root, "w-"));
    await new FileBackend({ baseDir: dir }).write(KEY, s.before, { expectedRevision: null });
    const whole = readFileSync(path.join(dir, `${KEY}.duas`), "utf8");
    const rev = /\nrevision = (\d+)/.exec(whole)?.[1];
    expect(/\nprior_commit = (\d+) /.exec(whole)?.[1]).toBe(rev);
  });

  const lost: [string, (s: Saved) => void][] = [
    ["the file was not extended", (s) => truncateSync(s.file, s.priorEnd)],
    ["the file was extended by part of the lines", (s) => truncateSync(s.file, s.priorEnd + 7)],
    [
      "the lines' blocks were never written (NUL bytes)",
      (s) => {
        const b = readFileSync(s.file);
        b.fill(0, s.priorEnd);
        writeFileSync(s.file, b);
      },
    ],
    [
      "the last page was never written",
      (s) => {
        const b = readFileSync(s.file);
        // zeros from the last 4 KB page's start (or the lines' start) to the end of the file
        b.fill(0, Math.max(s.priorEnd, b.length - 1 - ((b.length - 1) % 4096)));
        writeFileSync(s.file, b);
      },
    ],
    [
      "a sector in the middle of the lines was never written",
      (s) => {
        const b = readFileSync(s.file);
        const sector = s.priorEnd + 512 - (s.priorEnd % 512);
        expect(sector + 512, "the newest save's lines span that sector").toBeLessThan(b.length);
        b.fill(0, sector, sector + 512);
        writeFileSync(s.file, b);
      },
    ],
  ];
  for (const [what, loseLines] of lost) {
    it(`a header on disk without its lines (${what}) reads as the save before on every path`, async () => {
      const s = await twoSaves();
      loseLines(s);
      const r = await everyPath(s.dir);
      expect(r.read.ok && r.read.value).toEqual({ state: s.before, revision: s.r1 });
      expect(r.header.ok && r.header.value?.revision).toBe(s.r1);
      expect(r.header.ok && r.header.value?.header.meta).toEqual(s.before.meta);
      expect(r.clipped.ok && r.clipped.value?.header.meta.messageCount).toBe(first.length);
      expect(r.stream.ok && r.stream.value).toEqual(first);
      const show = runCli(["show", KEY, "--dir", s.dir, "--json"]);
      expect(show.code, show.stderr).toBe(0);
      expect((JSON.parse(show.stdout) as { messages: { total: number } }).messages.total).toBe(first.length);

      // The next writer continues from that save, above the lost revision (never reused), and cuts the rest.
      const w = new FileBackend({ baseDir: s.dir });
      await expect(w.write(KEY, s.after, { expectedRevision: s.r2, baseLength: first.length })).rejects.toBeInstanceOf(
        ConflictError,
      );
      const next: AgentState = {
        ...s.before,
        history: [...first, { role: "user", content: "again" }],
        meta: { ...s.before.meta, messageCount: first.length + 1 },
      };
      const written = await w.write(KEY, next, { expectedRevision: s.r1, baseLength: first.length });
      expect(written.revision).toBeGreaterThan(s.r2);
      expect(written.rewritten).toBe(true); // whole: see "after lost lines the next save rewrites the file whole"
      expect(await new FileBackend({ baseDir: s.dir }).read(KEY)).toEqual({ state: next, revision: written.revision });
      expect(decodeState(readFileSync(s.file, "utf8"))).toEqual(next);
    });
  }

  it("a whole-file write after lost lines also numbers above the lost revision", async () => {
    const s = await twoSaves();
    truncateSync(s.file, s.priorEnd);
    const w = await new FileBackend({ baseDir: s.dir }).write(KEY, s.after, { force: true });
    expect(w.rewritten).toBe(true);
    expect(w.revision).toBe(s.r2 + 1);
    expect(await new FileBackend({ baseDir: s.dir }).read(KEY)).toEqual({ state: s.after, revision: s.r2 + 1 });
  });

  it("after lost lines the next save rewrites the file whole (no header naming the lost commit beside new lines)", async () => {
    const s = await twoSaves();
    truncateSync(s.file, s.priorEnd);
    const next: AgentState = {
      ...s.before,
      history: [...first, { role: "user", content: "again" }],
      meta: { ...s.before.meta, messageCount: first.length + 1 },
    };
    const w = await new FileBackend({ baseDir: s.dir }).write(KEY, next, { expectedRevision: s.r1, baseLength: 3 });
    expect(w).toMatchObject({ rewritten: true, revision: s.r2 + 1 });
    const text = readFileSync(s.file, "utf8");
    expect(/\nprior_commit = (\d+) /.exec(text)?.[1]).toBe(String(s.r2 + 1));
    expect(decodeState(text)).toEqual(next);
  });

  const changes: [string, (a: AgentState) => AgentState][] = [
    ["agent_name", (a) => ({ ...a, meta: { ...a.meta, agentName: "renamed" } })],
    ["class", (a) => ({ ...a, meta: { ...a.meta, class: "dumplings-ai:AnthropicAgent" } })],
    ["[STATE]", (a) => ({ ...a, state: { ...a.state, currentTaskId: "task-B" } })],
    ["[CONFIG]", (a) => ({ ...a, config: { ...a.config, prompt: "You are verbose." } })],
  ];
  for (const [what, change] of changes) {
    it(`an append that also changes ${what} names itself as prior_commit: its lost lines are a FormatError, never a mix`, async () => {
      const s = await twoSaves();
      const b = new FileBackend({ baseDir: s.dir });
      const history = [...s.after.history, { role: "user" as const, content: "third" }];
      const third = change({ ...s.after, history, meta: { ...s.after.meta, messageCount: history.length } });
      const end = readFileSync(s.file).length;
      const w = await b.write(KEY, third, { expectedRevision: s.r2, baseLength: s.after.history.length });
      expect(w.rewritten).toBe(false);
      const text = readFileSync(s.file, "utf8");
      expect(/\nprior_commit = (\d+) /.exec(text)?.[1]).toBe(String(w.revision));
      expect(await new FileBackend({ baseDir: s.dir }).read(KEY)).toEqual({ state: third, revision: w.revision });
      // its lines were synced before its header: lines missing under it are damage, not a lost save
      truncateSync(s.file, end);
      const e = await new FileBackend({ baseDir: s.dir }).read(KEY).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(FormatError);
    });
  }

  it("force over a damaged file numbers above the revision its header names", async () => {
    const s = await twoSaves();
    const b = readFileSync(s.file);
    b[s.priorEnd - 10] = 0x41; // damage inside the first save's lines: every read is a FormatError
    writeFileSync(s.file, b);
    await expect(new FileBackend({ baseDir: s.dir }).read(KEY)).rejects.toBeInstanceOf(FormatError);
    const w = await new FileBackend({ baseDir: s.dir }).write(KEY, s.before, { force: true });
    expect(w.revision).toBe(s.r2 + 1);
  });

  it("any saved_at round-trips through the commit pair (spaces, empty, a line break)", async () => {
    for (const savedAt of ["2025-01-01 10:00:00", "", "a\nb ", " x"]) {
      const dir = mkdtempSync(path.join(root, "t-"));
      const b = new FileBackend({ baseDir: dir });
      const one = makeState(first, { savedAt });
      const r1 = await b.write(KEY, one, { expectedRevision: null });
      const n = first.length + added.length;
      const two: AgentState = { ...one, history: [...first, ...added], meta: { ...one.meta, messageCount: n } };
      const r2 = await b.write(KEY, two, { expectedRevision: r1.revision, baseLength: 3 });
      const three: AgentState = {
        ...two,
        history: [...two.history, added[0] as Message],
        meta: { ...two.meta, messageCount: n + 1 },
      };
      await b.write(KEY, three, { expectedRevision: r2.revision, baseLength: n });
      expect((await new FileBackend({ baseDir: dir }).read(KEY))?.state).toEqual(three);
      truncateSync(path.join(dir, `${KEY}.duas`), readFileSync(path.join(dir, `${KEY}.duas`)).length - 3);
      expect((await new FileBackend({ baseDir: dir }).read(KEY))?.state).toEqual(two);
    }
  });

  it("a history with a blank line (tolerated on read) is rewritten whole on the next save", async () => {
    const s = await twoSaves();
    writeFileSync(s.file, Buffer.concat([readFileSync(s.file), Buffer.from("   \n")]));
    // the blank line is past the commit: an uncommitted tail; put one inside the history instead
    const b = readFileSync(s.file);
    const inside = Buffer.concat([
      b.subarray(0, s.priorEnd),
      Buffer.from("  \n"),
      b.subarray(s.priorEnd, b.length - 4),
    ]);
    writeFileSync(s.file, inside);
    const history = [...s.after.history, { role: "user" as const, content: "third" }];
    const third: AgentState = { ...s.after, history, meta: { ...s.after.meta, messageCount: history.length } };
    const w = await new FileBackend({ baseDir: s.dir }).write(KEY, third, { expectedRevision: s.r2, baseLength: 5 });
    expect(w.rewritten).toBe(true);
    expect(decodeState(readFileSync(s.file, "utf8"))).toEqual(third);
  });

  it("plain text under a .duas.gz name with lost lines: load and the stream agree on the save before", async () => {
    const s = await twoSaves();
    truncateSync(s.file, s.priorEnd);
    const gzName = path.join(s.dir, `${KEY}.duas.gz`);
    writeFileSync(gzName, readFileSync(s.file));
    rmSync(s.file);
    const b = new FileBackend({ baseDir: s.dir });
    expect(await b.read(KEY)).toEqual({ state: s.before, revision: s.r1 });
    expect(await collect(b.iterHistory(KEY))).toEqual(first);
  });

  const damaged: [string, (b: Buffer, s: Saved) => Buffer][] = [
    [
      "an edited byte",
      (b, s) => {
        b[s.priorEnd + 12] = 0x41;
        return b;
      },
    ],
    [
      "a duplicated line",
      (b, s) => {
        const nl = b.indexOf(0x0a, s.priorEnd);
        return Buffer.concat([b.subarray(0, nl + 1), b.subarray(s.priorEnd, nl + 1), b.subarray(nl + 1)]);
      },
    ],
    ["a cut line without NUL", (b) => Buffer.concat([b.subarray(0, b.length - 1), Buffer.from("x\n")])],
    // a new user's trial: one NUL among written bytes read as a power loss, silently dropping the newest save
    ...[1, 40, 2].map((back): [string, (b: Buffer, s: Saved) => Buffer] => [
      `one byte turned NUL, ${back} from the end`,
      (b) => {
        const copy = Buffer.from(b);
        copy[copy.length - back] = 0;
        return copy;
      },
    ]),
  ];
  for (const [what, damage] of damaged) {
    it(`other damage to the newest save's lines (${what}) is a FormatError, not the save before`, async () => {
      const s = await twoSaves();
      writeFileSync(s.file, damage(readFileSync(s.file), s));
      const r = await everyPath(s.dir);
      expect(!r.read.ok && r.read.error).toBeInstanceOf(FormatError);
      expect(!r.stream.ok && r.stream.error).toBeInstanceOf(FormatError);
    });
  }

  it("lost lines over a damaged prior commit are a FormatError, and the writer refuses to cut anything", async () => {
    const s = await twoSaves();
    const b = readFileSync(s.file);
    const firstLine = b.indexOf("[HISTORY]\n") + "[HISTORY]\n".length;
    b[firstLine + 20] = 0x5a; // inside the first save's lines
    writeFileSync(s.file, b.subarray(0, s.priorEnd));
    const r = await everyPath(s.dir);
    expect(!r.read.ok && r.read.error).toBeInstanceOf(FormatError);
    expect(!r.stream.ok && r.stream.error).toBeInstanceOf(FormatError);
    const bytes = readFileSync(s.file);
    await expect(
      new FileBackend({ baseDir: s.dir }).write(KEY, s.after, { expectedRevision: s.r1, baseLength: first.length }),
    ).rejects.toBeInstanceOf(FormatError);
    expect(readFileSync(s.file).equals(bytes)).toBe(true);
  });

  it("an edited or malformed prior_commit is a FormatError naming its line", async () => {
    const s = await twoSaves();
    const text = readFileSync(s.file, "latin1");
    const at = text.indexOf("\nprior_commit = ") + "\nprior_commit = ".length;
    writeFileSync(s.file, text.replace(" 2026-12-01T00:00:00.000Z", " 2026-12-01T00:00:01.000Z"), "latin1");
    const line = text.slice(0, at).split("\n").length;
    const e1 = await new FileBackend({ baseDir: s.dir }).read(KEY).catch((e: unknown) => e);
    expect(e1).toBeInstanceOf(FormatError);
    expect((e1 as FormatError).message).toMatch(/header_crc32/);
    writeFileSync(s.file, text.replace(/\nprior_commit = [^\n]*/, "\nprior_commit = 3 x"), "latin1");
    const e2 = await new FileBackend({ baseDir: s.dir }).read(KEY).catch((e: unknown) => e);
    expect(e2).toBeInstanceOf(FormatError);
    expect(e2).toMatchObject({ line });
    expect((e2 as FormatError).message).toMatch(/prior_commit must be/);
  });

  it("a file of the previous layout (no history_bytes) loads, is rewritten whole once, then appended to", async () => {
    const dir = mkdtempSync(path.join(root, "old-"));
    const state = makeState(first, { name: "old" });
    const lines = encodeHistoryLines(first, "openai");
    const header = encodeHeader(state, first.length, {
      revision: 4,
      fixedWidth: true,
      generation: "0123456789abcdef0123456789abcdef",
      historyCrc32: crcHex(historyCrcOfLines(HISTORY_CRC_START, lines)),
      checksum: true,
    });
    const file = path.join(dir, `${KEY}.duas`);
    writeFileSync(file, header + lines);
    const backend = new FileBackend({ baseDir: dir });
    expect(await backend.read(KEY)).toEqual({ state, revision: 4 });
    const grown: AgentState = {
      ...state,
      history: [...first, added[0] as Message],
      meta: { ...state.meta, messageCount: 4 },
    };
    const w1 = await backend.write(KEY, grown, { expectedRevision: 4, baseLength: 3 });
    expect(w1).toMatchObject({ revision: 5, rewritten: true });
    expect(readFileSync(file, "utf8")).toMatch(/\nprior_commit = 5 4 /);
    const all: AgentState = {
      ...grown,
      history: [...first, ...added],
      meta: { ...grown.meta, messageCount: first.length + added.length },
    };
    const w2 = await backend.write(KEY, all, { expectedRevision: 5, baseLength: 4 });
    expect(w2).toMatchObject({ revision: 6, rewritten: false });
    expect(await new FileBackend({ baseDir: dir }).read(KEY)).toEqual({ state: all, revision: 6 });
  });
});
