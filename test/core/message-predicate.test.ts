/**
 * `isWellFormedMessage` is the message schemas' verdict without zod (the read
 * path checks every stored message with it): it must never accept what the
 * schema refuses, and it should accept what the schema accepts. Checked on
 * every bundled real message and on random JSON values shaped like messages.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { isWellFormedMessage, messageSchemaFor, type Protocol } from "../../src/core/messages.js";
import { checkStoredMessage, isStoredMessage } from "../../src/core/state.js";
import { loadSampleConversations } from "../../src/testing/samples.js";

const protocols: Protocol[] = ["openai", "anthropic"];
const schemaSays = (p: Protocol, v: unknown) => messageSchemaFor(p).safeParse(v).success;

/** Values near the schemas' edges: each field any of a few JSON kinds. */
const anyJson = fc.oneof(
  fc.string(),
  fc.constant(null),
  fc.integer(),
  fc.boolean(),
  fc.constant(undefined),
  fc.array(fc.oneof(fc.record({ type: fc.oneof(fc.string(), fc.integer()) }), fc.string(), fc.constant(null)), {
    maxLength: 3,
  }),
);
const toolCall = fc.record(
  {
    id: fc.oneof(fc.string(), fc.integer()),
    type: fc.oneof(fc.string(), fc.integer(), fc.constant(undefined)),
    function: fc.oneof(
      fc.record({ name: fc.oneof(fc.string(), fc.integer()), arguments: fc.oneof(fc.string(), fc.constant(null)) }),
      fc.string(),
      fc.constant(null),
    ),
  },
  { requiredKeys: [] },
);
const messageLike = fc.record(
  {
    role: fc.constantFrom("system", "developer", "user", "assistant", "tool", "function", "robot", 3),
    content: anyJson,
    tool_calls: fc.oneof(fc.array(toolCall, { maxLength: 2 }), fc.string(), fc.constant(null)),
    tool_call_id: anyJson,
    name: anyJson,
    extra: anyJson,
  },
  { requiredKeys: [] },
);

describe("isWellFormedMessage", () => {
  it.each(protocols)("agrees with the %s schema on random message-like values", (protocol) => {
    fc.assert(
      fc.property(fc.oneof(messageLike, anyJson, fc.array(messageLike, { maxLength: 1 })), (value) => {
        expect(isWellFormedMessage(protocol, value)).toBe(schemaSays(protocol, value));
      }),
      { numRuns: 3000, seed: 12 },
    );
  });

  it("accepts every bundled real message, as the schema does", () => {
    for (const protocol of protocols) {
      const messages = loadSampleConversations({ protocol }).flatMap((c) => c.messages);
      expect(messages.length).toBeGreaterThan(100);
      for (const m of messages) expect(isWellFormedMessage(protocol, m)).toBe(schemaSays(protocol, m));
    }
  });
});

describe("isStoredMessage (the read path's allocation-free check)", () => {
  const source = { label: 'key "k"', file: "test" };
  const verdict = (v: unknown, p: Protocol) => {
    try {
      return checkStoredMessage(v, p, 0, source) === v;
    } catch {
      return false;
    }
  };

  it("is true only for what checkStoredMessage returns as it is: a message, not -0, 1e400, an array or a foreign role", () => {
    const cases: [unknown, boolean][] = [
      [JSON.parse('{"role":"user","content":"hi"}'), true],
      [JSON.parse('{"role":"user","content":"hi","n":-0}'), false], // rewritten to 0 by the full check
      [JSON.parse('{"role":"user","content":"hi","n":1e400}'), false], // Infinity: refused
      [JSON.parse('[{"role":"user","content":"hi"}]'), false],
      [JSON.parse('{"role":"robot","content":"hi"}'), false],
      [null, false],
    ];
    for (const [value, expected] of cases) {
      expect(isStoredMessage(value, "openai"), JSON.stringify(value)).toBe(expected);
      if (expected) expect(verdict(value, "openai")).toBe(true);
    }
    // an unknown protocol: the header's check names it; the message is left to checkStoredMessage
    expect(isStoredMessage({ role: "user", content: "hi" }, "klingon" as Protocol)).toBe(false);
  });

  it("never accepts what checkStoredMessage refuses (random message-like values)", () => {
    fc.assert(
      fc.property(messageLike, fc.constantFrom(...protocols), (m, p) => {
        const value = JSON.parse(JSON.stringify(m)) as unknown;
        if (isStoredMessage(value, p)) expect(verdict(value, p)).toBe(true);
      }),
      { numRuns: 500 },
    );
  });
});
