/**
 * The test functions a conformance suite registers its tests with, passed in
 * by the caller: the suites of `dumplings-ai/testing` never import a test
 * runner, so the entry loads (for `startModelServer`, the samples, the state
 * builders) in a process that has no vitest installed.
 *
 * The shape is vitest's (`describe`, `describe.skip`, `it` with a test
 * context whose `skip(note)` skips at run time, `expect` with the matchers
 * listed below, `beforeEach`, `afterEach`); the simplest value is vitest's own
 * namespace: `import * as vitest from "vitest"` and `{ test: vitest }`. The
 * types are structural, so nothing here depends on vitest's type declarations.
 *
 * @module
 */

/** The test context a suite's test receives: `skip(note)` ends the test as skipped, with the reason shown. */
export interface ConformanceTestContext {
  /** Marks the running test as skipped, showing `note` as the reason; does not return (it throws, as vitest's does). */
  skip(note?: string): never;
}

/** `describe(name, body)` and `describe.skip(name, body)`. */
export interface ConformanceDescribe {
  (name: string, body: () => void): unknown;
  /** Registers the group as skipped: none of its tests or hooks run. */
  skip: (name: string, body: () => void) => unknown;
}

/** `it(name, fn, timeoutMs?)`: `fn` receives the {@link ConformanceTestContext}. */
export type ConformanceIt = (name: string, fn: (ctx: ConformanceTestContext) => unknown, timeoutMs?: number) => unknown;

/** The matchers of an awaited `expect(promise).rejects`. */
export interface ConformanceAsyncAssertion {
  toBeInstanceOf(expected: abstract new (...args: never[]) => unknown): Promise<unknown>;
  toMatchObject(expected: object): Promise<unknown>;
  toThrow(expected?: RegExp | string): Promise<unknown>;
}

/** The matchers the suites use, as vitest (and Jest) define them. */
export interface ConformanceAssertion {
  readonly not: ConformanceAssertion;
  readonly rejects: ConformanceAsyncAssertion;
  toBe(expected: unknown): void;
  toEqual(expected: unknown): void;
  toMatchObject(expected: object): void;
  toBeUndefined(): void;
  toBeNull(): void;
  toBeInstanceOf(expected: abstract new (...args: never[]) => unknown): void;
  toContain(item: unknown): void;
  toHaveLength(length: number): void;
  toBeGreaterThan(n: number): void;
  toBeLessThan(n: number): void;
  toBeLessThanOrEqual(n: number): void;
  toMatch(expected: RegExp | string): void;
}

/** `expect(actual, message?)`. */
export type ConformanceExpect = (actual: unknown, message?: string) => ConformanceAssertion;

/**
 * The test API every conformance suite of `dumplings-ai/testing` takes as its
 * `test` option: `runBackendConformance` and `runJournalConformance` register
 * their groups and tests through it.
 *
 * @example
 * import * as vitest from "vitest";
 * import { runBackendConformance } from "dumplings-ai/testing";
 *
 * runBackendConformance("mine", () => createMine(), { test: vitest });
 * // or, naming what is used:
 * import { afterEach, beforeEach, describe, expect, it } from "vitest";
 * runBackendConformance("mine", () => createMine(), { test: { describe, it, expect, beforeEach, afterEach } });
 */
export interface ConformanceTestApi {
  /** Registers a group of tests (and `describe.skip`, a skipped group). */
  describe: ConformanceDescribe;
  /** Registers a test; its function gets a context with `skip(note)`. */
  it: ConformanceIt;
  /** Assertions. */
  expect: ConformanceExpect;
  /** Runs before each test of the current group (may return a promise). */
  beforeEach: (fn: () => unknown) => unknown;
  /** Runs after each test of the current group, also after a failed one (may return a promise). */
  afterEach: (fn: () => unknown) => unknown;
}

/** Options every conformance suite takes. */
export interface ConformanceSuiteOptions {
  /** The test functions to register with (see {@link ConformanceTestApi}), e.g. `import * as vitest from "vitest"`. */
  test: ConformanceTestApi;
  /** When set, the whole suite is registered as skipped and this reason is shown in its title (e.g. "Redis is down"). */
  skip?: string | undefined;
}

/**
 * Registers `body` as the suite's group titled `title`, or as a skipped group
 * whose title names the reason.
 *
 * @internal
 */
export function suiteGroup(options: ConformanceSuiteOptions, title: string, body: () => void): void {
  const { describe } = options.test;
  if (options.skip) describe.skip(`${title} (skipped: ${options.skip})`, body);
  else describe(title, body);
}

/**
 * Expects `fn` (sync throw or rejected promise) to fail with an error of `cls`; returns the error.
 *
 * @internal
 */
export async function failsWith<E extends Error>(
  expect: ConformanceExpect,
  fn: () => unknown,
  cls: new (...args: never[]) => E,
): Promise<E> {
  let error: unknown;
  try {
    await fn();
  } catch (e) {
    error = e;
  }
  expect(error, `expected ${cls.name}`).toBeInstanceOf(cls);
  return error as E;
}
