/**
 * The JSON value rules every layer shares (src/core/json.ts): everything JSON
 * can carry passes; everything else is refused with the path to the value.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { NonJsonValueError } from "../../src/core/errors.js";
import { assertJson, toJson } from "../../src/core/json.js";

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
