/**
 * A plain (unquoted) `[META]`/`[CONFIG]` value never holds a control
 * character: the writer quotes such values, so one found on read (a NUL or a
 * tab typed into a hand-edited file) is a FormatError naming the line.
 */
import { expect, it } from "vitest";
import { decodeState } from "../../src/core/codec/bytes.js";
import { encodeState } from "../../src/core/codec/encode.js";
import { FormatError } from "../../src/core/errors.js";
import { makeState } from "../../src/testing/states.js";

it.each([
  ["NUL", "or\u0000ig"],
  ["tab", "or\tig"],
  ["DEL", "or\u007fig"],
])("a plain value with a %s is a FormatError with the line number", (_label, bad) => {
  const text = encodeState(makeState([{ role: "user", content: "hi" }], { name: "orig" }));
  const lines = text.split("\n");
  const at = lines.findIndex((l) => l.startsWith("agent_name = "));
  lines[at] = `agent_name = ${bad}`;
  let error: unknown;
  try {
    decodeState(lines.join("\n"), { source: "edited.duas" });
  } catch (e) {
    error = e;
  }
  expect(error).toBeInstanceOf(FormatError);
  expect((error as FormatError).line).toBe(at + 1);
  expect((error as FormatError).message).toContain("control characters");
});

it("the same value written by the codec (quoted) round-trips exactly", () => {
  const state = makeState([], { name: "or\u0000ig\tx" });
  expect(decodeState(encodeState(state)).meta.agentName).toBe("or\u0000ig\tx");
});
