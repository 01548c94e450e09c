/**
 * `dumplings show KEY`: what a stored session holds — meta, config, state,
 * message counts by role, tool calls by tool name and the last messages —
 * computed in one streaming pass over the history.
 *
 * @module
 */
import { Command, InvalidArgumentError } from "commander";
import { closeBackend, openBackendAsync } from "../../ops/backend.js";
import { oneLine } from "../../ops/format.js";
import { readSession } from "../../ops/sessions.js";
import { HistoryStats, previewMessage } from "../../ops/stats.js";
import { withBackendOptions } from "../backend.js";
import { printJson } from "../output.js";

/** Options of `dumplings show`. */
interface ShowOptions {
  backend?: string;
  dir?: string;
  db?: string;
  last: number;
  json?: boolean;
}

/** How much of a long header value the text output reads (it shows at most 100 characters of one). */
const CLIP_AT = 1024;

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
        // The text shows the start of long values only: they may come clipped (a 50 MB prompt is not held in memory).
        const { session, stats } = await readSession(
          backend,
          key,
          label,
          async (session) => {
            const stats = new HistoryStats(options.last);
            for await (const message of session.history) stats.add(message);
            return { session, stats };
          },
          options.json ? {} : { clipAt: CLIP_AT },
        );
        const summary = stats.summary();
        const { meta, config, state } = session.header;
        const clipped = new Map((session.clipped ?? []).map((c) => [c.path, c]));
        const length = (path: string, value: string) => clipped.get(path)?.length ?? value.length;
        const text = (path: string, value: string) =>
          clipped.has(path) ? `${oneLine(value, 100)} (${clipped.get(path)?.length} chars)` : value;
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
          [
            "prompt",
            config.prompt === "" && !clipped.has("config.prompt")
              ? '""'
              : `"${oneLine(config.prompt, 80)}" (${length("config.prompt", config.prompt)} chars)`,
          ],
          ["api_provider", text("config.apiProvider", config.apiProvider)],
          ["api_key_env", text("config.apiKeyEnv", config.apiKeyEnv)],
          ["model_name", text("config.modelName", config.modelName)],
          ["max_tokens", String(config.maxTokens)],
          ["stream", String(config.stream)],
          ["fc_model", String(config.fcModel)],
          ["tool_timeout", `${config.toolTimeout} s`],
          ["tool_max_workers", String(config.toolMaxWorkers)],
        ]);
        section("STATE", [
          [
            "current_task_id",
            clipped.has("state.currentTaskId")
              ? `${oneLine(JSON.stringify(state.currentTaskId), 100)} (${length("state.currentTaskId", "")} chars)`
              : JSON.stringify(state.currentTaskId),
          ],
          ["hooks", JSON.stringify(state.hooks)],
          ...Object.entries(state.fields).map(([k, v]): [string, string] => {
            const c = clipped.get(`state.fields.${k}`);
            return [
              `field.${k}`,
              c ? `${oneLine(c.preview, 100)} (${c.length} chars of JSON)` : oneLine(JSON.stringify(v), 100),
            ];
          }),
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
