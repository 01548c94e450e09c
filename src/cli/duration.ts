/**
 * Parsing of human durations such as `30d` for `dumplings gc --older-than`.
 *
 * @module
 */
import { UsageError } from "../ops/errors.js";

const UNIT_MS = new Map<string, number>([
  ["ms", 1],
  ["s", 1_000],
  ["m", 60_000],
  ["h", 3_600_000],
  ["d", 86_400_000],
  ["w", 7 * 86_400_000],
]);

/**
 * Parses a duration: a number followed by a unit, `ms`, `s`, `m` (minutes),
 * `h`, `d` or `w`; several parts may be chained (`1d12h`).
 *
 * @param text - e.g. `"30d"`, `"12h"`, `"1d12h"`, `"90m"`
 * @returns the duration in milliseconds (> 0)
 * @throws {UsageError} when the text is not a positive duration
 * @example
 * parseDuration("30d") // 2_592_000_000
 */
export function parseDuration(text: string): number {
  const trimmed = text.trim();
  const part = /(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/gy;
  let total = 0;
  let end = 0;
  for (let match = part.exec(trimmed); match !== null; match = part.exec(trimmed)) {
    total += Number(match[1]) * (UNIT_MS.get(match[2] ?? "") ?? Number.NaN);
    end = part.lastIndex;
  }
  if (trimmed === "" || end !== trimmed.length || !Number.isFinite(total)) {
    throw new UsageError(
      `invalid duration ${JSON.stringify(text)}: write a number and a unit (ms, s, m, h, d, w), e.g. 30d or 12h`,
    );
  }
  if (total <= 0) throw new UsageError(`invalid duration ${JSON.stringify(text)}: it must be longer than 0`);
  // A cutoff before the earliest representable date would make an invalid Date (JS dates span ±8.64e15 ms).
  if (total > Date.now() + 8.64e15) {
    throw new UsageError(`invalid duration ${JSON.stringify(text)}: longer than JavaScript dates can reach back`);
  }
  return total;
}
