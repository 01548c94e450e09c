/**
 * `dumplings ls`: list the stored sessions of a backend, marking each one
 * that cannot be read.
 *
 * Every form reads each session's header (only the header, when the backend
 * offers `readHeader`); `--verify` reads each session whole through the
 * verified read path (history lines, `message_count`, `history_crc32`), so a
 * session that `show`, `export` or `convert` would refuse is marked too. An
 * unreadable session is listed with its error and named on stderr, the others
 * are listed as usual, and the command exits 6 (`SESSIONS_UNREADABLE`); a
 * store-wide failure (server down) stops it as any error does.
 *
 * @module
 */
import { Command } from "commander";
import { closeBackend, openBackendAsync } from "../../ops/backend.js";
import {
  ExitCode,
  errorLine,
  isItemFault,
  SessionsUnreadableError,
  type UnreadableSession,
  unreadableLine,
  unreadableSession,
} from "../../ops/errors.js";
import { listKeysSorted, mapOrdered, readHeaderOf, verifySession } from "../../ops/sessions.js";
import { withBackendOptions } from "../backend.js";
import { printJson } from "../output.js";

/** Options of `dumplings ls`. */
interface LsOptions {
  backend?: string;
  dir?: string;
  db?: string;
  long?: boolean;
  json?: boolean;
  verify?: boolean;
}

/** Sessions read at once (file reads and server round trips overlap; the order of the listing is kept). */
const READ_CONCURRENCY = 8;

/** One listed session: its header fields, or why it cannot be read. */
type Listed =
  | { key: string; name: string; protocol: string; messages: number; savedAt: string; unreadable?: undefined }
  | { key: string; unreadable: UnreadableSession };

/**
 * Builds the `ls` command.
 *
 * Output: one key per line; `--long` adds name, protocol, message count and
 * saved_at; `--json` prints `{ backend, count, unreadable, sessions: [{ key, name?, protocol?, messages?,
 * savedAt? }] }` (the header fields with `--long`). An unreadable session's entry has
 * `error` (`"<message> (<CODE>)"`, as before) and `readError: { code, message, file?, line? }`;
 * `unreadable` counts them, and the document then carries `error: { code: "SESSIONS_UNREADABLE",
 * message, exitCode: 6 }`. The text forms list the key (`--long`: marked `UNREADABLE (<CODE>)`) and
 * print the error on stderr.
 *
 * @returns the commander command
 * @example
 * dumplings ls --backend sqlite --db ./sessions.db --long
 * dumplings ls --verify --json
 */
export function lsCommand(): Command {
  return withBackendOptions(new Command("ls"))
    .description("list stored sessions (each one that cannot be read is marked, and the command exits 6)")
    .option("-l, --long", "also show name, protocol, message count and saved_at of each session")
    .option("--verify", "read each session whole (every message, its checksums), not only its header")
    .option("--json", "print JSON")
    .action(async (options: LsOptions) => {
      const { backend, label } = await openBackendAsync(options, process.env, { mustExist: true });
      try {
        const keys = await listKeysSorted(backend);
        const read = options.verify ? verifySession : readHeaderOf;
        const listed = await mapOrdered(keys, READ_CONCURRENCY, async (key): Promise<Listed> => {
          try {
            const { meta } = await read(backend, key, label);
            return {
              key,
              name: meta.agentName,
              protocol: meta.protocol,
              messages: meta.messageCount,
              savedAt: meta.savedAt,
            };
          } catch (e) {
            // One unreadable session is listed with its error, not allowed to hide all the others.
            if (!isItemFault(e)) throw e;
            return { key, unreadable: unreadableSession(key, e) };
          }
        });
        const unreadable = listed.flatMap((s) => (s.unreadable ? [s.unreadable] : []));
        const failure =
          unreadable.length > 0
            ? new SessionsUnreadableError(
                unreadable,
                keys.length,
                label,
                "cannot be read",
                "every session is still listed",
              )
            : undefined;
        if (failure) {
          // The listing is printed whole (below); stderr names each unreadable session and the exit code says so.
          process.exitCode = ExitCode.partial;
          for (const s of unreadable) process.stderr.write(`${unreadableLine(s)}\n`);
          process.stderr.write(`${errorLine(failure)}\n`);
        }
        if (options.json) {
          printJson({
            backend: label,
            count: keys.length,
            unreadable: unreadable.length,
            sessions: listed.map((s) => {
              if (s.unreadable) {
                const { key: _, ...readError } = s.unreadable;
                return { key: s.key, error: `${readError.message} (${readError.code})`, readError };
              }
              return options.long
                ? { key: s.key, name: s.name, protocol: s.protocol, messages: s.messages, savedAt: s.savedAt }
                : { key: s.key };
            }),
            ...(failure ? { error: { code: failure.code, message: failure.message, exitCode: ExitCode.partial } } : {}),
          });
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
        // string-width is loaded only for the table (it takes tens of milliseconds)
        const { renderTable } = await import("../table.js");
        const rows = listed.map((s) =>
          s.unreadable
            ? [s.key, `UNREADABLE (${s.unreadable.code})`, "-", "-", "-"]
            : [s.key, s.name, s.protocol, String(s.messages), s.savedAt],
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
