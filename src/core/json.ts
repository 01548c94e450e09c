/**
 * JSON value rules shared by every layer: what may be stored, and the check
 * that refuses everything else with a path to the offending value.
 *
 * Rule (DESIGN.md "JSON in, JSON out"): only `null`, booleans, finite numbers,
 * strings (lone surrogates included — `JSON.stringify` escapes them), arrays
 * and plain objects are stored. `undefined` as an object property is omitted
 * exactly as `JSON.stringify` does; everywhere else (array element, top
 * level) it is refused. BigInt, functions, symbols, NaN/±Infinity, `-0`
 * (JSON would turn it into `0`), cycles, and non-plain objects (Date, Map,
 * Set, class instances, typed arrays) are refused — never silently changed.
 *
 * @module
 */
import { NonJsonValueError } from "./errors.js";

/** A JSON primitive. */
export type JsonPrimitive = null | boolean | number | string;
/** Any JSON value. */
export type JsonValue = JsonPrimitive | JsonValue[] | { [key: string]: JsonValue };
/** A JSON object. */
export type JsonObject = { [key: string]: JsonValue };

function describe(value: unknown): string | undefined {
  switch (typeof value) {
    case "bigint":
      return "a BigInt";
    case "function":
      return "a function";
    case "symbol":
      return "a symbol";
    case "undefined":
      return "undefined";
    case "number":
      if (Number.isNaN(value)) return "NaN";
      if (!Number.isFinite(value)) return String(value);
      if (Object.is(value, -0)) return "-0 (JSON would store it as 0)";
      return undefined;
    default:
      return undefined;
  }
}

/** Appends a property name to a path: `a.b`, or `a["x y"]` when not an identifier. */
export function joinPath(path: string, key: string | number): string {
  if (typeof key === "number") return `${path}[${key}]`;
  if (/^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key)) return path ? `${path}.${key}` : key;
  return `${path}[${JSON.stringify(key)}]`;
}

/**
 * Checks that `value` is JSON as defined above.
 *
 * @param value - the value to check
 * @param path - path label used in the error, e.g. `history[3]` (default `value`)
 * @param messageIndex - history index recorded on the error, when checking a message
 * @throws {NonJsonValueError} naming the path of the first offending value
 * @example
 * assertJson({ a: [1, 2n] }, "input") // throws: value at input.a[1] cannot be stored as JSON: a BigInt
 */
export function assertJson(value: unknown, path = "value", messageIndex?: number): asserts value is JsonValue {
  // The walk keeps a stack of keys and builds the path string only when it throws:
  // this check runs on every save, so the happy path allocates nothing per property.
  const keys: (string | number)[] = [];
  const stack = new Set<object>();
  const fail = (what: string, extra?: string | number): never => {
    let p = path;
    for (const k of keys) p = joinPath(p, k);
    if (extra !== undefined) p = joinPath(p, extra);
    throw new NonJsonValueError(p, what, messageIndex);
  };
  const visit = (v: unknown): void => {
    if (v === null) return;
    switch (typeof v) {
      case "string":
      case "boolean":
        return;
      case "number":
        if (Number.isFinite(v) && !Object.is(v, -0)) return;
        fail(describe(v)!);
        return;
      case "object":
        break;
      default:
        fail(describe(v) ?? typeof v);
    }
    const obj = v as object;
    if (stack.has(obj)) fail("a cycle (the value contains itself)");
    if (Array.isArray(obj)) {
      stack.add(obj);
      for (let i = 0; i < obj.length; i++) {
        if (!(i in obj)) fail("a hole in a sparse array", i);
        keys.push(i);
        visit(obj[i]);
        keys.pop();
      }
      stack.delete(obj);
      return;
    }
    const proto = Object.getPrototypeOf(obj);
    if (proto !== Object.prototype && proto !== null) {
      const name = (obj as { constructor?: { name?: string } }).constructor?.name ?? "object";
      fail(`an instance of ${name} (only plain objects are JSON)`);
    }
    if (Object.getOwnPropertySymbols(obj).length > 0) fail("an object with symbol keys");
    stack.add(obj);
    for (const key in obj) {
      if (!Object.hasOwn(obj, key)) continue;
      const child = (obj as Record<string, unknown>)[key];
      if (child === undefined) continue; // omitted by JSON, as JSON.stringify does
      keys.push(key);
      visit(child);
      keys.pop();
    }
    stack.delete(obj);
  };
  visit(value);
}

/**
 * Checks then serialises a JSON value.
 *
 * @param value - value to serialise
 * @param path - path label for errors
 * @returns compact JSON text (no whitespace)
 * @throws {NonJsonValueError} when `value` is not JSON (see module rules)
 */
export function toJson(value: unknown, path = "value"): string {
  assertJson(value, path);
  return JSON.stringify(value);
}

/** True for a plain (non-array) JSON object. */
export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
