/**
 * `AnthropicAgent`: an agent whose history is in the Anthropic Messages
 * shape (`protocol: "anthropic"`: `user`/`assistant` messages with string
 * content or blocks such as `text`, `thinking`, `tool_use`, `tool_result`;
 * the system prompt lives in `config.prompt`, not in the history). Saved as
 * class `dumplings-ai:AnthropicAgent`. Everything else is {@link BaseAgent}.
 *
 * @module
 */
import type { Protocol } from "../core/messages.js";
import { registerAgentClass } from "../persistence/classes.js";
import { BaseAgent, STRICT_OPTIONS } from "./base-agent.js";

/**
 * An agent speaking the Anthropic Messages protocol.
 *
 * @example
 * const agent = new AnthropicAgent({ name: "claude", apiProvider: "https://api.anthropic.com/v1/messages",
 *   apiKeyEnv: "ANTHROPIC_API_KEY", modelName: "claude-sonnet-4-5" });
 * agent.history.push({ role: "user", content: [{ type: "text", text: "hi" }] });
 * await agent.saveState();
 * const again = await AnthropicAgent.loadState(agent.uuid);
 */
export class AnthropicAgent extends BaseAgent {
  /** The message protocol of this class's history. */
  static override readonly protocol: Protocol = "anthropic";
}

registerAgentClass(AnthropicAgent, "dumplings-ai", "AnthropicAgent");
STRICT_OPTIONS.add(AnthropicAgent);
