/**
 * `dumplings-ai/testing`: helpers for testing agents and stores — recorded
 * sample conversations, state builders, a local model server speaking the
 * providers' wire protocols, the conformance suites a custom store runs in one
 * call (`runBackendConformance` for session backends, `runJournalConformance`
 * for durable-run journals, which workflow stores are too), and
 * `resetBackendRegistry` for tests that register backends.
 *
 * Importing this entry loads no test runner: each suite takes the caller's
 * test functions (`{ test: vitest }`, see {@link ConformanceTestApi}), so
 * `startModelServer` and the samples work in a process without vitest.
 *
 * @example
 * import * as vitest from "vitest";
 * import { runBackendConformance, startModelServer } from "dumplings-ai/testing";
 * runBackendConformance("mine", () => createMine(), { test: vitest });
 *
 * @module
 */
export { resetBackendRegistry } from "../backends/registry.js";
export * from "./conformance.js";
export * from "./journal-conformance.js";
export * from "./model-server.js";
export * from "./samples.js";
export * from "./states.js";
export type {
  ConformanceAssertion,
  ConformanceAsyncAssertion,
  ConformanceDescribe,
  ConformanceExpect,
  ConformanceIt,
  ConformanceSuiteOptions,
  ConformanceTestApi,
  ConformanceTestContext,
} from "./test-api.js";
