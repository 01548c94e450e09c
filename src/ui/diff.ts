/**
 * The difference between two JSON values (two workflow checkpoints), as a
 * list of changed paths: what a person reads to see what a step did.
 *
 * @module
 */

/** One difference between two JSON values. */
export interface DiffEntry {
  /** JSON-pointer-like path, e.g. `/sharedMemory/items/2` (`""` for the root). */
  path: string;
  /** `added`: only in the second value; `removed`: only in the first; `changed`: in both, different. */
  kind: "added" | "removed" | "changed";
  /** The value in the first (absent when added). */
  before?: unknown;
  /** The value in the second (absent when removed). */
  after?: unknown;
}

const isObj = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
const escapeSegment = (k: string) => k.replace(/~/g, "~0").replace(/\//g, "~1");

/**
 * Compares two JSON values path by path: objects key by key (in the order of
 * `a`, then keys only `b` has), arrays index by index; any other pair is
 * compared as JSON.
 *
 * @param a - the earlier value
 * @param b - the later value
 * @param limit - at most this many entries are returned @default 500
 * @returns the differences (empty when the values are equal as JSON)
 * @example
 * jsonDiff({ n: 1, s: "x" }, { n: 2, t: true })
 * // [{ path: "/n", kind: "changed", before: 1, after: 2 }, { path: "/s", kind: "removed", before: "x" },
 * //  { path: "/t", kind: "added", after: true }]
 */
export function jsonDiff(a: unknown, b: unknown, limit = 500): DiffEntry[] {
  const out: DiffEntry[] = [];
  const walk = (x: unknown, y: unknown, path: string): void => {
    if (out.length >= limit) return;
    if (isObj(x) && isObj(y)) {
      for (const k of Object.keys(x)) {
        const p = `${path}/${escapeSegment(k)}`;
        if (!Object.hasOwn(y, k)) out.push({ path: p, kind: "removed", before: x[k] });
        else walk(x[k], y[k], p);
      }
      for (const k of Object.keys(y)) {
        if (!Object.hasOwn(x, k)) out.push({ path: `${path}/${escapeSegment(k)}`, kind: "added", after: y[k] });
      }
      return;
    }
    if (Array.isArray(x) && Array.isArray(y)) {
      const n = Math.max(x.length, y.length);
      for (let i = 0; i < n; i++) {
        const p = `${path}/${i}`;
        if (i >= y.length) out.push({ path: p, kind: "removed", before: x[i] });
        else if (i >= x.length) out.push({ path: p, kind: "added", after: y[i] });
        else walk(x[i], y[i], p);
      }
      return;
    }
    if (JSON.stringify(x) !== JSON.stringify(y)) out.push({ path, kind: "changed", before: x, after: y });
  };
  walk(a, b, "");
  return out.slice(0, limit);
}
