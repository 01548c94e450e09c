/**
 * `dumplings export KEY [-o FILE|-]`: write a stored session as `.duas` text
 * (gzip-compressed for a `.duas.gz` file name or `--gzip`) to a file or to
 * stdout. The history is streamed in batches, so the text is never built in
 * memory as a whole; a file is written to a temporary name, fsync'ed and
 * renamed into place, so a failed export never leaves a partial file. Every
 * message is read through the backend's own verified read path (for `.duas`
 * files: strict UTF-8, the final newline, `message_count` and
 * `history_sha256`, as `loadState`); to stdout, where a partial output cannot
 * be taken back, the whole history is read and verified once before the
 * first byte is written.
 *
 * @module
 */

import { createWriteStream } from "node:fs";
import { open, rename, rm } from "node:fs/promises";
import path from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGzip } from "node:zlib";
import { Command } from "commander";
import { encodeHeader, encodeHistoryLines } from "../../core/codec.js";
import { FormatError } from "../../core/errors.js";
import type { Message } from "../../core/messages.js";
import {
  closeBackend,
  openBackendAsync,
  openSession,
  readSession,
  type SessionView,
  withBackendOptions,
} from "../backend.js";

/** Options of `dumplings export`. */
interface ExportOptions {
  backend?: string;
  dir?: string;
  db?: string;
  output?: string;
  gzip?: boolean;
}

/** Messages encoded per chunk of output. */
const BATCH = 256;

/**
 * The `.duas` text of a session, chunk by chunk.
 *
 * @param session - the opened session
 * @param key - its key (for the error message)
 * @returns chunks of UTF-8 text: the header, then history lines
 * @throws {FormatError} when the stored history does not hold `message_count` messages
 */
export async function* duasChunks(session: SessionView, key: string): AsyncGenerator<string> {
  const { meta } = session.header;
  yield encodeHeader({ ...session.header, history: [] }, meta.messageCount);
  let index = 0;
  let batch: Message[] = [];
  for await (const message of session.history) {
    batch.push(message);
    if (batch.length >= BATCH) {
      yield encodeHistoryLines(batch, meta.protocol, index);
      index += batch.length;
      batch = [];
    }
  }
  if (batch.length > 0) yield encodeHistoryLines(batch, meta.protocol, index);
  index += batch.length;
  if (index !== meta.messageCount) {
    throw new FormatError(
      `stored session ${JSON.stringify(key)} says message_count = ${meta.messageCount} but its history holds ${index} messages`,
    );
  }
}

/**
 * Builds the `export` command.
 *
 * @returns the commander command
 * @example
 * dumplings export weather-1 -o weather-1.duas.gz
 */
export function exportCommand(): Command {
  return withBackendOptions(new Command("export"))
    .description("write a stored session as .duas (or .duas.gz) to a file or stdout")
    .argument("<key>", "session key")
    .option("-o, --output <file>", "output file (.duas, or .duas.gz to compress); stdout when omitted or -")
    .option("--gzip", "gzip-compress the output (implied by a .gz output file name)")
    .action(async (key: string, options: ExportOptions) => {
      const { backend, label } = await openBackendAsync(options, process.env, { mustExist: true });
      try {
        const gzip = options.gzip === true || (options.output?.toLowerCase().endsWith(".gz") ?? false);
        if (options.output === undefined || options.output === "-") {
          // Nothing reaches stdout before the stored history has passed every check of the read path; the
          // output pass then opens the same saved state (a save in between: both passes run again).
          const session = await readSession(backend, key, label, async (check) => {
            let n = 0;
            for await (const _ of check.history) n++;
            if (n !== check.header.meta.messageCount) {
              throw new FormatError(
                `stored session ${JSON.stringify(key)} says message_count = ${check.header.meta.messageCount} but its history holds ${n} messages`,
              );
            }
            return check.revision === undefined
              ? openSession(backend, key, label)
              : openSession(backend, key, label, { revision: check.revision });
          });
          const source = Readable.from(duasChunks(session, key));
          if (gzip) await pipeline(source, createGzip(), process.stdout, { end: false });
          else await pipeline(source, process.stdout, { end: false });
          return;
        }
        const target = path.resolve(options.output);
        const temp = path.join(path.dirname(target), `.${path.basename(target)}.${process.pid}.tmp`);
        // A save that replaces the history mid-read (paged stores) starts the export again on a new temp file.
        await readSession(backend, key, label, async (session) => {
          const source = Readable.from(duasChunks(session, key));
          try {
            if (gzip) await pipeline(source, createGzip(), createWriteStream(temp, { flags: "wx" }));
            else await pipeline(source, createWriteStream(temp, { flags: "wx" }));
            const handle = await open(temp, "r");
            try {
              await handle.sync();
            } finally {
              await handle.close();
            }
            await rename(temp, target);
          } catch (error) {
            await rm(temp, { force: true });
            throw error;
          }
        });
        process.stderr.write(`exported ${key} to ${options.output}\n`);
      } finally {
        await closeBackend(backend);
      }
    });
}
