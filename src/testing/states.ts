/**
 * Builders of valid {@link AgentState} values for tests and conformance runs.
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import type { Message, Protocol } from "../core/messages.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { type AgentConfig, AgentConfigSchema, type AgentState } from "../core/state.js";
import { FORMAT_VERSION, packageVersion } from "../core/version.js";

/** The keys of {@link MakeStateOptions}: any other is an `InvalidOptionError`. */
const STATE_OPTIONS = optionKeys<MakeStateOptions>({
  protocol: true,
  name: true,
  uuid: true,
  className: true,
  config: true,
  currentTaskId: true,
  hooks: true,
  fields: true,
  savedAt: true,
});

/** Overrides accepted by {@link makeState}. */
export interface MakeStateOptions {
  protocol?: Protocol;
  name?: string;
  uuid?: string;
  className?: string;
  config?: Partial<AgentConfig>;
  currentTaskId?: string | null;
  hooks?: string[];
  fields?: AgentState["state"]["fields"];
  /** ISO-8601 timestamp with offset. @default now */
  savedAt?: string;
}

/**
 * Builds a complete, valid agent state around a history.
 *
 * @param history - messages in the protocol's shape (copied shallowly)
 * @param options - protocol (default `openai`), name, uuid, class, config overrides, state fields
 * @returns an {@link AgentState} whose `meta.messageCount` equals `history.length`
 * @example
 * const s = makeState([{ role: "user", content: "hi" }], { name: "demo" });
 */
export function makeState(history: Message[], options: MakeStateOptions = {}): AgentState {
  checkOptions("makeState", options, STATE_OPTIONS);
  const protocol = options.protocol ?? "openai";
  return {
    meta: {
      formatVersion: FORMAT_VERSION,
      schemaVersion: packageVersion(),
      agentUuid: options.uuid ?? randomUUID(),
      agentName: options.name ?? "test-agent",
      protocol,
      class: options.className ?? (protocol === "openai" ? "dumplings-ai:BaseAgent" : "dumplings-ai:AnthropicAgent"),
      savedAt: options.savedAt ?? new Date().toISOString(),
      messageCount: history.length,
    },
    config: AgentConfigSchema.parse(options.config ?? {}),
    state: {
      currentTaskId: options.currentTaskId ?? null,
      hooks: options.hooks ?? [],
      fields: options.fields ?? {},
    },
    history: [...history],
  };
}
