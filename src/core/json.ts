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
 * Nesting is limited to {@link MAX_JSON_DEPTH} levels of arrays and objects:
 * deeper values are refused on write (they would overflow the call stack of
 * `JSON.stringify` and of every reader) and are a `FormatError` on read.
 *
 * Read rule ({@link checkStoredJson}, applied by every backend and the codec to
 * what they parse): the same limits, so that whatever loads can be saved
 * again. A number JSON text spells beyond the double range (`1e400`, which
 * `JSON.parse` turns into `Infinity`) and a value nested too deep are a
 * `FormatError`; `-0` (valid JSON, written by e.g. Python for `-0.0`) is
 * read as `0`, the value every JSON writer of this package would store.
 *
 * @module
 */
import { FormatError, NonJsonValueError } from "./errors.js";

/**
 * Deepest nesting of arrays and objects a stored value may have, counted from
 * the stored unit's root (a history message; `meta`, `config` or `state`): the
 * root object is level 1. Deeper values are refused on write and on read.
 */
export const MAX_JSON_DEPTH = 512;

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

/** A path of a deeply nested value, cut in the middle when long (a 512-level path is ~1.5 KB). */
function shortPath(path: string): string {
  return path.length <= 160 ? path : `${path.slice(0, 100)}…${path.slice(-40)}`;
}

/**
 * Sets `obj[key] = value` as an own enumerable data property, for a key that comes from data: a key
 * named `"__proto__"` (legal JSON) stays data instead of changing `obj`'s prototype, as `JSON.parse`
 * keeps it. Every copy of user-keyed JSON objects goes through it (or through a spread, which also
 * defines own properties).
 *
 * @param obj - the object being built
 * @param key - the property name, from data
 * @param value - its value
 * @example
 * const out = {}; setOwn(out, "__proto__", 1); Object.keys(out) // ["__proto__"]
 */
export function setOwn(obj: object, key: string, value: unknown): void {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
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
  // Most values are JSON: a walk that allocates nothing and builds no path says so first.
  if (isJsonFast(value, 1)) return;
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
  const visit = (v: unknown, depth: number): void => {
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
    if (depth > MAX_JSON_DEPTH) {
      let p = path;
      for (const k of keys) p = joinPath(p, k);
      throw new NonJsonValueError(
        shortPath(p),
        `nesting deeper than ${MAX_JSON_DEPTH} levels of arrays/objects`,
        messageIndex,
      );
    }
    if (Array.isArray(obj)) {
      stack.add(obj);
      for (let i = 0; i < obj.length; i++) {
        if (!(i in obj)) fail("a hole in a sparse array", i);
        keys.push(i);
        visit(obj[i], depth + 1);
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
      visit(child, depth + 1);
      keys.pop();
    }
    stack.delete(obj);
  };
  visit(value, 1);
}

/**
 * The happy path of {@link assertJson} and {@link checkStoredJson}: true when `v` is JSON by
 * their rules, walking it without a key stack, cycle set or closures. False means "not sure": a
 * rule broken, `-0` (which the stored walk rewrites), or nesting deeper than
 * {@link MAX_JSON_DEPTH} (which also stops a cycle); the full walk then decides, and reports the
 * exact path. `written` (values about to be written) also refuses array holes and symbol keys,
 * which a stored value (parsed from JSON text) cannot hold.
 */
function isJsonFast(v: unknown, depth: number, written = true): boolean {
  switch (typeof v) {
    case "string":
    case "boolean":
      return true;
    case "number":
      return Number.isFinite(v) && !Object.is(v, -0);
    case "object": {
      if (v === null) return true;
      if (depth > MAX_JSON_DEPTH) return false;
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) {
          if ((written && !(i in v)) || !isJsonFast(v[i], depth + 1, written)) return false;
        }
        return true;
      }
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) return false;
      if (written && Object.getOwnPropertySymbols(v).length > 0) return false;
      for (const key in v) {
        const child = (v as Record<string, unknown>)[key];
        if (child !== undefined && !isJsonFast(child, depth + 1, written)) return false;
      }
      return true;
    }
    default:
      return false;
  }
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

/** Where a stored value was read from, for {@link checkStoredJson}'s `FormatError`. */
export interface StoredJsonSource {
  /** File or store label (e.g. `postgres:dumplings.sessions["k"]`, a `.duas` path). */
  file?: string;
  /** 1-based line of the value in a text file. */
  line?: number;
  /** What the value is, e.g. `history[3] of "k"`, `header field config of "k"`. */
  label: string;
}

/**
 * True when a value read from a store keeps the read rule as it is: {@link checkStoredJson} would
 * return it unchanged (no `-0` to rewrite). A walk that allocates nothing (no label, no path), for
 * the happy path of readers that check thousands of values; false means "let checkStoredJson decide".
 *
 * @param value - the parsed value
 * @param baseDepth - nesting levels above `value` in its stored unit @default 0
 * @example
 * isStoredJson(JSON.parse('{"a":[1,"x"]}')) // true
 * isStoredJson(JSON.parse('{"a":-0}')) // false (checkStoredJson rewrites it to 0)
 */
export function isStoredJson(value: unknown, baseDepth = 0): boolean {
  return isJsonFast(value, baseDepth + 1, false);
}

/**
 * True when {@link assertJson} surely accepts `value` (about to be written): the same walk, without
 * a key stack or cycle set, and false for anything it would have to look at closely (`-0`, a hole, a
 * symbol key, nesting past {@link MAX_JSON_DEPTH}). False means "let assertJson decide".
 *
 * @param value - the value
 * @example
 * isWrittenJson({ a: [1, "x"], b: undefined }) // true (JSON.stringify leaves b out)
 */
export function isWrittenJson(value: unknown): boolean {
  return isJsonFast(value, 1, true);
}

/**
 * Checks a value read from a store (usually just produced by `JSON.parse`) by
 * the read rule of this module, and normalises `-0` to `0` in place: after it
 * returns, `assertJson` accepts the value, so a loaded state can be saved again.
 *
 * @param value - the parsed value (modified in place only where it holds `-0`)
 * @param source - `label` naming the value (and its key), `file` and `line` when known
 * @param baseDepth - nesting levels above `value` in its stored unit (e.g. 2 for a `[STATE]`
 *   field value: `state` → `fields` → value) @default 0
 * @returns `value`
 * @throws {FormatError} naming the source, the path inside the value and the problem: a number beyond
 *   the double range (`1e400`), nesting deeper than {@link MAX_JSON_DEPTH}, or a value that is not JSON
 * @example
 * checkStoredJson(JSON.parse('{"a":-0}'), { label: "history[0]" }) // { a: 0 }
 * checkStoredJson(JSON.parse('{"a":1e400}'), { label: "history[0]", line: 12 }) // throws FormatError (line 12)
 */
export function checkStoredJson<T>(value: T, source: StoredJsonSource, baseDepth = 0): T {
  // Most stored values keep the rule: a walk that allocates nothing says so first.
  if (isJsonFast(value, baseDepth + 1, false)) return value;
  const keys: (string | number)[] = [];
  const fail = (what: string): never => {
    let p = "";
    for (const k of keys) p = joinPath(p, k);
    p = shortPath(p);
    throw new FormatError(`${source.label}${p ? ` at ${p}` : ""}: ${what}`, { file: source.file, line: source.line });
  };
  // Recursion is bounded by MAX_JSON_DEPTH, so even a value nested a million levels deep fails cleanly.
  const visit = (v: unknown, depth: number): unknown => {
    switch (typeof v) {
      case "string":
      case "boolean":
        return v;
      case "number":
        if (Number.isFinite(v)) return Object.is(v, -0) ? 0 : v;
        return fail(`the number ${String(v)} cannot be stored (out of the range of a double, e.g. 1e400)`);
      case "object":
        break;
      default:
        return fail(`${describe(v) ?? typeof v} is not JSON`);
    }
    if (v === null) return v;
    if (depth > MAX_JSON_DEPTH) fail(`nesting deeper than ${MAX_JSON_DEPTH} levels of arrays/objects`);
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const child = v[i];
        if (typeof child !== "object" && typeof child !== "number") {
          if (child === undefined) {
            keys.push(i);
            fail("undefined is not JSON");
          }
          continue;
        }
        keys.push(i);
        const out = visit(child, depth + 1);
        if (!Object.is(out, child)) v[i] = out;
        keys.pop();
      }
      return v;
    }
    const proto = Object.getPrototypeOf(v);
    if (proto !== Object.prototype && proto !== null) fail("an object that is not a plain JSON object");
    const obj = v as Record<string, unknown>;
    for (const key of Object.keys(obj)) {
      const child = obj[key];
      if (typeof child !== "object" && typeof child !== "number" && child !== undefined) continue;
      if (child === undefined) continue; // a store never returns it; omitted as JSON.stringify does
      keys.push(key);
      const out = visit(child, depth + 1);
      if (!Object.is(out, child)) obj[key] = out;
      keys.pop();
    }
    return v;
  };
  return visit(value, baseDepth + 1) as T;
}

/**
 * Parses JSON text read from a store and checks it with {@link checkStoredJson}.
 *
 * @param text - the stored JSON text
 * @param source - names the value for errors (`label`, `file`, `line`)
 * @param baseDepth - see {@link checkStoredJson}
 * @returns the parsed value (`-0` read as `0`)
 * @throws {FormatError} when `text` is not a string or not JSON, or breaks the read rule
 * @example
 * parseStoredJson('{"role":"user","content":"hi"}', { label: 'history[0] of "k"' })
 */
export function parseStoredJson(text: unknown, source: StoredJsonSource, baseDepth = 0): unknown {
  if (typeof text !== "string") {
    throw new FormatError(`${source.label} is not JSON text`, { file: source.file, line: source.line });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (cause) {
    throw new FormatError(`${source.label} is not valid JSON: ${(cause as Error).message}`, {
      file: source.file,
      line: source.line,
      cause,
    });
  }
  return checkStoredJson(value, source, baseDepth);
}

/**
 * True when `a` and `b` are plain objects with the same own keys, in the same
 * order, holding the same primitive values (`===`, so `-0`/`0` and `NaN` are
 * not the same): then both serialise to the same JSON text. False as soon as
 * either holds a nested object or array. A cheap "unchanged since the last
 * save" test for flat records such as an agent's config: strings are compared
 * by value, which costs O(1) when both are the same string (a 50 MB prompt
 * kept by the agent between saves).
 *
 * @param a - a candidate (e.g. the config about to be saved)
 * @param b - the other (e.g. a shallow copy of the config last saved)
 * @returns whether they are the same flat record
 * @example
 * sameFlatObject({ a: 1, b: "x" }, { a: 1, b: "x" }) // true
 * sameFlatObject({ a: [] }, { a: [] })               // false: not flat
 */
export function sameFlatObject(a: unknown, b: unknown): boolean {
  if (typeof a !== "object" || a === null || typeof b !== "object" || b === null) return false;
  if (Array.isArray(a) || Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  for (let i = 0; i < ka.length; i++) {
    const k = ka[i] as string;
    if (k !== kb[i]) return false;
    const va = (a as Record<string, unknown>)[k];
    if (va !== null && typeof va === "object") return false;
    if (va !== (b as Record<string, unknown>)[k] || (va === 0 && !Object.is(va, (b as Record<string, unknown>)[k]))) {
      return false;
    }
  }
  return true;
}

/**
 * A structural copy of a JSON value for {@link sameJsonShape}: arrays and objects are copied
 * (keys in `JSON.stringify`'s order, `undefined` properties left out as JSON leaves them out),
 * strings and other primitives are shared, not copied. O(nodes), whatever the strings' length.
 *
 * @param value - a value `assertJson` accepts
 * @returns its shape (treat as opaque)
 * @example
 * const shape = jsonShape(message); message.content = "edited"; sameJsonShape(message, shape) // false
 */
export function jsonShape(value: unknown): unknown {
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) {
    const out = new Array<unknown>(value.length);
    for (let i = 0; i < value.length; i++) out[i] = jsonShape(value[i]);
    return out;
  }
  const out: Record<string, unknown> = {};
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    const child = (value as Record<string, unknown>)[key];
    if (child !== undefined) out[key] = jsonShape(child);
  }
  return out;
}

/**
 * Whether a JSON value still serialises to the text of the value {@link jsonShape} was taken
 * from: the same keys in the same order, equal primitives (strings compared by value, in O(1)
 * when they are the very same string, as an unchanged message's are). A cheap "edited in place
 * since it was saved?" test, O(nodes) instead of serialising O(bytes).
 *
 * @param value - the value now (a value `assertJson` accepts, or the answer is false for anything else it meets)
 * @param shape - `jsonShape` of the value as it was
 * @returns true when `JSON.stringify(value)` equals the text the value had
 */
export function sameJsonShape(value: unknown, shape: unknown): boolean {
  if (value === shape) return true;
  if (typeof value !== "object" || value === null || typeof shape !== "object" || shape === null) return false;
  if (Array.isArray(value)) {
    if (!Array.isArray(shape) || value.length !== shape.length) return false;
    for (let i = 0; i < value.length; i++) if (!sameJsonShape(value[i], shape[i])) return false;
    return true;
  }
  if (Array.isArray(shape)) return false;
  const keys = Object.keys(shape);
  let j = 0;
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    const child = (value as Record<string, unknown>)[key];
    if (child === undefined) continue;
    if (keys[j] !== key || !sameJsonShape(child, (shape as Record<string, unknown>)[key])) return false;
    j++;
  }
  return j === keys.length;
}

/** True for a plain (non-array) JSON object. */
export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
