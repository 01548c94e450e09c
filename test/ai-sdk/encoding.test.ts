/** The tagged JSON encoding of chat messages: what it restores, what it refuses, what it reads as an error. */
import { describe, expect, it } from "vitest";
import { FormatError, NonJsonValueError } from "../../src/core/errors.js";
import type { JsonValue } from "../../src/core/json.js";
import { decodeTagged, encodeTagged } from "../../src/core/tagged-json.js";

const roundTrip = (v: unknown) => decodeTagged(JSON.parse(JSON.stringify(encodeTagged(v, "m"))) as JsonValue, "test");

describe("tagged JSON", () => {
  it("restores bytes, ArrayBuffer, URL, Date, undefined, NaN/±Infinity/-0 and $dumplings keys", () => {
    const buffer = new Uint8Array([9, 8, 7]).buffer;
    const value = {
      bytes: new Uint8Array([0, 1, 255]),
      view: new Uint8Array([1, 2, 3, 4]).subarray(1, 3),
      buffer,
      url: new URL("https://example.com/a b?x=1"),
      date: new Date("2026-11-30T12:00:00.000Z"),
      gone: undefined,
      list: [undefined, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0, 0, 1.5],
      tagged: { $dumplings: "bytes", base64: "AA==" },
      nested: { $dumplings: { $dumplings: "x" } },
    };
    const back = roundTrip(value) as typeof value;
    expect(back).toStrictEqual(value);
    expect(Object.is(back.list[4], -0)).toBe(true);
    expect(back.view).toStrictEqual(new Uint8Array([2, 3]));
    expect("gone" in back).toBe(true);
  });

  it("keeps a __proto__ key as data, never as the prototype", () => {
    const value = JSON.parse('{"__proto__": {"polluted": true}, "a": 1}') as Record<string, unknown>;
    const back = roundTrip(value) as Record<string, unknown>;
    expect(Object.getPrototypeOf(back)).toBe(Object.prototype);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.hasOwn(back, "__proto__")).toBe(true);
    expect(back).toStrictEqual(value);
  });

  it("refuses what it cannot carry, naming the path", () => {
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    for (const [bad, path] of [
      [{ a: [1, 2n] }, "m.a[1]"],
      [{ f: () => 1 }, "m.f"],
      [{ m: new Map() }, "m.m"],
      [{ s: Symbol("x") }, "m.s"],
      [cycle, "m.self"],
      [{ d: new Date(Number.NaN) }, "m.d"],
    ] as const) {
      expect(() => encodeTagged(bad, "m")).toThrow(NonJsonValueError);
      expect(() => encodeTagged(bad, "m")).toThrow(path);
    }
  });

  it("reads an unknown or malformed tag as a FormatError naming the source", () => {
    expect(() => decodeTagged({ $dumplings: "bigint", value: "1" }, "chat c1 message 3")).toThrow(FormatError);
    expect(() => decodeTagged({ $dumplings: "bigint", value: "1" }, "chat c1 message 3")).toThrow(/chat c1 message 3/);
    expect(() => decodeTagged({ $dumplings: "bytes", base64: 3 }, "s")).toThrow(FormatError);
    expect(() => decodeTagged({ $dumplings: "url", href: "not a url" }, "s")).toThrow(FormatError);
    expect(() => decodeTagged({ $dumplings: "number", value: "seven" }, "s")).toThrow(FormatError);
  });
});
