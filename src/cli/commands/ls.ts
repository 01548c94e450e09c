/**
 * `dumplings ls`: list the stored sessions of a backend.
 *
 * @module
 */
import { Command } from "commander";
import { DumplingsError } from "../../core/errors.js";
import { closeBackend, listKeysSorted, openBackendAsync, readHeaderOf, withBackendOptions } from "../backend.js";
import { printJson, renderTable } from "../output.js";

/** Options of `dumplings ls`. */
interface LsOptions {
  backend?: string;
  dir?: string;
  db?: string;
  long?: boolean;
  json?: boolean;
}

/**
 * Builds the `ls` command.
 *
 * Output: one key per line; `--long` adds name, protocol, message count and
 * saved_at (reading each session's header only, when the backend offers `readHeader`); `--json` prints
 * `{ backend, count, sessions: [{ key, name?, protocol?, messages?, savedAt? }] }`.
 *
 * @returns the commander command
 * @example
 * dumplings ls --backend sqlite --db ./sessions.db --long
 */
export function lsCommand(): Command {
  return withBackendOptions(new Command("ls"))
    .description("list stored sessions")
    .option("-l, --long", "also show name, protocol, message count and saved_at of each session")
    .option("--json", "print JSON")
    .action(async (options: LsOptions) => {
      const { backend, label } = await openBackendAsync(options, process.env, { mustExist: true });
      try {
        const keys = await listKeysSorted(backend);
        const sessions: Record<string, unknown>[] = [];
        let failed = 0;
        for (const key of keys) {
          if (!options.long) {
            sessions.push({ key });
            continue;
          }
          try {
            const { meta } = await readHeaderOf(backend, key, label);
            sessions.push({
              key,
              name: meta.agentName,
              protocol: meta.protocol,
              messages: meta.messageCount,
              savedAt: meta.savedAt,
            });
          } catch (e) {
            // One unreadable session is listed with its error, not allowed to hide all the others.
            if (!(e instanceof DumplingsError) || e.code === "BACKEND_ERROR") throw e;
            sessions.push({ key, error: `${e.message} (${e.code})` });
            failed++;
          }
        }
        if (failed > 0) process.exitCode = 4; // the listing is printed, but a session could not be read
        if (options.json) {
          printJson({ backend: label, count: keys.length, sessions });
          return;
        }
        if (keys.length === 0) {
          process.stderr.write(`no sessions in ${label}\n`);
          return;
        }
        if (!options.long) {
          process.stdout.write(`${keys.join("\n")}\n`);
          return;
        }
        const rows = sessions.map((s) =>
          s.error !== undefined
            ? [String(s.key), `unreadable: ${String(s.error)}`, "", "", ""]
            : [String(s.key), String(s.name), String(s.protocol), String(s.messages), String(s.savedAt)],
        );
        process.stdout.write(
          `${renderTable(
            [
              { header: "key" },
              { header: "name" },
              { header: "protocol" },
              { header: "messages", align: "right" },
              { header: "saved_at" },
            ],
            rows,
          )}\n`,
        );
      } finally {
        await closeBackend(backend);
      }
    });
}
