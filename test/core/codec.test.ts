/**
 * The `.duas` codec: exact text (golden files), escaping, every kind of
 * malformed input, non-JSON values, and real conversations.
 */
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { decodeState, decodeStateBytes } from "../../src/core/codec/bytes.js";
import { assertStateJson, encodeState, encodeStateBytes } from "../../src/core/codec/encode.js";
import { encodeIniString } from "../../src/core/codec/escape.js";
import { FormatError, InvalidStateError, NonJsonValueError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import { DUAS_EXTENSION, DUAS_GZ_EXTENSION, packageVersion } from "../../src/core/version.js";
import { loadSampleConversations } from "../../src/testing/samples.js";
import { makeState } from "../../src/testing/states.js";
import { goldenAnthropic, goldenOpenAI } from "./golden-states.js";

const golden = (name: string) => readFileSync(new URL(`../fixtures/golden/${name}`, import.meta.url), "utf8");

function formatError(fn: () => unknown): FormatError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(FormatError);
    return e as FormatError;
  }
  throw new Error("expected a FormatError, nothing was thrown");
}

describe("golden files pin the exact text", () => {
  it.each([
    ["openai.duas", goldenOpenAI],
    ["anthropic.duas", goldenAnthropic],
  ])("%s", (file, state) => {
    const text = golden(file);
    expect(encodeState(state)).toBe(text);
    expect(decodeState(text, { source: file })).toStrictEqual(state);
  });

  it("extensions", () => {
    expect(DUAS_EXTENSION).toBe(".duas");
    expect(DUAS_GZ_EXTENSION).toBe(".duas.gz");
  });

  it("writes the package version as schema_version from package.json", () => {
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };
    expect(packageVersion()).toBe(pkg.version);
    const text = encodeState(makeState([]));
    expect(text).toContain(`\nschema_version = ${pkg.version}\n`);
  });
});

describe("escaping rule", () => {
  const cases: [string, string][] = [
    ["gpt-4o", "gpt-4o"],
    ["", '""'],
    ["a = b", '"a = b"'],
    ["# x", '"# x"'],
    ["a;b", '"a;b"'],
    ["[x]", '"[x]"'],
    [" lead", '" lead"'],
    ["trail ", '"trail "'],
    ["tab\there", '"tab\\there"'],
    ["crlf\r\n", '"crlf\\r\\n"'],
    ["nul\u0000", '"nul\\u0000"'],
    ['"quoted"', '"\\"quoted\\""'],
    ['say "hi"', 'say "hi"'],
    ["half \ud83d", '"half \\ud83d"'],
    ["nel\u0085 ls\u2028", '"nel\\u0085 ls\\u2028"'],
    ["emoji 🎉 שלום", "emoji 🎉 שלום"],
    ["back\\slash", "back\\slash"],
  ];
  it.each(cases)("%j → %s and back", (value, written) => {
    expect(encodeIniString(value)).toBe(written);
    const state = makeState([], { config: { prompt: value, modelName: value }, name: value });
    expect(decodeState(encodeState(state))).toStrictEqual(state);
  });

  it("tolerates CRLF line ends and a BOM (the writer never produces a raw CR)", () => {
    const text = golden("openai.duas");
    expect(decodeState(text.replaceAll("\n", "\r\n"))).toStrictEqual(goldenOpenAI);
    expect(decodeStateBytes(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)]))).toStrictEqual(
      goldenOpenAI,
    );
  });

  it("accepts optional whitespace around = and comments in the header", () => {
    const text = golden("anthropic.duas")
      .replace("model_name = claude-sonnet-4", "; a comment\nmodel_name=claude-sonnet-4")
      .replace("stream = false", "  stream   =   false  ");
    expect(decodeState(text)).toStrictEqual(goldenAnthropic);
  });

  it("subclass fields with any name, including __proto__, stay own data", () => {
    const fields = JSON.parse('{"__proto__":{"polluted":true},"a b=c":1,"x":"y"}') as Record<string, never>;
    const state = makeState([], { fields });
    const back = decodeState(encodeState(state));
    expect(Object.keys(back.state.fields)).toEqual(["__proto__", "a b=c", "x"]);
    expect(({} as { polluted?: boolean }).polluted).toBeUndefined();
    expect(Object.getPrototypeOf(back.state.fields)).toBe(Object.prototype);
  });
});

describe("malformed input is a FormatError with file and line", () => {
  const base = golden("anthropic.duas");
  const lines = base.split("\n");
  const lineOf = (prefix: string) => lines.findIndex((l) => l.startsWith(prefix)) + 1;
  const edit = (prefix: string, replacement: string) =>
    lines.map((l) => (l.startsWith(prefix) ? replacement : l)).join("\n");

  it("unknown format_version names the version", () => {
    const e = formatError(() =>
      decodeState(base.replace("duagent-state/1.0", "duagent-state/9.9"), { source: "a.duas" }),
    );
    expect(e.version).toBe("9.9");
    expect(e.file).toBe("a.duas");
    expect(e.line).toBe(2);
    expect(e.message).toContain("9.9");
    const e2 = formatError(() => decodeState(base.replace("format_version = 1.0", "format_version = 2.0")));
    expect(e2.version).toBe("2.0");
    expect(e2.line).toBe(lineOf("format_version"));
  });

  it.each([
    ["not a .duas file", "hello\n", 1],
    ["empty", "", 1],
    ["duplicate key", edit("model_name", "model_name = a\nmodel_name = b"), lineOf("model_name") + 1],
    ["unknown key", edit("stream", "streaming = false"), lineOf("stream")],
    ["bad number", edit("max_tokens", "max_tokens = 12abc"), lineOf("max_tokens")],
    ["bad integer count", edit("message_count", "message_count = -1"), lineOf("message_count")],
    ["bad boolean", edit("stream", "stream = yes"), lineOf("stream")],
    ["bad JSON in [STATE]", edit("hooks", "hooks = [oops"), lineOf("hooks")],
    ["bad quoted string", edit("prompt", 'prompt = "abc'), lineOf("prompt")],
    ["quoted value followed by junk", edit("prompt", 'prompt = "a" b'), lineOf("prompt")],
    ["line without =", edit("stream", "stream false"), lineOf("stream")],
    ["unknown section", edit("[STATE]", "[STUFF]"), lineOf("[STATE]")],
    ["section out of order", edit("[CONFIG]", "[STATE]"), lineOf("[CONFIG]")],
    ["schema violation (protocol)", edit("protocol", "protocol = gemini"), lineOf("protocol")],
    ["schema violation (max_tokens)", edit("max_tokens", "max_tokens = 0"), lineOf("max_tokens")],
    ["bad history JSON", `${base}{"role":\n`, lines.length],
    [
      "history message of the wrong shape",
      base.replace('{"role":"user","content":"list', '{"role":"bot","content":"list'),
      lineOf('{"role":"user","content":"list'),
    ],
    ["count too high", edit("message_count", "message_count = 4"), lines.length - 1],
    ["count too low (extra line)", `${base}{"role":"user","content":"x"}\n`, lines.length],
    ["no final newline", base.slice(0, -1), lines.length - 1],
  ])("%s", (_what, text, line) => {
    const e = formatError(() => decodeState(text, { source: "s.duas" }));
    expect(e.line).toBe(line);
    expect(e.file).toBe("s.duas");
    expect(e.message).toMatch(/^s\.duas:line \d+: /);
  });

  it("missing key names it", () => {
    const e = formatError(() => decodeState(edit("api_key_env", "")));
    expect(e.message).toContain("api_key_env");
  });

  it("invalid UTF-8 names its line; corrupt gzip is a FormatError", () => {
    const bytes = Buffer.from(base);
    const at = bytes.indexOf(Buffer.from("claude helper"));
    bytes[at] = 0xff;
    expect(formatError(() => decodeStateBytes(bytes)).line).toBe(lineOf("agent_name"));
    const gz = gzipSync(Buffer.from(base));
    expect(decodeStateBytes(gz)).toStrictEqual(goldenAnthropic);
    gz[gz.length - 6] = (gz[gz.length - 6] ?? 0) ^ 0xff; // CRC
    formatError(() => decodeStateBytes(gz));
    formatError(() => decodeStateBytes(gz.subarray(0, 20)));
  });

  it("absurd nesting is a FormatError, never a RangeError", () => {
    const deep = `${"[".repeat(20000)}${"]".repeat(20000)}`;
    const text = base.replace("hooks = []", `hooks = []\nfield.deep = ${deep}`);
    formatError(() => decodeState(text));
  });
});

describe("values JSON cannot carry are refused before anything is produced", () => {
  const bad: [string, unknown, string][] = [
    ["BigInt", 2n ** 256n - 1n, "a BigInt"],
    ["NaN", Number.NaN, "NaN"],
    ["Infinity", Number.POSITIVE_INFINITY, "Infinity"],
    ["-0", -0, "-0"],
    ["function", () => 1, "a function"],
    ["Date", new Date(0), "Date"],
    ["Map", new Map(), "Map"],
  ];
  it.each(bad)("%s in a history message", (_name, value, what) => {
    const history = [
      { role: "user", content: "ok" },
      { role: "user", content: [{ type: "text", text: value }] },
    ] as unknown as Message[];
    let err: unknown;
    try {
      encodeState(makeState(history));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(NonJsonValueError);
    expect((err as NonJsonValueError).messageIndex).toBe(1);
    expect((err as NonJsonValueError).path).toBe("history[1].content[0].text");
    expect((err as Error).message).toContain(what);
  });

  it("undefined in an array and a sparse array are refused; an undefined property is omitted like JSON", () => {
    const withUndefined = [{ role: "user", content: [undefined] }] as unknown as Message[];
    expect(() => encodeState(makeState(withUndefined))).toThrow(NonJsonValueError);
    // biome-ignore lint/suspicious/noSparseArray: the point of the test
    const sparse = [{ role: "user", content: [, { type: "text", text: "x" }] }] as unknown as Message[];
    expect(() => encodeState(makeState(sparse))).toThrow(/history\[0\]\.content\[0\]/);
    const omitted = [{ role: "user", content: "x", extra: undefined }] as unknown as Message[];
    expect(decodeState(encodeState(makeState(omitted))).history).toEqual([{ role: "user", content: "x" }]);
  });

  it("non-JSON subclass fields are refused with their path", () => {
    const state = makeState([], { fields: { big: 1n } as never });
    expect(() => encodeState(state)).toThrow(/state\.fields\.big/);
    expect(() => assertStateJson(state)).toThrow(NonJsonValueError);
  });

  it("a message that does not match the protocol is refused with its path", () => {
    const state = makeState([{ role: "nobody", content: "x" } as never]);
    expect(() => encodeState(state)).toThrow(InvalidStateError);
  });
});

describe("cases", () => {
  it("pb-06: lone surrogates round-trip exactly as \\u escapes; the file is valid UTF-8; pairs stay whole", () => {
    const history = [
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_B2", content: "ok \ud83d\udd11 done" }] },
      { role: "user", content: "bad \ud83d end" },
    ] as Message[];
    const state = makeState(history, { protocol: "anthropic", config: { prompt: "tail \udd11" } });
    const bytes = encodeStateBytes(state);
    const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes); // valid UTF-8
    expect(text).toContain("bad \\ud83d end");
    expect(text).toContain('prompt = "tail \\udd11"');
    expect(text).toContain("ok 🔑 done"); // a well-formed pair is raw UTF-8
    // every line is JSON a strict parser accepts (escapes only, no raw surrogate bytes)
    const back = decodeStateBytes(bytes);
    expect(back).toStrictEqual(state);
    const block = (back.history[0]?.content as unknown as { content: string }[] | undefined)?.[0];
    expect(block?.content.isWellFormed()).toBe(true);
  });

  it("pb-08: BigInt of any size, NaN, Infinity, -0 are refused with the path; safe integers stay numbers", () => {
    const output = {
      dedupKey: 2n ** 256n - 1n,
      justOver: 2n ** 64n,
      negative: -(2n ** 63n) - 1n,
      safeMax: 9007199254740991,
    };
    const message = { role: "tool", tool_call_id: "c1", content: "x", output } as unknown as Message;
    const e = (() => {
      try {
        encodeState(makeState([{ role: "user", content: "go" }, message]));
      } catch (err) {
        return err as NonJsonValueError;
      }
    })();
    expect(e).toBeInstanceOf(NonJsonValueError);
    expect(e?.path).toBe("history[1].output.dedupKey");
    expect(e?.messageIndex).toBe(1);
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, -0]) {
      expect(() => encodeState(makeState([message], { fields: { x: bad } }))).toThrow(NonJsonValueError);
    }
    const ok = makeState([{ role: "tool", tool_call_id: "c1", content: "x", safeMax: 9007199254740991 } as Message]);
    const back = decodeState(encodeState(ok));
    expect(typeof (back.history[0] as unknown as { safeMax: unknown }).safeMax).toBe("number");
    expect(back).toStrictEqual(ok);
  });

  it("pb-09: a cycle is refused naming the cyclic path; no placeholder is ever written", () => {
    const turn: Record<string, unknown> = { id: "turn-1" };
    turn.currentStep = { n: 1, turn };
    const state = makeState([{ role: "user", content: "hi" }], { fields: { turn } as never });
    expect(() => encodeState(state)).toThrow(/state\.fields\.turn\.currentStep\.turn.*cycle/);
    const inHistory = makeState([{ role: "user", content: "hi", turn } as Message]);
    try {
      encodeState(inHistory);
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(NonJsonValueError);
      expect((e as NonJsonValueError).path).toBe("history[0].turn.currentStep.turn");
      expect((e as NonJsonValueError).messageIndex).toBe(0);
    }
  });
});

describe("real conversations", () => {
  const conversations = loadSampleConversations({ source: "all" });
  it("there are conversations of both protocols", () => {
    expect(conversations.some((c) => c.protocol === "openai")).toBe(true);
    expect(conversations.some((c) => c.protocol === "anthropic")).toBe(true);
  });
  it("every conversation round-trips exactly, plain and gzip", () => {
    for (const c of conversations) {
      const state = makeState(c.messages, { protocol: c.protocol, name: c.id });
      const text = encodeState(state);
      expect(decodeState(text, { source: c.id }), c.id).toStrictEqual(state);
      // each history line is the compact JSON of its message
      const historyLines = text.slice(text.indexOf("[HISTORY]\n") + 10).split("\n");
      expect(historyLines.length - 1).toBe(c.messages.length);
      expect(decodeStateBytes(encodeStateBytes(state, { gzip: true }))).toStrictEqual(state);
    }
  });
});
