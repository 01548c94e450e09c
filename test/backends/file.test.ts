/**
 * FileBackend specifics: the files it writes, O(new messages) appends with
 * in-place header updates, torn-tail repair, revisions across instances,
 * gzip, streaming, locks, path traversal (pb-24) and values JSON cannot
 * carry (pb-06, pb-08, pb-09).
 */
import { spawnSync } from "node:child_process";
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { decodeState, decodeStateBytes } from "../../src/core/codec/bytes.js";
import { encodeState } from "../../src/core/codec/encode.js";
import {
  BackendError,
  ConflictError,
  FormatError,
  InvalidKeyError,
  NonJsonValueError,
  StateNotFoundError,
} from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import type { AgentState } from "../../src/core/state.js";
import { makeState } from "../../src/testing/states.js";

let root: string;
/** The files of `dir` but the OS locks' `.<name>.lck` files (kept between saves: see file.locks.test.ts). */
const dataFiles = (d: string) => readdirSync(d).filter((n) => !n.endsWith(".lck"));

let dir: string;
beforeEach(() => {
  root = mkdtempSync(path.join(tmpdir(), "duas-file-"));
  dir = path.join(root, "sessions");
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

const msg = (i: number): Message => ({ role: i % 2 ? "assistant" : "user", content: `m${i} ${"ü".repeat(i % 5)}` });
const hist = (n: number) => Array.from({ length: n }, (_, i) => msg(i));
const st = (n: number, extra: Parameters<typeof makeState>[1] = {}): AgentState =>
  makeState(hist(n), { uuid: "u-1", name: "a", savedAt: "2026-01-01T00:00:00.000Z", ...extra });
const file = (key: string, ext = ".duas") => path.join(dir, `${key}${ext}`);

async function errorOf(p: Promise<unknown> | (() => Promise<unknown>)): Promise<unknown> {
  try {
    await (typeof p === "function" ? p() : p);
  } catch (e) {
    return e;
  }
  throw new Error("expected an error");
}

describe("files on disk", () => {
  it("creates baseDir on first write and one <key>.duas per session, readable by the codec", async () => {
    const b = new FileBackend({ baseDir: dir });
    expect(await b.listKeys()).toEqual([]);
    await b.save("s1", st(3));
    expect(dataFiles(dir)).toEqual(["s1.duas"]);
    const text = readFileSync(file("s1"), "utf8");
    expect(text).toMatch(/^# dumplingsAI Agent State File\n# format: duagent-state\/1\.0\n/);
    expect(text).toMatch(/\nrevision = 1 +\n/);
    expect(decodeState(text)).toEqual(st(3));
    expect(await b.load("s1")).toEqual(st(3));
  });

  it("missing key: load throws StateNotFoundError, read is undefined, delete is false", async () => {
    const b = new FileBackend({ baseDir: dir });
    const e = await errorOf(b.load("nope"));
    expect(e).toBeInstanceOf(StateNotFoundError);
    expect((e as StateNotFoundError).backend).toBe("file");
    expect(await b.read("nope")).toBeUndefined();
    expect(await b.delete("nope")).toBe(false);
    expect(existsSync(dir)).toBe(false);
  });

  it("listKeys returns stems and ignores temp, lock and other files", async () => {
    const b = new FileBackend({ baseDir: dir });
    await b.save("a", st(1));
    await new FileBackend({ baseDir: dir, gzip: true }).save("b", st(1));
    writeFileSync(path.join(dir, ".a.duas.123.abc.tmp"), "x");
    writeFileSync(path.join(dir, "other.duas.lock"), "x");
    writeFileSync(path.join(dir, "notes.txt"), "x");
    writeFileSync(path.join(dir, ".hidden.duas"), "x");
    expect(await b.listKeys()).toEqual(["a", "b"]);
    expect(await b.delete("a")).toBe(true);
    expect(await b.delete("a")).toBe(false);
    expect(await b.listKeys()).toEqual(["b"]);
  });

  it("a malformed file is a FormatError naming the file and line, and is left untouched", async () => {
    const b = new FileBackend({ baseDir: dir });
    await b.save("bad", st(2));
    const broken = readFileSync(file("bad"), "utf8").replace("max_tokens = 4096", "max_tokens = lots");
    writeFileSync(file("bad"), broken);
    const e = await errorOf(b.load("bad"));
    expect(e).toBeInstanceOf(FormatError);
    expect((e as FormatError).file).toBe(file("bad"));
    expect((e as FormatError).line).toBe(broken.split("\n").findIndex((l) => l.startsWith("max_tokens")) + 1);
    expect(await errorOf(b.write("bad", st(3), { expectedRevision: 1, baseLength: 2 }))).toBeInstanceOf(FormatError);
    expect(readFileSync(file("bad"), "utf8")).toBe(broken);
    // force overwrites on purpose
    await b.write("bad", st(3), { force: true });
    expect(await b.load("bad")).toEqual(st(3));
  });
});

describe("O(new messages) appends", () => {
  it("appends only the new lines and updates the fixed-width header in place", async () => {
    const b = new FileBackend({ baseDir: dir });
    let r = await b.write("k", st(2), { expectedRevision: null });
    expect(r).toEqual({ revision: 1, written: 2, rewritten: true });
    const headerLen = readFileSync(file("k"), "utf8").indexOf("[HISTORY]\n");
    const ino = statSync(file("k")).ino;
    for (let n = 3; n <= 60; n++) {
      const before = statSync(file("k")).size;
      const state = st(n, { currentTaskId: `task-${n}`, savedAt: new Date(1e12 + n).toISOString(), fields: { n } });
      r = await b.write("k", state, { expectedRevision: r.revision, baseLength: n - 1 });
      expect(r).toEqual({ revision: n - 1, written: 1, rewritten: false });
      const after = statSync(file("k")).size;
      expect(after - before).toBe(Buffer.byteLength(`${JSON.stringify(msg(n - 1))}\n`));
      expect(await b.read("k")).toEqual({ state, revision: n - 1 });
    }
    const text = readFileSync(file("k"), "utf8");
    expect(text.indexOf("[HISTORY]\n")).toBe(headerLen); // never moved
    expect(statSync(file("k")).ino).toBe(ino); // same file: no rename
    expect(decodeState(text).state.fields).toEqual({ n: 60 });
  });

  it("a fresh instance (another process) appends after scanning once, and sees others' writes", async () => {
    const a = new FileBackend({ baseDir: dir });
    const b = new FileBackend({ baseDir: dir });
    const r1 = await a.write("k", st(5));
    const r2 = await b.write("k", st(7), { expectedRevision: r1.revision, baseLength: 5 });
    expect(r2.rewritten).toBe(false);
    // a's cache is stale: it must notice (size/header changed) and conflict on the old revision
    expect(await errorOf(a.write("k", st(8), { expectedRevision: r1.revision, baseLength: 7 }))).toBeInstanceOf(
      ConflictError,
    );
    const r3 = await a.write("k", st(8), { expectedRevision: r2.revision, baseLength: 7 });
    expect(r3).toEqual({ revision: 3, written: 1, rewritten: false });
    expect(await b.load("k")).toEqual(st(8));
  });

  it("falls back to a whole-file write when baseLength is absent, wrong, or the prefix changed", async () => {
    const b = new FileBackend({ baseDir: dir });
    let r = await b.write("k", st(4));
    r = await b.write("k", st(5), { expectedRevision: r.revision });
    expect(r.rewritten).toBe(true);
    r = await b.write("k", st(6), { expectedRevision: r.revision, baseLength: 3 });
    expect(r.rewritten).toBe(true);
    const edited = st(7);
    edited.history[5] = { role: "assistant", content: "edited" };
    r = await b.write("k", edited, { expectedRevision: r.revision, baseLength: 6 });
    expect(r.rewritten).toBe(true);
    expect(await b.load("k")).toEqual(edited);
  });

  it("a header that outgrows its padding (long prompt change) is a whole-file write, then appends resume", async () => {
    const b = new FileBackend({ baseDir: dir });
    let r = await b.write("k", st(2));
    r = await b.write("k", st(3, { config: { prompt: "p".repeat(5000) } }), {
      expectedRevision: r.revision,
      baseLength: 2,
    });
    expect(r.rewritten).toBe(true);
    r = await b.write("k", st(4, { config: { prompt: "p".repeat(5000) } }), {
      expectedRevision: r.revision,
      baseLength: 3,
    });
    expect(r.rewritten).toBe(false);
    expect(await b.load("k")).toEqual(st(4, { config: { prompt: "p".repeat(5000) } }));
  });

  it("a file written by the plain codec (no revision, no padding) counts as revision 1; the first append re-pads it", async () => {
    mkdirSync(dir);
    writeFileSync(file("k"), encodeState(st(2)));
    const b = new FileBackend({ baseDir: dir });
    expect(await b.read("k")).toEqual({ state: st(2), revision: 1 });
    const r1 = await b.write("k", st(3), { expectedRevision: 1, baseLength: 2 });
    expect(r1).toEqual({ revision: 2, written: 3, rewritten: true });
    const r2 = await b.write("k", st(4), { expectedRevision: 2, baseLength: 3 });
    expect(r2).toEqual({ revision: 3, written: 1, rewritten: false });
    expect(dataFiles(dir)).toEqual(["k.duas"]); // no temp or lock file left behind
  });

  it("with a long prompt, header changes across pages stay appends (through the header journal)", async () => {
    const prompt = "rule. ".repeat(1500);
    const b = new FileBackend({ baseDir: dir });
    let r = await b.write("k", st(2, { config: { prompt }, currentTaskId: "t-2" }));
    for (let n = 3; n < 8; n++) {
      const state = st(n, { config: { prompt }, currentTaskId: `t-${n}`, fields: { n } });
      r = await b.write("k", state, { expectedRevision: r.revision, baseLength: n - 1 });
      expect(r.rewritten).toBe(false);
      expect(await new FileBackend({ baseDir: dir }).read("k")).toEqual({ state, revision: r.revision });
    }
    expect(existsSync(path.join(dir, ".k.duas.hdr"))).toBe(true);
    expect(await b.listKeys()).toEqual(["k"]);
    expect(await b.delete("k")).toBe(true);
    // the journal goes with the session; what stays is the floor of revisions (re-created keys start above it)
    expect(dataFiles(dir)).toEqual([".revision-floor"]);
  });

  it("a crash in the middle of a multi-page save is rolled forward from the journal", async () => {
    const prompt = "rule. ".repeat(1500);
    const s3 = st(3, { config: { prompt }, currentTaskId: "t-3" });
    const s4 = st(4, { config: { prompt }, currentTaskId: "t-4444", fields: { n: 4 } });
    const b = new FileBackend({ baseDir: dir });
    const r = await b.write("k", s3);
    const before = readFileSync(file("k"));
    await b.write("k", s4, { expectedRevision: r.revision, baseLength: 3 });
    const after = readFileSync(file("k"));
    const journal = readFileSync(path.join(dir, ".k.duas.hdr"));
    const headerLen = after.indexOf("[HISTORY]\n") + 10;
    expect(headerLen).toBeGreaterThan(4096);
    // torn: new first page, old rest of the header, new history (written before the journal)
    const torn = Buffer.concat([after.subarray(0, 4096), before.subarray(4096, headerLen), after.subarray(headerLen)]);
    // not yet written at all: old header, new history
    const unwritten = Buffer.concat([before.subarray(0, headerLen), after.subarray(headerLen)]);
    // the journal commits the save before any byte of the file is touched: nothing of it may be on disk
    const newLines = after.subarray(before.length);
    const partData = Buffer.concat([before, newLines.subarray(0, Math.floor(newLines.length / 2))]);
    for (const bytes of [torn, unwritten, before, partData]) {
      writeFileSync(file("k"), bytes); // same inode
      const fresh = new FileBackend({ baseDir: dir });
      expect(await fresh.read("k")).toEqual({ state: s4, revision: 2 });
      const streamed: Message[] = [];
      for await (const m of fresh.iterHistory("k")) streamed.push(m);
      expect(streamed).toEqual(s4.history);
      expect((await fresh.readHeader("k"))?.header.state.currentTaskId).toBe("t-4444");
      // the next writer repairs the file itself
      const s5 = st(5, { config: { prompt }, currentTaskId: "t-5" });
      await fresh.write("k", s5, { expectedRevision: 2, baseLength: 4 });
      expect(decodeStateBytes(readFileSync(file("k")))).toEqual(s5);
      writeFileSync(file("k"), after);
      writeFileSync(path.join(dir, ".k.duas.hdr"), journal);
    }
    // a journal of an older revision never rolls a newer file back
    const s5 = st(5, { config: { prompt }, currentTaskId: "t-4445", fields: { n: 4 } });
    await new FileBackend({ baseDir: dir }).write("k", s5, { expectedRevision: 2, baseLength: 4 });
    const s6 = st(6, { config: { prompt }, currentTaskId: "t-4445", fields: { n: 4 } }); // single-page change
    await new FileBackend({ baseDir: dir }).write("k", s6, { expectedRevision: 3, baseLength: 5 });
    expect(await new FileBackend({ baseDir: dir }).read("k")).toEqual({ state: s6, revision: 4 });
  });

  it("lines beyond message_count (an interrupted append) are ignored on load and repaired by the next write", async () => {
    const b = new FileBackend({ baseDir: dir });
    const r = await b.write("k", st(3));
    const committed = readFileSync(file("k"));
    // a crash after appending (complete line + torn line) and before the header update
    appendFileSync(file("k"), `${JSON.stringify(msg(3))}\n{"role":"us`);
    const fresh = new FileBackend({ baseDir: dir });
    expect(await fresh.load("k")).toEqual(st(3));
    const streamed: Message[] = [];
    for await (const m of fresh.iterHistory("k")) streamed.push(m);
    expect(streamed).toEqual(hist(3));
    expect(() => decodeStateBytes(readFileSync(file("k")))).toThrow(FormatError); // strict codec sees the tail
    const w = await fresh.write("k", st(5), { expectedRevision: r.revision, baseLength: 3 });
    expect(w.rewritten).toBe(false);
    const bytes = readFileSync(file("k"));
    expect(decodeStateBytes(bytes)).toEqual(st(5)); // strictly valid again: the tail was truncated
    expect(bytes.subarray(committed.indexOf("[HISTORY]\n") + 10, committed.length)).toEqual(
      committed.subarray(committed.indexOf("[HISTORY]\n") + 10),
    );
  });

  it("a file cut inside the committed history is a FormatError, not a shorter state", async () => {
    const b = new FileBackend({ baseDir: dir });
    await b.write("k", st(4));
    const bytes = readFileSync(file("k"));
    writeFileSync(file("k"), bytes.subarray(0, bytes.length - 5));
    expect(await errorOf(new FileBackend({ baseDir: dir }).load("k"))).toBeInstanceOf(FormatError);
  });
});

describe("revisions and compare-and-set", () => {
  it("null = must not exist; stale revision, and a write after delete, conflict and write nothing", async () => {
    const b = new FileBackend({ baseDir: dir });
    const r1 = await b.write("k", st(1), { expectedRevision: null });
    const e = (await errorOf(b.write("k", st(2), { expectedRevision: null }))) as ConflictError;
    expect(e).toBeInstanceOf(ConflictError);
    expect([e.expectedRevision, e.actualRevision]).toEqual([null, 1]);
    const r2 = await b.write("k", st(2), { expectedRevision: r1.revision, baseLength: 1 });
    const stale = (await errorOf(
      b.write("k", st(3), { expectedRevision: r1.revision, baseLength: 1 }),
    )) as ConflictError;
    expect([stale.expectedRevision, stale.actualRevision]).toEqual([1, 2]);
    expect(stale.message).toContain("expected revision 1, stored revision is 2");
    expect(await b.load("k")).toEqual(st(2));
    expect(await b.delete("k")).toBe(true);
    const late = (await errorOf(
      b.write("k", st(3), { expectedRevision: r2.revision, baseLength: 2 }),
    )) as ConflictError;
    expect([late.expectedRevision, late.actualRevision]).toEqual([2, null]);
    expect(await b.listKeys()).toEqual([]);
    expect(dataFiles(dir)).toEqual([".revision-floor"]);
    // a session created again on the key starts above the deleted revision: r2's holder can never write it
    const f = await b.write("k", st(1), { expectedRevision: 7, force: true });
    expect(f.revision).toBe(r2.revision + 1);
  });
});

describe("gzip", () => {
  it("writes <key>.duas.gz (whole files), loads, streams, and converts to plain when a plain backend writes", async () => {
    const gz = new FileBackend({ baseDir: dir, gzip: true });
    let r = await gz.write("z", st(3));
    r = await gz.write("z", st(4), { expectedRevision: r.revision, baseLength: 3 });
    expect(r).toEqual({ revision: 2, written: 4, rewritten: true });
    const bytes = readFileSync(file("z", ".duas.gz"));
    expect([bytes[0], bytes[1]]).toEqual([0x1f, 0x8b]);
    expect(decodeStateBytes(bytes)).toEqual(st(4));
    const streamed: Message[] = [];
    for await (const m of gz.iterHistory("z")) streamed.push(m);
    expect(streamed).toEqual(hist(4));
    expect((await gz.readHeader("z"))?.header.meta.messageCount).toBe(4);
    const plain = new FileBackend({ baseDir: dir });
    expect(await plain.read("z")).toEqual({ state: st(4), revision: 2 });
    await plain.write("z", st(5), { expectedRevision: 2, baseLength: 4 });
    expect(dataFiles(dir).sort()).toEqual(["z.duas"]);
    expect(await gz.load("z")).toEqual(st(5));
  });

  it("a corrupt .duas.gz is a FormatError", async () => {
    const gz = new FileBackend({ baseDir: dir, gzip: true });
    await gz.save("z", st(3));
    const bytes = readFileSync(file("z", ".duas.gz"));
    writeFileSync(file("z", ".duas.gz"), bytes.subarray(0, bytes.length - 10));
    expect(await errorOf(gz.load("z"))).toBeInstanceOf(FormatError);
    expect(
      await errorOf(async () => {
        for await (const _ of gz.iterHistory("z")) {
          // drain
        }
      }),
    ).toBeInstanceOf(FormatError);
  });
});

describe("streaming", () => {
  it("iterHistory yields messages in order, stops early without leaking, and names a bad line", async () => {
    const b = new FileBackend({ baseDir: dir });
    await b.save("k", st(500));
    let i = 0;
    for await (const m of b.iterHistory("k")) {
      expect(m).toEqual(msg(i));
      if (++i === 10) break;
    }
    const text = readFileSync(file("k"), "utf8");
    const lines = text.split("\n");
    const bad = lines.indexOf(JSON.stringify(msg(250)));
    lines[bad] = "{not json";
    writeFileSync(file("k"), lines.join("\n"));
    const e = (await errorOf(async () => {
      for await (const _ of b.iterHistory("k")) {
        // drain
      }
    })) as FormatError;
    expect(e).toBeInstanceOf(FormatError);
    expect(e.line).toBe(bad + 1);
    expect(await errorOf(async () => b.iterHistory("missing").next())).toBeInstanceOf(StateNotFoundError);
  });

  it("readHeader returns meta/config/state and the revision without the history", async () => {
    const b = new FileBackend({ baseDir: dir });
    await b.save("k", st(3, { currentTaskId: "t" }));
    const h = await b.readHeader("k");
    expect(h?.revision).toBe(1);
    expect(h?.header.state.currentTaskId).toBe("t");
    expect(h?.header.meta.messageCount).toBe(3);
    expect(await b.readHeader("none")).toBeUndefined();
  });
});

describe("locks", () => {
  it('locks: "files": a lock left by a dead process is broken; a live holder makes the write wait, then time out', async () => {
    const b = new FileBackend({ baseDir: dir, lockTimeoutMs: 300, locks: "files" });
    await b.save("k", st(1));
    const dead = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"]).stdout.toString();
    const host = (await import("node:os")).hostname();
    writeFileSync(`${file("k")}.lock`, `${dead}\n${host}\n`);
    await b.save("k", st(2));
    expect(existsSync(`${file("k")}.lock`)).toBe(false);
    // an empty lock (a holder killed between creating and filling it) older than a second is stale
    writeFileSync(`${file("k")}.lock`, "");
    utimesSync(`${file("k")}.lock`, new Date(Date.now() - 5000), new Date(Date.now() - 5000));
    await b.save("k", st(3));
    // a live holder (our parent process) is waited for
    writeFileSync(`${file("k")}.lock`, `${process.ppid}\n${host}\n`);
    const e = await errorOf(b.save("k", st(4)));
    expect(e).toBeInstanceOf(BackendError);
    expect((e as Error).message).toContain("lock");
    expect(await b.load("k")).toEqual(st(3));
  });

  it("concurrent CAS writers in one process: exactly one wins per revision", async () => {
    const b = new FileBackend({ baseDir: dir });
    const r = await b.write("k", st(1));
    const results = await Promise.allSettled(
      [0, 1, 2, 3, 4].map(() => b.write("k", st(2), { expectedRevision: r.revision, baseLength: 1 })),
    );
    expect(results.filter((x) => x.status === "fulfilled")).toHaveLength(1);
    for (const x of results) if (x.status === "rejected") expect(x.reason).toBeInstanceOf(ConflictError);
  });
});

describe("pb-24: path traversal via ids", () => {
  it("traversal keys are refused before any file system call; nothing is created outside baseDir", async () => {
    mkdirSync(dir);
    const b = new FileBackend({ baseDir: dir });
    const bad = [
      "../../etc/cron.d/evil",
      "../../../../root/.ssh/id_rsa",
      "/etc/passwd",
      "..\\..\\windows\\win.ini",
      "a/b",
      "",
      "nul\u0000byte",
      "..",
      ".hidden",
    ];
    for (const key of bad) {
      expect(await errorOf(b.save(key, st(1))), key).toBeInstanceOf(InvalidKeyError);
      expect(await errorOf(b.load(key)), key).toBeInstanceOf(InvalidKeyError);
      expect(await errorOf(b.delete(key)), key).toBeInstanceOf(InvalidKeyError);
      expect(await errorOf(b.write(key, st(1), { expectedRevision: null })), key).toBeInstanceOf(InvalidKeyError);
    }
    expect(readdirSync(root)).toEqual(["sessions"]);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("look-alike keys stay literal file names inside baseDir and stay distinct", async () => {
    const b = new FileBackend({ baseDir: dir });
    const keys = ["%2e%2e%2fsecret", "a_b", "CON", "a b", "ключ"];
    for (const key of keys) await b.save(key, st(1, { fields: { k: key } }));
    for (const key of keys) expect((await b.load(key)).state.fields.k).toBe(key);
    const real = realpathSync(dir);
    for (const name of readdirSync(dir)) expect(path.dirname(realpathSync(path.join(dir, name)))).toBe(real);
    expect((await b.listKeys()).sort()).toEqual([...keys].sort());
    expect(readdirSync(root)).toEqual(["sessions"]);
  });

  it("a symlink planted in baseDir is never followed", async () => {
    mkdirSync(dir);
    const outside = path.join(root, "outside.txt");
    writeFileSync(outside, "secret");
    symlinkSync(outside, file("evil"));
    const b = new FileBackend({ baseDir: dir });
    expect(await errorOf(b.load("evil"))).toBeInstanceOf(BackendError);
    expect(await errorOf(b.save("evil", st(1)))).toBeInstanceOf(BackendError);
    expect(readFileSync(outside, "utf8")).toBe("secret");
  });
});

describe("cases pb-06, pb-08, pb-09 on the file backend", () => {
  it("pb-06: lone surrogates and emoji round-trip exactly through the file (stored as \\u escapes in valid UTF-8)", async () => {
    const b = new FileBackend({ baseDir: dir });
    const history = [
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_B2", content: "ok \ud83d\udd11 done" }] },
      { role: "user", content: "bad \ud83d end" },
    ] as Message[];
    const state = makeState(history, { protocol: "anthropic" });
    await b.save("conv-6", state);
    const bytes = readFileSync(file("conv-6"));
    expect(() => new TextDecoder("utf-8", { fatal: true }).decode(bytes)).not.toThrow();
    expect(bytes.toString("utf8")).toContain("bad \\ud83d end");
    expect(await b.load("conv-6")).toEqual(state);
  });

  it("pb-08/pb-09: BigInt, NaN, -0 and cycles are refused with the path; the previous save stays intact", async () => {
    const b = new FileBackend({ baseDir: dir });
    const r = await b.write("wf", st(2));
    const before = readFileSync(file("wf"));
    const turn: Record<string, unknown> = { id: "turn-1" };
    turn.currentStep = { n: 1, turn };
    const bads: [unknown, string][] = [
      [2n ** 256n - 1n, "history[2].output"],
      [Number.NaN, "history[2].output"],
      [-0, "history[2].output"],
      [turn, "history[2].output.currentStep.turn"],
    ];
    for (const [value, where] of bads) {
      const state = st(3);
      (state.history[2] as Record<string, unknown>).output = value;
      for (const options of [{}, { expectedRevision: r.revision, baseLength: 2 }]) {
        const e = (await errorOf(b.write("wf", state, options))) as NonJsonValueError;
        expect(e).toBeInstanceOf(NonJsonValueError);
        expect(e.path).toBe(where);
        expect(e.messageIndex).toBe(2);
      }
    }
    expect(readFileSync(file("wf"))).toEqual(before);
    expect(before.toString()).not.toContain("[Circular]");
    expect(await b.read("wf")).toEqual({ state: st(2), revision: r.revision });
    const fields = makeState([], { fields: { turn } as never });
    expect(await errorOf(b.save("wf2", fields))).toBeInstanceOf(NonJsonValueError);
    expect(existsSync(file("wf2"))).toBe(false);
  });
});

describe("exports", () => {
  it("encodeState of a loaded state equals the codec's text of the same state (no backend-only fields leak)", async () => {
    const b = new FileBackend({ baseDir: dir });
    await b.save("k", st(3));
    expect(encodeState(await b.load("k"))).toBe(encodeState(st(3)));
  });
});
