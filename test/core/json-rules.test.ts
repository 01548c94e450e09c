/**
 * The JSON value rules every layer shares (src/core/json.ts): everything JSON
 * can carry passes; everything else is refused with the path to the value.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { FormatError, NonJsonValueError } from "../../src/core/errors.js";
import {
  assertJson,
  checkStoredJson,
  MAX_JSON_DEPTH,
  parseStoredJson,
  sameFlatObject,
  toJson,
} from "../../src/core/json.js";

/** `levels` arrays nested in each other around 1. */
function nested(levels: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < levels; i++) v = [v];
  return v;
}

function refusal(value: unknown): NonJsonValueError {
  try {
    assertJson(value, "input", 7);
  } catch (e) {
    expect(e).toBeInstanceOf(NonJsonValueError);
    return e as NonJsonValueError;
  }
  throw new Error("expected a NonJsonValueError");
}

describe("assertJson", () => {
  it("accepts every JSON value (property)", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (v) => {
        const normal = JSON.parse(JSON.stringify(v)); // -0 becomes 0, as stored
        assertJson(normal);
        expect(JSON.parse(toJson(normal))).toEqual(normal);
      }),
    );
  });

  it.each([
    ["BigInt (pb-08)", { a: [1, 2n] }, "input.a[1]", "BigInt"],
    ["undefined in an array", { a: { "x y": [undefined] } }, 'input.a["x y"][0]', "undefined"],
    // biome-ignore lint/suspicious/noSparseArray: a hole is the case under test
    ["a sparse array hole", [1, , 3], "input[1]", "hole"],
    ["a Date", { d: new Date(0) }, "input.d", "Date"],
    ["a Map", { m: new Map() }, "input.m", "Map"],
    ["NaN", { n: Number.NaN }, "input.n", "NaN"],
    ["Infinity", [Number.POSITIVE_INFINITY], "input[0]", "Infinity"],
    ["-0", { z: -0 }, "input.z", "-0"],
    ["a function", { f() {} }, "input.f", "function"],
    ["a symbol", { s: Symbol("s") }, "input.s", "symbol"],
  ])("refuses %s with the path of the value", (_label, value, path, what) => {
    const e = refusal(value);
    expect(e.path).toBe(path);
    expect(e.message).toContain(what);
    expect(e.messageIndex).toBe(7);
    expect(e.code).toBe("NON_JSON_VALUE");
  });

  it("refuses a cycle (pb-09) and names where it closes", () => {
    const parent: Record<string, unknown> = { name: "p" };
    parent.child = { parent };
    const e = refusal({ helper: parent });
    expect(e.path).toBe("input.helper.child.parent");
    expect(e.message).toContain("cycle");
  });

  it("accepts a shared (non-cyclic) object reached twice", () => {
    const shared = { x: 1 };
    expect(() => assertJson({ a: shared, b: [shared] })).not.toThrow();
  });

  it("omits undefined object properties exactly as JSON.stringify does", () => {
    expect(toJson({ a: 1, b: undefined })).toBe('{"a":1}');
  });

  it("keeps lone surrogates representable (JSON escapes them)", () => {
    const s = "bad \ud83d end";
    expect(JSON.parse(toJson({ s })).s).toBe(s);
  });
});

describe("the depth limit (write side)", () => {
  it(`accepts ${MAX_JSON_DEPTH} levels and refuses one more, with a typed error (no RangeError)`, () => {
    expect(() => assertJson(nested(MAX_JSON_DEPTH))).not.toThrow();
    const e = refusal(nested(MAX_JSON_DEPTH + 1));
    expect(e.message).toContain(`deeper than ${MAX_JSON_DEPTH}`);
  });

  it("refuses 5,000 and 1,000,000 levels (which overflow JSON.stringify) with NonJsonValueError", () => {
    for (const n of [5000, 1_000_000]) {
      const e = refusal({ x: nested(n) });
      expect(e.path.length).toBeLessThan(200); // the message stays readable
    }
  });
});

describe("checkStoredJson / parseStoredJson (read side)", () => {
  const src = { label: 'history[3] of "k"', file: "store", line: 12 };

  it("reads -0 as 0 in place, anywhere, so that assertJson accepts the value again", () => {
    const v = JSON.parse('{"a":-0,"b":[-0.0,{"c":-0e5}],"d":0}') as { a: number; b: [number, { c: number }] };
    checkStoredJson(v, src);
    expect(Object.is(v.a, 0)).toBe(true);
    expect(Object.is(v.b[0], 0)).toBe(true);
    expect(Object.is(v.b[1].c, 0)).toBe(true);
    expect(() => assertJson(v)).not.toThrow();
    expect(Object.is(checkStoredJson(-0, src), 0)).toBe(true);
  });

  it.each([
    ["1e400", '{"a":[1,1e400]}', "a[1]", "Infinity"],
    ["-1e400", '{"a":-1e400}', "a", "-Infinity"],
    ["nesting past the limit", `{"a":${"[".repeat(5000)}${"]".repeat(5000)}}`, "a[0]", "deeper than 512"],
  ])("refuses %s with a FormatError naming the source, line and path", (_l, text, path, what) => {
    let error: unknown;
    try {
      parseStoredJson(text, src);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(FormatError);
    const e = error as FormatError;
    expect(e.file).toBe("store");
    expect(e.line).toBe(12);
    expect(e.message).toContain('history[3] of "k" at ');
    expect(e.message).toContain(path);
    expect(e.message).toContain(what);
  });

  it("counts depth from the stored unit: baseDepth shifts the limit", () => {
    expect(() => checkStoredJson(nested(MAX_JSON_DEPTH), src)).not.toThrow();
    expect(() => checkStoredJson(nested(MAX_JSON_DEPTH), src, 2)).toThrow(FormatError);
    expect(() => checkStoredJson(nested(MAX_JSON_DEPTH - 2), src, 2)).not.toThrow();
  });

  it("refuses text that is not JSON, and non-text, as FormatError", () => {
    expect(() => parseStoredJson("{torn", src)).toThrow(FormatError);
    expect(() => parseStoredJson(42, src)).toThrow(FormatError);
  });

  it("what the read rule accepts, the write rule accepts (property)", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (v) => {
        const read = checkStoredJson(JSON.parse(JSON.stringify(v)), src);
        expect(() => assertJson(read)).not.toThrow();
      }),
    );
  });
});

describe("sameFlatObject", () => {
  it("is true only for the same keys in the same order holding the same primitives", () => {
    const big = "p".repeat(1000);
    expect(sameFlatObject({ a: 1, b: big, c: null }, { a: 1, b: `${big}`, c: null })).toBe(true);
    expect(sameFlatObject({ a: 1, b: 2 }, { b: 2, a: 1 })).toBe(false); // other JSON text
    expect(sameFlatObject({ a: 1 }, { a: 1, b: undefined })).toBe(false);
    expect(sameFlatObject({ a: 0 }, { a: -0 })).toBe(false);
    expect(sameFlatObject({ a: [] }, { a: [] })).toBe(false);
    expect(sameFlatObject(null, null)).toBe(false);
  });
});
