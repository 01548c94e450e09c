/**
 * In-process tests of the CLI's pure parts: durations, input parsing, history
 * statistics, deep comparison, error lines and exit codes, progress output.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { StateBackend } from "../../src/backends/types.js";
import { firstDifference } from "../../src/cli/compare.js";
import { parseDuration } from "../../src/cli/duration.js";
import { classifyInput, readImportInput } from "../../src/cli/inputs.js";
import { Progress } from "../../src/cli/progress.js";
import { encodeState } from "../../src/core/codec/encode.js";
import { DumplingsError, FormatError, StateNotFoundError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import { ExitCode, errorLine, exitCodeFor, UsageError } from "../../src/ops/errors.js";
import { duasChunks } from "../../src/ops/export.js";
import { openSession } from "../../src/ops/sessions.js";
import { HistoryStats, previewMessage, toolCallNames } from "../../src/ops/stats.js";
import { loadSampleConversations } from "../../src/testing/samples.js";
import { makeState } from "../../src/testing/states.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-cli-units-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("parseDuration", () => {
  it("reads units and chains", () => {
    expect(parseDuration("30d")).toBe(30 * 86_400_000);
    expect(parseDuration("12h")).toBe(12 * 3_600_000);
    expect(parseDuration("1d12h")).toBe(36 * 3_600_000);
    expect(parseDuration("90m")).toBe(90 * 60_000);
    expect(parseDuration("500ms")).toBe(500);
    expect(parseDuration("2w")).toBe(14 * 86_400_000);
  });
  it.each(["", "30", "d", "30x", "-1d", "0d", "30d junk", "99999999999d"])("refuses %j", (text) => {
    expect(() => parseDuration(text)).toThrow(UsageError);
  });
  it("says why a zero or an out-of-range duration is refused", () => {
    expect(() => parseDuration("0s")).toThrow(/longer than 0/);
    expect(() => parseDuration("99999999999d")).toThrow(/JavaScript dates/);
  });
});

describe("import inputs", () => {
  it("classifies file names and keeps the stem", () => {
    expect(classifyInput("a/b/run-1.jsonl")).toEqual({ kind: "jsonl", stem: "run-1" });
    expect(classifyInput("x.duas.gz")).toEqual({ kind: "duas", stem: "x" });
    expect(classifyInput("x.duas")).toEqual({ kind: "duas", stem: "x" });
    expect(classifyInput("chat.json")).toEqual({ kind: "json", stem: "chat" });
    expect(classifyInput("s.anthropic.jsonl")).toEqual({ kind: "jsonl", stem: "s.anthropic" });
    expect(classifyInput("notes.txt")).toBeUndefined();
  });

  it("reads every bundled conversation as JSONL with its protocol", async () => {
    for (const conv of loadSampleConversations()) {
      const input = await readImportInput(conv.file);
      expect(input.kind).toBe("jsonl");
      if (input.kind === "duas") throw new Error("unexpected");
      expect(input.protocol).toBe(conv.protocol);
      expect(input.messages).toEqual(conv.messages);
    }
  });

  it("reads a JSON array and a {messages} object", async () => {
    const messages = [
      { role: "user", content: "hi" },
      { role: "assistant", content: "hello" },
    ];
    writeFileSync(path.join(dir, "arr.json"), JSON.stringify(messages, null, 2));
    writeFileSync(path.join(dir, "req.json"), JSON.stringify({ model: "m", messages }));
    for (const f of ["arr.json", "req.json"]) {
      const input = await readImportInput(path.join(dir, f));
      if (input.kind === "duas") throw new Error("unexpected");
      expect(input.messages).toEqual(messages);
    }
  });

  it("takes a single {messages} JSONL line as the conversation, refuses several", async () => {
    const messages = [
      { role: "system", content: "be brief" },
      { role: "user", content: "hi" },
    ];
    const one = path.join(dir, "ft-one.jsonl");
    writeFileSync(one, `${JSON.stringify({ messages })}\n`);
    const input = await readImportInput(one);
    if (input.kind === "duas") throw new Error("unexpected");
    expect(input.messages).toEqual(messages);
    const two = path.join(dir, "ft-two.jsonl");
    writeFileSync(two, `${JSON.stringify({ messages })}\n${JSON.stringify({ messages })}\n`);
    await expect(readImportInput(two)).rejects.toThrow(/whole conversation.*one file per line/);
  });

  it("names the file and line of a bad JSONL line", async () => {
    const file = path.join(dir, "bad.jsonl");
    writeFileSync(file, '{"role":"user","content":"a"}\n\n{"role":"user","content":\n');
    const error = await readImportInput(file).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FormatError);
    expect((error as FormatError).line).toBe(3);
    expect((error as FormatError).message).toContain("bad.jsonl:line 3");
  });

  it("refuses a message of the wrong shape with its line", async () => {
    const file = path.join(dir, "shape.jsonl");
    writeFileSync(file, '{"role":"user","content":"a"}\n{"role":"tool","content":"x"}\n');
    const error = (await readImportInput(file).catch((e: unknown) => e)) as FormatError;
    expect(error).toBeInstanceOf(FormatError);
    expect(error.line).toBe(2);
    expect(error.message).toMatch(/tool_call_id/);
  });

  it("refuses JSON that is not a message list, and unknown extensions", async () => {
    writeFileSync(path.join(dir, "obj.json"), '{"a":1}');
    await expect(readImportInput(path.join(dir, "obj.json"))).rejects.toThrow(FormatError);
    writeFileSync(path.join(dir, "x.txt"), "hi");
    await expect(readImportInput(path.join(dir, "x.txt"))).rejects.toThrow(FormatError);
    await expect(readImportInput(path.join(dir, "missing.jsonl"))).rejects.toMatchObject({ code: "INPUT_NOT_FOUND" });
  });
});

describe("history statistics", () => {
  it("counts roles and tool calls of both protocols", () => {
    const openai = loadSampleConversations({ protocol: "openai" }).find((c) => c.id === "spotter-tool_heavy");
    const anthropic = loadSampleConversations({ protocol: "anthropic" }).find(
      (c) => c.id === "spotter-tool_heavy.anthropic",
    );
    if (!openai || !anthropic) throw new Error("sample missing");
    const a = new HistoryStats(3);
    for (const m of openai.messages) a.add(m);
    const b = new HistoryStats(3);
    for (const m of anthropic.messages) b.add(m);
    const sa = a.summary();
    const sb = b.summary();
    expect(sa.total).toBe(openai.messages.length);
    expect(sa.last.map((x) => x.index)).toEqual([sa.total - 3, sa.total - 2, sa.total - 1]);
    // Same conversation in two protocols: same number of tool calls, same names.
    expect(sa.toolCalls).toBeGreaterThan(0);
    expect(sb.toolCalls).toBe(sa.toolCalls);
    expect(sb.toolCallsByName).toEqual(sa.toolCallsByName);
    expect(Object.values(sa.byRole).reduce((x, y) => x + y, 0)).toBe(sa.total);
  });

  it("previews text, tool calls and control characters on one line", () => {
    const m = {
      role: "assistant",
      content: "line1\nline2\t",
      tool_calls: [{ id: "1", type: "function", function: { name: "Bash", arguments: '{"c":"ls"}' } }],
    } as Message;
    expect(toolCallNames(m)).toEqual(["Bash"]);
    const p = previewMessage(m);
    expect(p).not.toContain("\n");
    expect(p).toContain("line1\\nline2");
    expect(p).toContain('→ Bash({"c":"ls"})');
    expect([...previewMessage({ role: "user", content: "x".repeat(500) } as Message, 50)].length).toBe(50);
  });
});

describe("firstDifference", () => {
  it("finds the first differing path", () => {
    expect(firstDifference({ a: [1, { b: "x" }] }, { a: [1, { b: "x" }] })).toBeUndefined();
    expect(firstDifference({ a: [1, { b: "x" }] }, { a: [1, { b: "y" }] })).toBe("state.a[1].b");
    expect(firstDifference({ a: [1] }, { a: [1, 2] })).toBe("state.a.length");
    expect(firstDifference({ a: 1 }, { a: 1, b: 2 })).toBe("state.b");
    expect(firstDifference({ a: 1, b: undefined }, { a: 1 })).toBeUndefined();
    expect(firstDifference("a\r\n", "a\n", "s")).toBe("s");
    expect(firstDifference({ x: null }, { x: {} })).toBe("state.x");
  });
});

describe("errors", () => {
  it("maps error classes to exit codes and one line", () => {
    expect(exitCodeFor(new UsageError("bad"))).toBe(ExitCode.usage);
    expect(exitCodeFor(new StateNotFoundError("k", "file"))).toBe(ExitCode.notFound);
    expect(exitCodeFor(new FormatError("x", { file: "a.duas", line: 3 }))).toBe(ExitCode.format);
    expect(exitCodeFor(new Error("boom"))).toBe(ExitCode.failure);
    expect(exitCodeFor(new DumplingsError("RUN_NOT_FOUND", "no run"))).toBe(ExitCode.notFound);
    expect(exitCodeFor(new DumplingsError("CONFLICT", "lost race"))).toBe(ExitCode.failure);
    const line = errorLine(new FormatError("bad\nthing", { file: "a.duas", line: 3 }));
    expect(line).toBe("dumplings: a.duas:line 3: bad thing (FORMAT_ERROR)");
  });
});

describe("Progress", () => {
  it("prints plain lines when not a terminal and a redrawn bar on one", () => {
    const plain: string[] = [];
    const p = new Progress("import", 2, { stream: { write: (s: string) => plain.push(s), isTTY: false } });
    p.tick("a.jsonl");
    p.tick("b.jsonl", "ok");
    p.done();
    expect(plain).toEqual(["import 1/2 a.jsonl\n", "import 2/2 b.jsonl ok\n"]);
    const tty: string[] = [];
    const q = new Progress("convert", 4, { stream: { write: (s: string) => tty.push(s), isTTY: true, columns: 80 } });
    q.tick("k1");
    q.done();
    expect(tty[0]).toMatch(/^\r\x1b\[2Kconvert \[######-+\] 1\/4 k1$/);
    expect(tty.at(-1)).toBe("\n");
  });
});

describe("streaming reads (readHeader + iterHistory)", () => {
  const conv = loadSampleConversations().find((c) => c.id === "spotter-subagent.anthropic");
  if (!conv) throw new Error("sample missing");
  const state = makeState(conv.messages, { protocol: "anthropic", name: "stream" });
  let iterated = 0;
  /** A backend that can only be read by streaming: `load` must never be called. */
  const streamingOnly: StateBackend = {
    save() {},
    load() {
      throw new Error("load must not be called when readHeader + iterHistory exist");
    },
    delete: () => false,
    listKeys: () => ["k"],
    async readHeader(key) {
      if (key !== "k") return undefined;
      const { history: _h, ...header } = state;
      return { header, revision: 1 };
    },
    async *iterHistory() {
      for (const m of state.history) {
        iterated++;
        yield m;
      }
    },
  };

  it("show/export stream the history and produce the same .duas text as a whole-state encode", async () => {
    const session = await openSession(streamingOnly, "k");
    expect(session.streamed).toBe(true);
    let text = "";
    for await (const chunk of duasChunks(session, "k")) text += chunk;
    expect(text).toBe(encodeState(state));
    expect(iterated).toBe(state.history.length);
    await expect(openSession(streamingOnly, "missing")).rejects.toBeInstanceOf(StateNotFoundError);
  });

  it("refuses a stream whose length disagrees with message_count", async () => {
    const session = await openSession(streamingOnly, "k");
    session.header = { ...session.header, meta: { ...session.header.meta, messageCount: 3 } };
    const chunks = async () => {
      for await (const _ of duasChunks(session, "k"));
    };
    await expect(chunks()).rejects.toThrow(/message_count = 3 but its history holds 24 messages/);
  });
});
