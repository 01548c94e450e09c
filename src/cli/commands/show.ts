/**
 * `dumplings show KEY`: what a stored session holds — meta, config, state,
 * message counts by role, tool calls by tool name and the last messages —
 * computed in one streaming pass over the history.
 *
 * @module
 */
import { Command, InvalidArgumentError } from "commander";
import { closeBackend, openBackendAsync, readSession, withBackendOptions } from "../backend.js";
import { oneLine, printJson } from "../output.js";
import { HistoryStats, previewMessage } from "../stats.js";

/** Options of `dumplings show`. */
interface ShowOptions {
  backend?: string;
  dir?: string;
  db?: string;
  last: number;
  json?: boolean;
}

/** Parses a non-negative integer option value. @internal */
export function parseCount(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError(`expected a whole number, got ${JSON.stringify(value)}`);
  return Number(value);
}

/**
 * Builds the `show` command.
 *
 * `--json` prints `{ key, backend, meta, config, state, messages: { total, byRole },
 * toolCalls: { total, byName }, last: [{ index, message }], streamed }` (`streamed`:
 * the history was streamed with `iterHistory` rather than loaded whole).
 *
 * @returns the commander command
 * @example
 * dumplings show weather-1 --last 3
 */
export function showCommand(): Command {
  return withBackendOptions(new Command("show"))
    .description("show a stored session: meta, config, message counts, tool calls and the last messages")
    .argument("<key>", "session key")
    .option("-n, --last <n>", "how many trailing messages to show", parseCount, 5)
    .option("--json", "print JSON")
    .action(async (key: string, options: ShowOptions) => {
      const { backend, label } = await openBackendAsync(options, process.env, { mustExist: true });
      try {
        // Header and history of one saved state, read again when a save replaced the history mid-read.
        const { session, stats } = await readSession(backend, key, label, async (session) => {
          const stats = new HistoryStats(options.last);
          for await (const message of session.history) stats.add(message);
          return { session, stats };
        });
        const summary = stats.summary();
        const { meta, config, state } = session.header;
        if (options.json) {
          printJson({
            key,
            backend: label,
            meta,
            config,
            state,
            messages: { total: summary.total, byRole: summary.byRole },
            toolCalls: { total: summary.toolCalls, byName: summary.toolCallsByName },
            last: summary.last,
            streamed: session.streamed,
          });
          return;
        }
        const out: string[] = [];
        const section = (title: string, entries: [string, string][]) => {
          out.push(`[${title}]`);
          const width = Math.max(...entries.map(([k]) => k.length));
          for (const [k, v] of entries) out.push(`  ${k.padEnd(width)}  ${v}`);
          out.push("");
        };
        out.push(`session ${key} in ${label}`, "");
        section("META", [
          ["format_version", meta.formatVersion],
          ["schema_version", meta.schemaVersion],
          ["agent_uuid", meta.agentUuid],
          ["agent_name", meta.agentName],
          ["protocol", meta.protocol],
          ["class", meta.class],
          ["saved_at", meta.savedAt],
          ["message_count", String(meta.messageCount)],
        ]);
        section("CONFIG", [
          ["prompt", config.prompt === "" ? '""' : `"${oneLine(config.prompt, 80)}" (${config.prompt.length} chars)`],
          ["api_provider", config.apiProvider],
          ["api_key_env", config.apiKeyEnv],
          ["model_name", config.modelName],
          ["max_tokens", String(config.maxTokens)],
          ["stream", String(config.stream)],
          ["fc_model", String(config.fcModel)],
          ["tool_timeout", `${config.toolTimeout} s`],
          ["tool_max_workers", String(config.toolMaxWorkers)],
        ]);
        section("STATE", [
          ["current_task_id", JSON.stringify(state.currentTaskId)],
          ["hooks", JSON.stringify(state.hooks)],
          ...Object.entries(state.fields).map(([k, v]): [string, string] => [
            `field.${k}`,
            oneLine(JSON.stringify(v), 100),
          ]),
        ]);
        const roles = Object.entries(summary.byRole)
          .map(([role, n]) => `${role} ${n}`)
          .join(", ");
        const tools = Object.entries(summary.toolCallsByName)
          .map(([name, n]) => `${name} ${n}`)
          .join(", ");
        out.push(`messages    ${summary.total}${roles ? `  (${roles})` : ""}`);
        out.push(`tool calls  ${summary.toolCalls}${tools ? `  (${tools})` : ""}`);
        if (summary.last.length > 0) {
          out.push("", `last ${summary.last.length} message${summary.last.length === 1 ? "" : "s"}`);
          const width = String(summary.total - 1).length + 1;
          for (const { index, message } of summary.last) {
            const role = String((message as { role?: unknown }).role ?? "?").padEnd(9);
            out.push(`  ${`#${index}`.padStart(width)}  ${role}  ${previewMessage(message)}`);
          }
        }
        process.stdout.write(`${out.join("\n")}\n`);
      } finally {
        await closeBackend(backend);
      }
    });
}
