/**
 * `dumplings import FILE…`: store sessions from files. `.duas`/`.duas.gz`
 * files are stored as they are; OpenAI-format JSONL (one chat message per
 * line) and JSON message arrays become a new session per file, built as a
 * `BaseAgent` (or an `AnthropicAgent` for `*.anthropic.jsonl` /
 * `--protocol anthropic`) and saved with `saveState`. The key is the file
 * stem unless `--key` is given (one file only). `import - --key K` reads one
 * session from stdin (its kind recognised from the content).
 *
 * Every file is read and checked before anything is written, so a typo in
 * the third file does not leave the first two imported; an existing key is
 * refused unless `--overwrite`. A `.duas` file's config is checked as
 * `saveState` checks one: a credential-looking value is a `CredentialError`.
 *
 * @module
 */
import { Command, InvalidArgumentError } from "commander";
import { validateKey } from "../../backends/keys.js";
import type { Protocol } from "../../core/messages.js";
import { closeBackend, openBackendAsync } from "../../ops/backend.js";
import { KeyExistsError, UsageError } from "../../ops/errors.js";
import { countToolCalls } from "../../ops/stats.js";
import { assertNoCredentials } from "../../persistence/credentials.js";
import { withBackendOptions } from "../backend.js";
import { type ImportInput, readImportInput, STDIN } from "../inputs.js";
import { printJson } from "../output.js";
import { Progress } from "../progress.js";
import { renderTable } from "../table.js";

/** Options of `dumplings import`. */
interface ImportOptions {
  backend?: string;
  dir?: string;
  db?: string;
  key?: string;
  name?: string;
  protocol?: Protocol;
  overwrite?: boolean;
  json?: boolean;
  quiet?: boolean;
}

function parseProtocol(value: string): Protocol {
  if (value !== "openai" && value !== "anthropic") {
    throw new InvalidArgumentError(`expected openai or anthropic, got ${JSON.stringify(value)}`);
  }
  return value;
}

/** One imported session, as reported by `import --json`. */
export interface ImportedSession {
  file: string;
  key: string;
  kind: ImportInput["kind"];
  protocol: Protocol;
  messages: number;
  toolCalls: number;
}

/**
 * Builds the `import` command.
 *
 * `--json` prints `{ backend, imported: [{ file, key, kind, protocol, messages, toolCalls }] }`.
 *
 * @returns the commander command
 * @example
 * dumplings import runs/*.jsonl --backend sqlite
 * dumplings import chat.json --key support-42 --name support
 */
export function importCommand(): Command {
  return withBackendOptions(new Command("import"))
    .description("import .duas, .duas.gz, OpenAI-format JSONL or JSON message arrays (one session per file)")
    .argument("<files...>", "input files, or - to read one session from stdin (with --key)")
    .option("--key <key>", "session key (one input file only; default: the file stem)")
    .option("--name <name>", "agent name of sessions built from JSONL/JSON (default: the key)")
    .option("--protocol <protocol>", "message protocol of JSONL/JSON inputs: openai or anthropic", parseProtocol)
    .option("--overwrite", "replace sessions that already exist")
    .option("--json", "print JSON")
    .option("-q, --quiet", "no progress on stderr")
    .action(async (files: string[], options: ImportOptions) => {
      if (options.key !== undefined && files.length > 1) {
        throw new UsageError(`--key names one session but ${files.length} files were given; import them one by one`);
      }
      if (files.includes(STDIN) && (files.length > 1 || options.key === undefined)) {
        throw new UsageError("import - reads one session from stdin: give it alone, with --key <key>");
      }
      const inputs: { input: ImportInput; key: string }[] = [];
      const byKey = new Map<string, string>();
      for (const file of files) {
        const input = await readImportInput(file, { protocol: options.protocol });
        const key = validateKey(options.key ?? input.stem);
        const other = byKey.get(key);
        if (other !== undefined) {
          throw new UsageError(
            `${JSON.stringify(other)} and ${JSON.stringify(file)} would both be stored as ${JSON.stringify(key)}`,
          );
        }
        byKey.set(key, file);
        // a .duas file is stored as it is: checked here as saveState checks a config (nothing written yet)
        if (input.kind === "duas") assertNoCredentials(input.state.config);
        inputs.push({ input, key });
      }
      const { backend, label } = await openBackendAsync(options);
      try {
        if (!options.overwrite) {
          const existing = new Set(await backend.listKeys());
          for (const { input, key } of inputs) if (existing.has(key)) throw new KeyExistsError(key, input.file);
        }
        // The agent layer (and the AI SDK below it) loads only when a JSONL/JSON input needs it.
        const needsAgent = inputs.some(({ input }) => input.kind !== "duas");
        const { AnthropicAgent } = needsAgent
          ? await import("../../agent/anthropic-agent.js")
          : { AnthropicAgent: undefined };
        const { BaseAgent } = needsAgent ? await import("../../agent/base-agent.js") : { BaseAgent: undefined };
        const { saveState } = await import("../../persistence/api.js");
        const progress = new Progress("import", inputs.length, { silent: options.quiet === true });
        const imported: ImportedSession[] = [];
        for (const { input, key } of inputs) {
          if (input.kind === "duas") {
            await backend.save(key, input.state);
            imported.push({
              file: input.file,
              key,
              kind: input.kind,
              protocol: input.state.meta.protocol,
              messages: input.state.history.length,
              toolCalls: countToolCalls(input.state.history),
            });
          } else {
            const name = options.name ?? key;
            if (!AnthropicAgent || !BaseAgent) throw new Error("agent classes not loaded");
            const agent =
              input.protocol === "anthropic"
                ? new AnthropicAgent({ name, history: input.messages })
                : new BaseAgent({ name, history: input.messages });
            // --overwrite was checked above: without it an existing key was refused; with it, replace on purpose.
            await saveState(agent, key, { backend, force: options.overwrite === true });
            imported.push({
              file: input.file,
              key,
              kind: input.kind,
              protocol: input.protocol,
              messages: input.messages.length,
              toolCalls: countToolCalls(input.messages),
            });
          }
          progress.tick(input.file);
        }
        progress.done();
        if (options.json) {
          printJson({ backend: label, imported });
          return;
        }
        process.stdout.write(
          `${renderTable(
            [
              { header: "file" },
              { header: "key" },
              { header: "protocol" },
              { header: "messages", align: "right" },
              { header: "tool calls", align: "right" },
            ],
            imported.map((s) => [s.file, s.key, s.protocol, String(s.messages), String(s.toolCalls)]),
          )}\nimported ${imported.length} session${imported.length === 1 ? "" : "s"} into ${label}\n`,
        );
      } finally {
        await closeBackend(backend);
      }
    });
}
