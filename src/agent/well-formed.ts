/**
 * Provider requests never carry a lone UTF-16 surrogate.
 *
 * Storage keeps every string exactly, lone surrogates included (the `.duas`
 * codec and every backend round-trip them byte for byte). A model API, though,
 * rejects a request whose JSON holds half of a surrogate pair (Anthropic:
 * `400 … no low surrogate in string`), and a session whose stored history holds
 * one would fail on every later turn (shared/cases/pb-06, after
 * anthropics/claude-code#69927). So the request built from the history
 * replaces each lone surrogate with U+FFFD (`String.prototype.toWellFormed`);
 * the stored history is not changed.
 *
 * @module
 */

/**
 * Returns `value` with every string made well-formed (lone surrogates → U+FFFD).
 * Copy-on-write: objects and arrays holding no such string are returned as is,
 * so the common case allocates nothing.
 *
 * @param value - a JSON-like value (objects, arrays, strings, other primitives)
 * @returns the same value, or a copy in which the ill-formed strings are replaced
 * @example
 * toWellFormedDeep({ text: "bad \ud83d end" }) // → { text: "bad \ufffd end" }
 */
export function toWellFormedDeep<T>(value: T): T {
  if (typeof value === "string") return (value.isWellFormed() ? value : value.toWellFormed()) as T;
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) {
    let out: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const v = toWellFormedDeep(value[i]);
      if (v !== value[i]) {
        out ??= value.slice();
        out[i] = v;
      }
    }
    return (out ?? value) as T;
  }
  if (Object.getPrototypeOf(value) !== Object.prototype && Object.getPrototypeOf(value) !== null) return value;
  let out: Record<string, unknown> | undefined;
  for (const [k, v] of Object.entries(value)) {
    const w = toWellFormedDeep(v);
    if (w !== v) {
      out ??= { ...(value as Record<string, unknown>) };
      out[k] = w;
    }
  }
  return (out ?? value) as T;
}
