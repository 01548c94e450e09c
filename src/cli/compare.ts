/**
 * Deep comparison of JSON values that says WHERE two values differ, used to
 * verify copies (`dumplings convert`) and round trips (`npm run demo`).
 *
 * @module
 */
import { joinPath } from "../core/json.js";

/**
 * The path of the first difference between two JSON-like values, or
 * `undefined` when they are deeply equal (same types, same array lengths and
 * elements, same object keys in any order, identical strings and numbers).
 *
 * @param a - expected value
 * @param b - actual value
 * @param path - path label of the root @default "state"
 * @returns e.g. `"state.history[3].content"`, or `undefined` when equal
 * @example
 * firstDifference({ a: [1, 2] }, { a: [1, 3] }) // "state.a[1]"
 */
export function firstDifference(a: unknown, b: unknown, path = "state"): string | undefined {
  if (Object.is(a, b)) return undefined;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== "object") return path;
  if (Array.isArray(a) !== Array.isArray(b)) return path;
  if (Array.isArray(a) && Array.isArray(b)) {
    const n = Math.min(a.length, b.length);
    for (let i = 0; i < n; i++) {
      const d = firstDifference(a[i], b[i], joinPath(path, i));
      if (d !== undefined) return d;
    }
    return a.length === b.length ? undefined : `${path}.length`;
  }
  const ao = a as Record<string, unknown>;
  const bo = b as Record<string, unknown>;
  const aKeys = Object.keys(ao).filter((k) => ao[k] !== undefined);
  const bKeys = Object.keys(bo).filter((k) => bo[k] !== undefined);
  for (const k of aKeys) {
    if (!Object.hasOwn(bo, k) || bo[k] === undefined) return joinPath(path, k);
    const d = firstDifference(ao[k], bo[k], joinPath(path, k));
    if (d !== undefined) return d;
  }
  for (const k of bKeys) if (!Object.hasOwn(ao, k) || ao[k] === undefined) return joinPath(path, k);
  return undefined;
}
