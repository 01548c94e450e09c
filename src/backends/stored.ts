/**
 * Helpers shared by the database backends (SQLite, Redis, PostgreSQL) to
 * check what a caller writes and what a store returns: one rule in one place,
 * so the backends cannot drift apart.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { FormatError, InvalidStateError } from "../core/errors.js";
import { assertJson } from "../core/json.js";
import type { AgentState } from "../core/state.js";

/**
 * Checks a `WriteOptions.expectedRevision`.
 *
 * @param revision - `undefined`, `null` or a non-negative safe integer
 * @throws {TypeError} for anything else
 */
export function checkRevision(revision: unknown): void {
  if (revision === undefined || revision === null) return;
  if (typeof revision !== "number" || !Number.isSafeInteger(revision) || revision < 0) {
    throw new TypeError(`expectedRevision must be null or a non-negative integer, got ${String(revision)}`);
  }
}

/**
 * Checks that a state to write has a history array.
 *
 * @throws {InvalidStateError} when `state` is not an object with a `history` array
 */
export function checkStateShape(state: AgentState): void {
  if (typeof state !== "object" || state === null || !Array.isArray(state.history)) {
    throw new InvalidStateError("history", "a state must be an object with meta, config, state and a history array");
  }
}

/**
 * The JSON text of a header part (`meta`, `config` or `state`).
 *
 * @param value - must be a JSON object
 * @param path - its name in errors
 * @returns `JSON.stringify(value)`
 * @throws {NonJsonValueError} when a value inside is not JSON
 * @throws {InvalidStateError} when `value` is not an object
 */
export function jsonText(value: unknown, path: string): string {
  assertJson(value, path);
  if (typeof value !== "object" || value === null) throw new InvalidStateError(path, "must be a JSON object");
  return JSON.stringify(value);
}

/**
 * Parses a stored header part and validates it against its schema.
 *
 * @param key - the session key (for the message)
 * @param file - where it is stored, e.g. `postgres:dumplings.sessions["k"]`
 * @param field - `meta`, `config` or `state`
 * @param text - the stored text
 * @param schema - a zod schema (anything with `safeParse`)
 * @returns the parsed value
 * @throws {FormatError} naming the key, the place and the field when the text is not JSON or does not match
 */
export function parseHeaderField<T>(
  key: string,
  file: string,
  field: string,
  text: unknown,
  schema: { safeParse(v: unknown): { success: true; data: T } | { success: false; error: unknown } },
): T {
  let value: unknown;
  try {
    if (typeof text !== "string") throw new Error("not text");
    value = JSON.parse(text);
  } catch (cause) {
    throw new FormatError(`header field ${field} of ${JSON.stringify(key)} is not valid JSON`, { file, cause });
  }
  const r = schema.safeParse(value);
  if (!r.success) {
    throw new FormatError(`header field ${field} of ${JSON.stringify(key)} does not match its schema`, {
      file,
      cause: r.error,
    });
  }
  return r.data;
}

/**
 * Digest (sha1, base64) of a message's JSON text, stored for the last message
 * so an append can check (not assume) that the writer's history ends where the
 * stored one does: a message edited at the boundary forces a full rewrite.
 *
 * @throws {NonJsonValueError} when the message is not JSON
 */
export function messageDigest(history: readonly unknown[], index: number): string {
  const message = history[index];
  assertJson(message, `history[${index}]`, index);
  return createHash("sha1").update(JSON.stringify(message)).digest("base64");
}

/** {@link messageDigest} of the last message, `""` for an empty history. */
export function tailDigest(history: readonly unknown[]): string {
  return history.length > 0 ? messageDigest(history, history.length - 1) : "";
}
