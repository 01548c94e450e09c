/** A minimal real agent host for loop tests (the loop's structural contract), no mocks involved. */
import { EventEmitter } from "node:events";
import type { ConversationHost } from "../../src/agent/conversation.js";
import type { Message, Protocol } from "../../src/core/messages.js";
import { type AgentConfig, type AgentConfigInput, AgentConfigSchema } from "../../src/core/state.js";

export class TestHost extends EventEmitter implements ConversationHost {
  config: AgentConfig;
  history: Message[] = [];
  currentTaskId: string | null = null;
  constructor(
    readonly protocol: Protocol,
    config: AgentConfigInput,
  ) {
    super();
    this.config = AgentConfigSchema.parse(config);
  }
}
