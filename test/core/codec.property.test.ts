/**
 * Property tests of the `.duas` codec (fast-check): exact round trips of any
 * JSON history and any config strings; truncation at any byte and byte flips
 * give a FormatError or a valid state, never another exception.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodeState, decodeStateBytes } from "../../src/core/codec/bytes.js";
import { encodeState, encodeStateBytes } from "../../src/core/codec/encode.js";
import { FormatError } from "../../src/core/errors.js";
import type { JsonValue } from "../../src/core/json.js";
import type { Message } from "../../src/core/messages.js";
import { makeState } from "../../src/testing/states.js";

/** Strings of any code units (lone surrogates included) mixed with the format's special characters. */
const anyString = fc.oneof(
  fc.string({ unit: "binary", maxLength: 30 }),
  fc.string({
    unit: fc.constantFrom(
      "=",
      "#",
      ";",
      "[",
      "]",
      '"',
      "\\",
      " ",
      "\t",
      "\r",
      "\n",
      "\u0000",
      "\ud83d",
      "\udd11",
      "é",
      "🎉",
      "\u2028",
      "\u0085",
      "x",
    ),
    maxLength: 20,
  }),
);

/** JSON values normalised through JSON (no -0). */
const json = fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.parse(JSON.stringify(v)) as JsonValue);

const openaiMessage: fc.Arbitrary<Message> = fc.oneof(
  fc.record({ role: fc.constantFrom("system", "user", "developer"), content: anyString }),
  fc.record({
    role: fc.constant("assistant"),
    content: fc.option(anyString, { nil: null }),
    tool_calls: fc.array(
      fc.record({
        id: anyString,
        type: fc.constant("function"),
        function: fc.record({ name: anyString, arguments: anyString }),
      }),
      { maxLength: 2 },
    ),
  }),
  fc.record({ role: fc.constant("tool"), tool_call_id: anyString, content: anyString, extra: json }),
  fc.record({
    role: fc.constant("user"),
    content: fc.array(fc.record({ type: fc.constant("text"), text: anyString, meta: json }), { maxLength: 3 }),
  }),
) as fc.Arbitrary<Message>;

const config = fc.record({
  prompt: anyString,
  apiProvider: anyString,
  apiKeyEnv: anyString,
  modelName: anyString,
  maxTokens: fc.integer({ min: 1, max: 2 ** 31 }),
  stream: fc.boolean(),
  fcModel: fc.boolean(),
  toolTimeout: fc.double({ min: 0.001, max: 1e6, noNaN: true }),
  toolMaxWorkers: fc.integer({ min: 1, max: 64 }),
});

const state = fc
  .record({
    history: fc.array(openaiMessage, { maxLength: 6 }),
    config,
    name: anyString,
    uuid: anyString,
    currentTaskId: fc.option(anyString, { nil: null }),
    hooks: fc.array(anyString, { maxLength: 3 }),
    fields: fc.dictionary(anyString, json, { maxKeys: 3 }),
    savedAt: anyString,
  })
  // fast-check may build null-prototype records; JSON normalises them to plain objects (strings are unchanged)
  .map((r) => JSON.parse(JSON.stringify(r)) as typeof r)
  .map((r) =>
    makeState(r.history, {
      config: r.config,
      name: r.name,
      uuid: r.uuid,
      currentTaskId: r.currentTaskId,
      hooks: r.hooks,
      fields: r.fields,
      savedAt: r.savedAt,
    }),
  );

function formatErrorOrState(fn: () => unknown): "error" | "state" {
  try {
    fn();
    return "state";
  } catch (e) {
    if (!(e instanceof FormatError)) throw e;
    return "error";
  }
}

describe("codec properties", () => {
  it("any JSON history and any config strings round-trip exactly", () => {
    fc.assert(
      fc.property(state, (s) => {
        expect(decodeState(encodeState(s))).toStrictEqual(s);
      }),
      { numRuns: 300 },
    );
  });

  it("a valid file truncated at any byte gives a FormatError", () => {
    fc.assert(
      fc.property(state, fc.double({ min: 0, max: 1, noNaN: true, maxExcluded: true }), fc.boolean(), (s, at, gz) => {
        const bytes = encodeStateBytes(s, { gzip: gz });
        const cut = Math.floor(at * bytes.length);
        expect(formatErrorOrState(() => decodeStateBytes(bytes.subarray(0, cut)))).toBe("error");
      }),
      { numRuns: 300 },
    );
  });

  it("truncation at every byte of one file (exhaustive)", () => {
    const s = makeState([
      { role: "user", content: "a\nb 🎉 \ud83d" },
      { role: "assistant", content: "ok" },
    ]);
    const bytes = encodeStateBytes(s);
    for (let cut = 0; cut < bytes.length; cut++) {
      expect(
        formatErrorOrState(() => decodeStateBytes(bytes.subarray(0, cut))),
        `cut at ${cut}`,
      ).toBe("error");
    }
  });

  it("bytes flipped anywhere: the file loads as what it became, or FormatError; never another exception", () => {
    fc.assert(
      fc.property(
        state,
        fc.array(
          fc.tuple(fc.double({ min: 0, max: 1, noNaN: true, maxExcluded: true }), fc.integer({ min: 1, max: 255 })),
          {
            minLength: 1,
            maxLength: 3,
          },
        ),
        fc.boolean(),
        (s, flips, gz) => {
          const bytes = Buffer.from(encodeStateBytes(s, { gzip: gz }));
          for (const [at, x] of flips) {
            const i = Math.floor(at * bytes.length);
            bytes[i] = (bytes[i] ?? 0) ^ x;
          }
          try {
            const loaded = decodeStateBytes(bytes);
            // it is a valid state: it encodes again and decodes to itself
            expect(decodeState(encodeState(loaded))).toStrictEqual(loaded);
          } catch (e) {
            if (!(e instanceof FormatError)) throw e;
          }
        },
      ),
      { numRuns: 500 },
    );
  });
});
