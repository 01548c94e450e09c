/**
 * Seeded fuzzing of every `.duas` read path. Real sessions (bundled
 * conversations from `data/trajectories/` and the golden states) are written
 * by FileBackend, then mutated — byte flips, truncation, duplicated and
 * swapped lines, invalid UTF-8, deep nesting, huge numbers, sometimes two at
 * once — and read back through `decodeState` (what `loadStateString`
 * parses), `loadStateString` itself, FileBackend's `load`, `readHeader` +
 * `iterHistory` (plain and `.duas.gz`), and what `dumplings show` and
 * `dumplings export` read (`openSession` + the export's chunks), and SQLite's
 * `load`/`iterHistory` of what the codec let through (a `.duas` reaches SQLite
 * only as a decoded state: `dumplings import`). Each must
 * return exactly the saved data or a typed error (a `DumplingsError`):
 * never other data, never an untyped error. A few mutated files also go
 * through the real CLI.
 *
 * Bounded: `DUMPLINGS_FUZZ_MS` (@default 40000) or `DUMPLINGS_FUZZ_CASES`
 * cases, whichever ends first; `DUMPLINGS_FUZZ_SEED` replays another sequence.
 * A failure names the seed, the case number and the mutations.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { isDeepStrictEqual } from "node:util";
import { gzipSync } from "node:zlib";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { decodeState, decodeStateBytes } from "../../src/core/codec/bytes.js";
import { DumplingsError, FormatError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import type { AgentState } from "../../src/core/state.js";
import { exportStateString, loadStateString } from "../../src/index.js";
import { duasChunks } from "../../src/ops/export.js";
import { openSession } from "../../src/ops/sessions.js";
import { HistoryStats } from "../../src/ops/stats.js";
import { BUNDLED_TRAJECTORIES_DIR, readConversation } from "../../src/testing/samples.js";
import { makeState } from "../../src/testing/states.js";
import { runCli } from "../cli/run-cli.js";
import { goldenAnthropic, goldenOpenAI } from "./golden-states.js";

const SEED = Number(process.env.DUMPLINGS_FUZZ_SEED ?? 11);
const BUDGET_MS = Number(process.env.DUMPLINGS_FUZZ_MS ?? 35_000);
const MAX_CASES = Number(process.env.DUMPLINGS_FUZZ_CASES ?? 100_000);

const root = mkdtempSync(path.join(tmpdir(), "duas-fuzz-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** mulberry32: a small seeded PRNG (the same sequence on every machine). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Input {
  name: string;
  state: AgentState;
  bytes: Buffer;
  /** loadStateString can restore it (no hooks to import). */
  restorable: boolean;
  /** The save before the last (the file's `prior_commit`), and where the last save's lines start. */
  prior: AgentState;
  priorEnd: number;
}

/**
 * What a power loss between the last save's write and its fdatasync can leave: that save's lines cut
 * short or holding NUL (blocks never written). FileBackend reads such a file as the save before (its
 * `prior_commit`, whose own lines it checks); a file changed in any other way must not read as it.
 */
function powerLossShape(bytes: Buffer, input: Input): boolean {
  return bytes.length < input.bytes.length || bytes.subarray(input.priorEnd).includes(0);
}

async function inputs(): Promise<Input[]> {
  const states: [string, AgentState, boolean][] = [
    ["golden-openai", goldenOpenAI, false],
    ["golden-anthropic", goldenAnthropic, false],
  ];
  for (const file of [
    "spotter-short.jsonl",
    "spotter-short.anthropic.jsonl",
    "taubench-airline-gpt-4o-task00-trial0.jsonl",
  ]) {
    const c = readConversation(path.join(BUNDLED_TRAJECTORIES_DIR, file));
    states.push([
      c.id,
      makeState(c.messages, {
        protocol: c.protocol,
        name: c.id,
        uuid: "00000000-0000-4000-8000-0000000000f1",
        savedAt: "2026-11-30T12:00:00.000Z",
        config: { prompt: "You are a careful agent.\nAnswer briefly." },
        currentTaskId: "task-1",
        fields: { counter: 3, nested: { list: [1, 2.5, "x"], ok: true } },
      }),
      true,
    ]);
  }
  const out: Input[] = [];
  for (const [name, state, restorable] of states) {
    const dir = mkdtempSync(path.join(root, "src-"));
    const backend = new FileBackend({ baseDir: dir });
    const { revision } = await backend.write(
      "k",
      { ...state, history: state.history.slice(0, -1) },
      {
        expectedRevision: null,
      },
    );
    const priorEnd = readFileSync(path.join(dir, "k.duas")).length;
    // the last message goes through the append path, so the inputs hold both kinds of writes
    await backend.write("k", state, { expectedRevision: revision, baseLength: state.history.length - 1 });
    const history = state.history.slice(0, -1);
    const prior = { ...state, meta: { ...state.meta, messageCount: history.length }, history };
    out.push({ name, state, bytes: readFileSync(path.join(dir, "k.duas")), restorable, prior, priorEnd });
  }
  return out;
}

/** Line boundaries of `b`: [start, end) of each line, without its "\n". */
function lineSpans(b: Buffer): [number, number][] {
  const spans: [number, number][] = [];
  let pos = 0;
  while (pos < b.length) {
    const nl = b.indexOf(0x0a, pos);
    const end = nl < 0 ? b.length : nl;
    spans.push([pos, end]);
    pos = end + 1;
  }
  return spans;
}

function historySpans(b: Buffer): [number, number][] {
  const spans = lineSpans(b);
  const h = spans.findIndex(([s, e]) => b.toString("latin1", s, e) === "[HISTORY]");
  return h < 0 ? [] : spans.slice(h + 1);
}

type Mutation = (b: Buffer, r: () => number) => [Buffer, string];
const pick = <T>(r: () => number, items: readonly T[]): T => items[Math.floor(r() * items.length)] as T;
const int = (r: () => number, n: number) => Math.floor(r() * n);

const MUTATIONS: Record<string, Mutation> = {
  flip(b, r) {
    const c = Buffer.from(b);
    const at = int(r, c.length);
    const bit = int(r, 8);
    c[at] = (c[at] as number) ^ (1 << bit);
    return [c, `flip bit ${bit} at ${at}`];
  },
  byte(b, r) {
    const c = Buffer.from(b);
    const at = int(r, c.length);
    const v = pick(r, [0x0a, 0x0d, 0x22, 0x5c, 0x3d, 0x23, 0x5b, 0x20, 0x00, 0x7b, 0x7d, int(r, 256)]);
    c[at] = v;
    return [c, `byte ${v} at ${at}`];
  },
  truncate(b, r) {
    const n = r() < 0.5 ? int(r, b.length) : b.length - 1 - int(r, 200);
    return [b.subarray(0, Math.max(0, n)), `truncate to ${n}`];
  },
  duplicateLine(b, r) {
    const spans = r() < 0.7 ? historySpans(b) : lineSpans(b);
    if (spans.length === 0) return [b, "no line"];
    const [s, e] = pick(r, spans);
    return [Buffer.concat([b.subarray(0, e + 1), b.subarray(s, e + 1), b.subarray(e + 1)]), `duplicate line at ${s}`];
  },
  swapLines(b, r) {
    const spans = r() < 0.7 ? historySpans(b) : lineSpans(b);
    if (spans.length < 2) return [b, "no lines"];
    const i = int(r, spans.length - 1);
    const j = r() < 0.5 ? i + 1 : i + 1 + int(r, spans.length - i - 1);
    const [a, bb] = [spans[i] as [number, number], spans[j] as [number, number]];
    return [
      Buffer.concat([
        b.subarray(0, a[0]),
        b.subarray(bb[0], bb[1]),
        b.subarray(a[1], bb[0]),
        b.subarray(a[0], a[1]),
        b.subarray(bb[1]),
      ]),
      `swap lines at ${a[0]} and ${bb[0]}`,
    ];
  },
  invalidUtf8(b, r) {
    const seq = pick(r, [[0xff], [0xc3], [0x80], [0xed, 0xa0, 0x80], [0xc0, 0xaf], [0xf4, 0x90, 0x80, 0x80]]);
    const at = int(r, b.length);
    const replace = r() < 0.5;
    return [
      Buffer.concat([b.subarray(0, at), Buffer.from(seq), b.subarray(replace ? at + 1 : at)]),
      `${replace ? "replace" : "insert"} ${seq.map((x) => x.toString(16)).join(" ")} at ${at}`,
    ];
  },
  deepNesting(b, r) {
    const depth = pick(r, [100, 5000, 50_000]);
    const deep = "[".repeat(depth) + "]".repeat(depth);
    const spans = historySpans(b);
    if (r() < 0.3 || spans.length === 0) {
      const text = b.toString("latin1");
      const at = text.indexOf("\nfield.");
      if (at >= 0) {
        const eq = text.indexOf("=", at);
        const nl = text.indexOf("\n", eq);
        return [
          Buffer.concat([b.subarray(0, eq + 2), Buffer.from(deep), b.subarray(nl)]),
          `[STATE] field nested ${depth}`,
        ];
      }
    }
    if (spans.length === 0) return [b, "no history line to nest"];
    const [s, e] = pick(r, spans);
    const line = r() < 0.5 ? `{"role":"user","content":${deep}}` : `{"role":"user","content":"x","extra":${deep}}`;
    return [
      Buffer.concat([b.subarray(0, s), Buffer.from(line), b.subarray(e)]),
      `history line at ${s} nested ${depth}`,
    ];
  },
  hugeNumber(b, r) {
    const num = pick(r, ["1e400", "-1e400", "-0", "123456789012345678901234567890", "1e-400", "0.1e999"]);
    const text = b.toString("latin1");
    const digits = [...text.matchAll(/\d+(?:\.\d+)?/g)];
    if (r() < 0.5 && digits.length > 0) {
      const m = pick(r, digits);
      const at = m.index ?? 0;
      return [
        Buffer.concat([b.subarray(0, at), Buffer.from(num), b.subarray(at + m[0].length)]),
        `number ${m[0]} at ${at} → ${num}`,
      ];
    }
    const spans = historySpans(b);
    if (spans.length === 0) return [b, "no history"];
    const [s] = pick(r, spans);
    return [
      Buffer.concat([b.subarray(0, s + 1), Buffer.from(`"n":${num},`), b.subarray(s + 1)]),
      `"n":${num} in line at ${s}`,
    ];
  },
};
const KINDS = Object.keys(MUTATIONS);

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };
async function attempt(f: () => Promise<unknown> | unknown): Promise<Outcome> {
  try {
    return { ok: true, value: await f() };
  } catch (error) {
    return { ok: false, error };
  }
}

async function collect(it: AsyncIterable<Message>): Promise<Message[]> {
  const out: Message[] = [];
  for await (const m of it) out.push(m);
  return out;
}

/** Every read path over `bytes`; each entry: what it returned (normalised to a state) or threw. */
async function readPaths(
  bytes: Buffer,
  input: Input,
  dir: string,
  full: boolean,
  sqlite?: SQLiteBackend,
): Promise<Record<string, Outcome>> {
  const results: Record<string, Outcome> = {};
  const plain = path.join(dir, "k.duas");
  const gz = path.join(dir, "g.duas.gz");
  rmSync(path.join(dir, ".k.duas.hdr"), { force: true });
  writeFileSync(plain, bytes);
  writeFileSync(gz, gzipSync(bytes));
  const backend = new FileBackend({ baseDir: dir });
  results.decodeState = await attempt(() => decodeStateBytes(bytes, { source: "fuzz" }));
  results.load = await attempt(() => backend.load("k"));
  results.loadGz = await attempt(() => backend.load("g"));
  for (const key of ["k", "g"]) {
    results[`stream:${key}`] = await attempt(async () => {
      const header = await backend.readHeader(key);
      const history = await collect(backend.iterHistory(key));
      return { ...header?.header, history };
    });
  }
  results.show = await attempt(async () => {
    const session = await openSession(backend, "k", "file");
    const stats = new HistoryStats(5);
    const history: Message[] = [];
    for await (const m of session.history) {
      stats.add(m);
      history.push(m);
    }
    stats.summary();
    return { ...session.header, history };
  });
  results.export = await attempt(async () => {
    const session = await openSession(backend, "k", "file");
    let text = "";
    for await (const chunk of duasChunks(session, "k")) text += chunk;
    return decodeState(text);
  });
  if (full && sqlite) {
    // A mutated .duas reaches SQLite only through the codec (`dumplings import`, loadStateString + save):
    // what SQLite then loads and streams must still be the saved data.
    results.sqlite = await attempt(async () => {
      const state = decodeStateBytes(bytes, { source: "fuzz" });
      const key = `fuzz-${Math.random().toString(36).slice(2)}`;
      await sqlite.save(key, state);
      const loaded = await sqlite.load(key);
      const streamed = await collect(sqlite.iterHistory(key));
      await sqlite.delete(key);
      if (!isDeepStrictEqual(streamed, loaded.history)) throw new Error("sqlite iterHistory differs from load");
      return loaded;
    });
  }
  if (full && input.restorable) {
    // loadStateString takes text: bytes decoded the way a caller would (invalid UTF-8 becomes U+FFFD)
    results.loadStateString = await attempt(async () => {
      const agent = await loadStateString(new TextDecoder().decode(bytes), { source: "fuzz" });
      const back = decodeState(exportStateString(agent));
      return { ...back, meta: { ...back.meta, savedAt: input.state.meta.savedAt } };
    });
  }
  return results;
}

describe("every .duas read path under seeded mutation", () => {
  it(`returns the saved data or a typed error (seed ${SEED}, ${BUDGET_MS} ms)`, async () => {
    const all = await inputs();
    const dir = mkdtempSync(path.join(root, "case-"));
    const sqlite = new SQLiteBackend({ dbPath: path.join(root, "fuzz.db") });
    const r = prng(SEED);
    const started = Date.now();
    const tally = new Map<string, { same: number; refused: number }>();
    let cases = 0;
    for (; cases < MAX_CASES && Date.now() - started < BUDGET_MS; cases++) {
      const input = pick(r, all);
      let bytes = input.bytes;
      const applied: string[] = [];
      const rounds = r() < 0.15 ? 2 : 1;
      for (let i = 0; i < rounds; i++) {
        const kind = pick(r, KINDS);
        const [next, what] = (MUTATIONS[kind] as Mutation)(bytes, r);
        bytes = next;
        applied.push(`${kind}: ${what}`);
      }
      const results = await readPaths(bytes, input, dir, cases % 8 === 0, sqlite);
      for (const [name, o] of Object.entries(results)) {
        const where = `seed ${SEED} case ${cases} (${input.name}; ${applied.join("; ")}) via ${name}`;
        const t = tally.get(name) ?? { same: 0, refused: 0 };
        tally.set(name, t);
        if (o.ok) {
          const expected = name === "loadStateString" ? { ...input.state, history: input.state.history } : input.state;
          const same = (v: unknown) =>
            isDeepStrictEqual(JSON.parse(JSON.stringify(o.value)), JSON.parse(JSON.stringify(v)));
          if (!same(expected) && !(name !== "loadStateString" && powerLossShape(bytes, input) && same(input.prior))) {
            expect.fail(`${where}: returned other data than was saved`);
          }
          t.same++;
        } else {
          // Damaged content is a FormatError on every storage path (not a BACKEND_ERROR); loadStateString may
          // also refuse what the damaged text names (an unknown class: AgentNotFoundError).
          const typed = name === "loadStateString" ? o.error instanceof DumplingsError : o.error instanceof FormatError;
          if (!typed) {
            const e = o.error as Error;
            expect.fail(`${where}: not a typed error: ${e?.name} ${(e as { code?: string })?.code}: ${e?.message}`);
          }
          t.refused++;
        }
      }
    }
    console.log(
      `read-path fuzz: seed ${SEED}, ${cases} cases in ${Date.now() - started} ms; per path (same/refused):`,
      Object.fromEntries([...tally].map(([k, v]) => [k, `${v.same}/${v.refused}`])),
    );
    expect(cases).toBeGreaterThan(50);
    // the unmutated inputs load on every path (the harness itself is sound)
    for (const input of all) {
      for (const [name, o] of Object.entries(await readPaths(input.bytes, input, dir, true, sqlite))) {
        expect(o.ok, `${input.name} via ${name}: ${o.ok ? "" : (o.error as Error).message}`).toBe(true);
      }
    }
    await sqlite.close();
  }, 120_000);

  it("the CLI's show and export: exit 0 with the saved data, or exit 4 and nothing on stdout", async () => {
    const all = await inputs();
    const r = prng(SEED + 1);
    // one mutation of the kinds that used to get through (each CLI run is a process start: a few only)
    for (const kind of ["duplicateLine", "invalidUtf8", "swapLines"]) {
      const input = pick(
        r,
        all.filter((i) => i.restorable),
      );
      const [bytes, what] = (MUTATIONS[kind] as Mutation)(input.bytes, r);
      const dir = mkdtempSync(path.join(root, "cli-"));
      writeFileSync(path.join(dir, "k.duas"), bytes);
      const where = `${kind}: ${what}`;
      const show = runCli(["show", "k", "--dir", dir, "--json"]);
      expect([0, 4], `show after ${where}: ${show.stderr}`).toContain(show.code);
      if (show.code === 0) {
        const shown = JSON.parse(show.stdout) as { config: unknown; messages: { total: number } };
        expect(shown.config).toEqual(input.state.config);
        expect(shown.messages.total).toBe(input.state.history.length);
      }
      const exported = runCli(["export", "k", "--dir", dir]);
      expect([0, 4], `export after ${where}: ${exported.stderr}`).toContain(exported.code);
      if (exported.code === 0) expect(decodeState(exported.stdout)).toEqual(input.state);
      else expect(exported.stdout, `export after ${where} wrote before failing`).toBe("");
    }
  }, 120_000);
});
