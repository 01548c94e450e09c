import { describe, expect, it } from "vitest";
import { metaJson, runtimeStateJson } from "../../src/backends/stored.js";
import { NonJsonValueError } from "../../src/core/errors.js";
import { makeState } from "../../src/testing/states.js";

describe("metaJson / runtimeStateJson", () => {
  it("equal JSON.stringify, refuse what assertJson refuses", () => {
    const s = makeState([]);
    for (let i = 0; i < 5; i++) {
      const meta = { ...s.meta, savedAt: `t${i}`, messageCount: i * 1.5 };
      expect(metaJson(meta)).toBe(JSON.stringify(meta));
    }
    expect(metaJson({ ...s.meta, agentName: "other\u2028\ud800" })).toBe(
      JSON.stringify({ ...s.meta, agentName: "other\u2028\ud800" }),
    );
    expect(metaJson({ ...s.meta, savedAt: "x" })).toBe(JSON.stringify({ ...s.meta, savedAt: "x" }));
    expect(() => metaJson({ ...s.meta, messageCount: -0 })).toThrow(NonJsonValueError);
    expect(() => metaJson({ ...s.meta, messageCount: Number.NaN })).toThrow(NonJsonValueError);
    expect(() => metaJson({ ...s.meta, savedAt: 1n as never })).toThrow(NonJsonValueError);
    expect(() => metaJson({ ...s.meta, [Symbol("x")]: 1 })).toThrow(NonJsonValueError);
    expect(metaJson({ ...s.meta, extra: undefined })).toBe(JSON.stringify({ ...s.meta }));
    // sessions saved in turn: each one's meta is exact
    const other = makeState([]);
    for (let i = 0; i < 4; i++) {
      for (const m of [s.meta, other.meta]) {
        const meta = { ...m, savedAt: `u${i}`, messageCount: i };
        expect(metaJson(meta)).toBe(JSON.stringify(meta));
      }
    }
    const reordered = Object.assign({ savedAt: "a" }, s.meta);
    expect(metaJson(reordered)).toBe(JSON.stringify(reordered));
    for (const st of [
      { currentTaskId: null, hooks: [], fields: {} },
      { currentTaskId: 't"1', hooks: ["m:a", "m:b"], fields: {} },
      { currentTaskId: null, hooks: [], fields: { a: 1 } },
      { hooks: [], currentTaskId: null, fields: {} },
      { currentTaskId: null, hooks: [], fields: {}, more: undefined },
    ])
      expect(runtimeStateJson(st)).toBe(JSON.stringify(st));
    expect(() => runtimeStateJson({ currentTaskId: null, hooks: [1n], fields: {} })).toThrow(NonJsonValueError);
    // biome-ignore lint/suspicious/noSparseArray: a hole
    expect(() => runtimeStateJson({ currentTaskId: null, hooks: [, "a"], fields: {} })).toThrow(NonJsonValueError);
    expect(() => runtimeStateJson({ currentTaskId: null, hooks: [], fields: new Map() })).toThrow(NonJsonValueError);
    expect(() => runtimeStateJson({ currentTaskId: -0, hooks: [], fields: {} })).toThrow(NonJsonValueError);
  });
});
