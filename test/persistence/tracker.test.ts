/**
 * The tracker's proof of the stored prefix (`computeBaseLength`): every stored position must still
 * hold the same message object, or a copy with its exact JSON text (then adopted). The comparison runs eight positions per step, so a replacement is
 * checked at every position of the unrolled steps and of the remainder, for lengths around them.
 */
import { describe, expect, it } from "vitest";
import type { Message } from "../../src/core/messages.js";
import { MemoryBackend } from "../../src/index.js";
import { computeBaseLength, getTrack, recordSaved } from "../../src/persistence/tracker.js";

function messages(n: number): Message[] {
  return Array.from({ length: n }, (_, i) => ({ role: "user", content: `m${i}` }) as Message);
}

describe("computeBaseLength", () => {
  it("proves an intact prefix and detects a changed message at every position (lengths 0 to 33)", () => {
    for (let n = 0; n <= 33; n++) {
      const agent = {};
      const backend = new MemoryBackend();
      const stored = messages(n);
      recordSaved(agent, backend, "k", stored, undefined, 1);
      const track = getTrack(agent, backend, "k")!;
      const history = [...stored, ...messages(2)];
      expect(computeBaseLength(track, history)).toBe(n);
      for (let at = 0; at < n; at++) {
        const edited = history.slice();
        edited[at] = { ...(edited[at] as Message), content: `changed ${at}` } as Message;
        expect(computeBaseLength(track, edited), `n = ${n}, changed at ${at}`).toBeUndefined();
        // a copy with the same JSON text (a parsed copy) is the same message, and is adopted
        const copied = history.slice();
        copied[at] = JSON.parse(JSON.stringify(copied[at]));
        expect(computeBaseLength(track, copied), `n = ${n}, copied at ${at}`).toBe(n);
        expect(track.stored[at]).toBe(copied[at]);
        // the same keys in another order serialise to another text: not proven, rewritten
        const reordered = history.slice();
        reordered[at] = Object.fromEntries(Object.entries(reordered[at] as Message).reverse()) as Message;
        if (Object.keys(reordered[at] as Message).length > 1) {
          expect(computeBaseLength(track, reordered), `n = ${n}, reordered at ${at}`).toBeUndefined();
        }
        history[at] = copied[at] as Message;
      }
      if (n > 0) expect(computeBaseLength(track, history.slice(0, n - 1))).toBeUndefined();
    }
  });
});
