/**
 * `dumplings chat --session KEY`: an interactive terminal chat whose
 * conversation lives in a backend. It resumes the session when it exists
 * (printing the last turns), streams the answer, saves after every appended
 * message (so it can be killed at any moment and restarted), and accepts
 * `/history`, `/save` and `/exit`. Works with any OpenAI-compatible server
 * (OpenAI, a local Ollama, vLLM…) and with Anthropic.
 *
 * @module
 */
import { createInterface } from "node:readline";
import { Command, Option } from "commander";
import { AnthropicAgent } from "../agent/anthropic-agent.js";
import { BaseAgent } from "../agent/base-agent.js";
import { messageText } from "../agent/conversation.js";
import { validateKey } from "../backends/keys.js";
import { StateNotFoundError } from "../core/errors.js";
import type { Message } from "../core/messages.js";
import { closeBackend, openBackendAsync } from "../ops/backend.js";
import { UsageError } from "../ops/errors.js";
import { loadState } from "../persistence/api.js";
import { configure } from "../persistence/config.js";
import { withBackendOptions } from "./backend.js";

/** Options of `dumplings chat`. */
interface ChatOptions {
  session: string;
  provider?: string;
  model?: string;
  apiKeyEnv?: string;
  protocol?: "openai" | "anthropic";
  prompt?: string;
  stream: boolean;
  backend?: string;
  dir?: string;
  db?: string;
  last: string;
}

const out = (text: string) => process.stdout.write(text);

/** One line per message: role, then text (tool calls and results summarised). */
function describeMessage(m: Message): string {
  const msg = m as Record<string, unknown>;
  const role = String(msg.role);
  const calls = Array.isArray(msg.tool_calls)
    ? (msg.tool_calls as { function: { name: string; arguments: string } }[]).map(
        (c) => `${c.function.name}(${c.function.arguments})`,
      )
    : Array.isArray(msg.content)
      ? (msg.content as { type: string; name?: string; input?: unknown }[])
          .filter((b) => b.type === "tool_use")
          .map((b) => `${b.name}(${JSON.stringify(b.input)})`)
      : [];
  const results = Array.isArray(msg.content)
    ? (msg.content as { type: string; content?: unknown }[]).filter((b) => b.type === "tool_result")
    : [];
  const text =
    role === "tool"
      ? String(typeof msg.content === "string" ? msg.content : JSON.stringify(msg.content))
      : messageText(m);
  const parts = [
    text,
    calls.length ? `[calls ${calls.join(", ")}]` : "",
    results.length ? `[${results.length} tool result(s)]` : "",
    msg.partial ? "[partial]" : "",
  ].filter(Boolean);
  const line = parts.join(" ").replace(/\s+/g, " ").trim();
  return `${role.padEnd(9)} ${line.length > 240 ? `${line.slice(0, 237)}...` : line}`;
}

function printMessages(messages: readonly Message[]): void {
  for (const m of messages) out(`  ${describeMessage(m)}\n`);
}

/**
 * Builds the `chat` command.
 *
 * @returns the commander command
 * @example
 * dumplings chat --session support-42 --provider http://127.0.0.1:11434/v1 --model llama3.2
 * dumplings chat --session claude-1 --protocol anthropic --provider https://api.anthropic.com/v1 \
 *   --model claude-sonnet-4-5 --api-key-env ANTHROPIC_API_KEY --backend sqlite
 */
export function chatCommand(): Command {
  return withBackendOptions(new Command("chat"))
    .description("chat with an agent whose conversation is saved after every message; resumes the session if it exists")
    .requiredOption("--session <key>", "session key (created if missing)")
    .option(
      "--provider <url>",
      "provider base URL or full …/chat/completions or …/messages URL (required for a new session)",
    )
    .option("--model <name>", "model name (required for a new session)")
    .option("--api-key-env <var>", "NAME of the environment variable holding the API key (none for a local server)")
    .addOption(new Option("--protocol <protocol>", "wire protocol of a new session").choices(["openai", "anthropic"]))
    .option("--prompt <text>", "system prompt of a new session")
    .option("--no-stream", "print the answer when it is complete instead of streaming it")
    .option("--last <n>", "turns to print when resuming", "6")
    .action(async (options: ChatOptions) => {
      const key = validateKey(options.session);
      const { backend, label } = await openBackendAsync(options);
      configure({ enabled: true, backend });
      try {
        let agent: BaseAgent;
        try {
          agent = await loadState<BaseAgent>(key, { backend });
          if (options.protocol && options.protocol !== agent.protocol) {
            throw new UsageError(`session ${JSON.stringify(key)} speaks ${agent.protocol}, not ${options.protocol}`);
          }
          if (options.provider) agent.config.apiProvider = options.provider;
          if (options.model) agent.config.modelName = options.model;
          if (options.apiKeyEnv !== undefined) agent.config.apiKeyEnv = options.apiKeyEnv;
          const shown = agent.history.filter((m) => m.role !== "system");
          const last = Math.max(0, Number(options.last) || 0);
          out(`resumed session ${JSON.stringify(key)} from ${label}: ${agent.history.length} messages\n`);
          if (last > 0 && shown.length > 0) printMessages(shown.slice(-last));
          const pending = agent.pendingToolCalls();
          if (pending.length)
            out(`  (${pending.length} tool call(s) were interrupted; they will be answered as interrupted)\n`);
        } catch (e) {
          if (!(e instanceof StateNotFoundError)) throw e;
          if (!options.provider || !options.model) {
            throw new UsageError(
              `session ${JSON.stringify(key)} does not exist yet: give --provider and --model to start it`,
            );
          }
          const Agent = options.protocol === "anthropic" ? AnthropicAgent : BaseAgent;
          agent = new Agent({
            name: key,
            apiProvider: options.provider,
            modelName: options.model,
            apiKeyEnv: options.apiKeyEnv ?? "",
            prompt: options.prompt ?? "",
            stream: options.stream,
          });
          await agent.saveState(key);
          out(`new session ${JSON.stringify(key)} in ${label}\n`);
        }
        agent.on("persistError", (e: unknown) => out(`! save failed: ${e instanceof Error ? e.message : String(e)}\n`));
        out("commands: /history, /save, /exit\n");

        const interactive = process.stdin.isTTY === true;
        const rl = createInterface({ input: process.stdin, terminal: interactive });
        const prompt = () => {
          if (interactive) out("you> ");
        };
        prompt();
        for await (const raw of rl) {
          const line = raw.trim();
          if (line === "") {
            prompt();
            continue;
          }
          if (line === "/exit" || line === "/quit") break;
          if (line === "/history") {
            printMessages(agent.history);
            prompt();
            continue;
          }
          if (line === "/save") {
            const r = await agent.saveState(key);
            out(`saved ${JSON.stringify(r.key)}${r.revision !== undefined ? ` (revision ${r.revision})` : ""}\n`);
            prompt();
            continue;
          }
          out("assistant> ");
          try {
            const result = await agent.conversationWithTool(line, {
              stream: options.stream,
              checkpoint: "message",
              ...(options.stream ? { onToken: (t: string) => out(t) } : {}),
            });
            if (!options.stream) out(result.text);
            out("\n");
          } catch (e) {
            out(`\n! ${e instanceof Error ? e.message : String(e)}\n`);
          }
          prompt();
        }
        rl.close();
      } finally {
        await closeBackend(backend);
      }
    });
}
