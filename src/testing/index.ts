/**
 * `dumplings-ai/testing`: helpers for testing agents and storage backends —
 * recorded sample conversations, state builders, and the backend conformance
 * suite a custom backend runs in one call.
 *
 * @module
 */
export * from "./conformance.js";
export * from "./model-server.js";
export * from "./samples.js";
export * from "./states.js";
