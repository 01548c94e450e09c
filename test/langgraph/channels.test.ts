/**
 * The delta encoding of channel values (src/langgraph/channels.ts), driven
 * directly: an append is a delta of the parent's version, anything else a
 * full copy; chains are cut by growth and by `maxDeltaChain`; a value rebuilt
 * from its rows equals the one written; a broken chain is a FormatError.
 */
import { JsonPlusSerializer } from "@langchain/langgraph-checkpoint";
import { describe, expect, it } from "vitest";
import { FormatError } from "../../src/core/errors.js";
import { type ChannelValue, decodeChannel, encodeChannel, MISSING } from "../../src/langgraph/channels.js";
import type { BlobRow } from "../../src/langgraph/storage.js";

const serde = new JsonPlusSerializer();
const policy = { maxDeltaChain: 1000, minFullItems: 4 };

/** Writes `values` as successive versions 1, 2, … of channel `c`; returns the rows and kinds. */
async function writeAll(values: unknown[], p = policy) {
  const rows = new Map<string, BlobRow>();
  let prev: ChannelValue | undefined;
  for (const [i, value] of values.entries()) {
    const { row, entry } = await encodeChannel(serde, "c", String(i + 1), value, prev, p);
    rows.set(`c\0${row.version}`, row);
    prev = entry;
  }
  return { rows, kinds: [...rows.values()].map((r) => r.kind) };
}

describe("channel values by version", () => {
  it("an array that extends its previous version is stored as the new items, and reads back whole", async () => {
    const values = Array.from({ length: 6 }, (_, i) => Array.from({ length: i + 1 }, (_, j) => ({ n: j })));
    const { rows, kinds } = await writeAll(values);
    expect(kinds).toEqual(["full", "delta", "delta", "delta", "delta", "full"]);
    expect(rows.get("c\x002")?.items).toBe(2);
    for (const [i, v] of values.entries()) {
      expect((await decodeChannel(serde, rows, "c", String(i + 1)))?.value).toEqual(v);
    }
  });

  it("items that differ from the previous version (equal by value, not by identity, still count as the same)", async () => {
    const { kinds, rows } = await writeAll([[{ a: 1 }], [{ a: 1 }, { b: 2 }], [{ a: 2 }, { b: 2 }, { c: 3 }], "text"]);
    expect(kinds).toEqual(["full", "delta", "full", "full"]);
    expect((await decodeChannel(serde, rows, "c", "3"))?.value).toEqual([{ a: 2 }, { b: 2 }, { c: 3 }]);
    expect((await decodeChannel(serde, rows, "c", "4"))?.value).toBe("text");
  });

  it("a chain is cut at maxDeltaChain links while its full row is shorter than that", async () => {
    const values = Array.from({ length: 8 }, (_, i) => Array.from({ length: 1 + i }, (_, j) => j));
    const { kinds } = await writeAll(values, { maxDeltaChain: 3, minFullItems: 1000 });
    expect(kinds).toEqual(["full", "delta", "delta", "delta", "full", "delta", "delta", "delta"]);
  });

  it("a chain behind a long full row may grow to that row's length (no full copy every maxDeltaChain steps)", async () => {
    const values = Array.from({ length: 8 }, (_, i) => Array.from({ length: 100 + i }, (_, j) => j));
    const { kinds } = await writeAll(values, { maxDeltaChain: 3, minFullItems: 1000 });
    expect(kinds).toEqual(["full", ...Array(7).fill("delta")]);
  });

  it("one item per step for 3,000 steps: full copies stay under twice the final length", async () => {
    // with a fixed limit of 100 links, a full copy every 100 steps would store about 15× the final length
    const lengths: number[] = [];
    let prev: ChannelValue | undefined;
    let value: number[] = [];
    for (let n = 1; n <= 3000; n++) {
      value = [...value, n];
      const { row, entry } = await encodeChannel(serde, "c", String(n), value, prev, {
        maxDeltaChain: 100,
        minFullItems: 32,
      });
      if (row.kind === "full") lengths.push(n);
      prev = entry;
    }
    expect(lengths.reduce((a, b) => a + b, 0)).toBeLessThan(2 * 3000);
    expect(lengths.length).toBeLessThan(15);
  });

  it("a channel without a value is stored as empty", async () => {
    const { kinds, rows } = await writeAll([[1], MISSING]);
    expect(kinds).toEqual(["full", "empty"]);
    expect((await decodeChannel(serde, rows, "c", "2"))?.value).toBe(MISSING);
    expect(await decodeChannel(serde, rows, "c", "9")).toBeUndefined();
  });

  it("a delta whose base row is missing is a FormatError naming the channel and version", async () => {
    const { rows } = await writeAll([[1], [1, 2], [1, 2, 3]]);
    rows.delete("c\x001");
    await expect(decodeChannel(serde, rows, "c", "3")).rejects.toThrow(FormatError);
    await expect(decodeChannel(serde, rows, "c", "3")).rejects.toThrow(/channel "c" version 3/);
  });
});
