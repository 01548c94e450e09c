/**
 * `oneLine` (the previews of `dumplings show`) escapes only a bounded prefix of
 * its text: a 50 MB prompt used to be split into 50 million one-character
 * strings (1.5 GB for `show`). The result is the same as escaping the whole text.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { oneLine } from "../../src/ops/format.js";

/** The previous implementation, escaping the whole text: the reference. */
function reference(text: string, max = 100): string {
  const escaped = JSON.stringify(text).slice(1, -1).replace(/\\"/g, '"');
  const chars = [...escaped];
  return chars.length <= max ? escaped : `${chars.slice(0, Math.max(0, max - 1)).join("")}…`;
}

describe("oneLine", () => {
  it("gives the same preview as escaping the whole text (property)", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 400 }), fc.integer({ min: 1, max: 120 }), (text, max) => {
        expect(oneLine(text, max)).toBe(reference(text, max));
      }),
      { numRuns: 2000 },
    );
    for (const text of ["\n".repeat(300), "😀".repeat(300), `${"a".repeat(99)}😀b`, "a\u0000b".repeat(100)]) {
      expect(oneLine(text)).toBe(reference(text));
    }
  });

  it("previews a 50 MB text from its first characters", () => {
    const big = `line one\n${"x".repeat(50 * 1024 * 1024)}`;
    expect(oneLine(big, 20)).toBe("line one\\nxxxxxxxxx…");
  });
});
