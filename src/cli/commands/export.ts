/**
 * `dumplings export KEY [-o FILE|-]`: write a stored session as `.duas` text
 * (gzip-compressed for a `.duas.gz` file name or `--gzip`) to a file or to
 * stdout. The history is streamed in batches, so the text is never built in
 * memory as a whole; a file is written to a temporary name, fsync'ed and
 * renamed into place, so a failed export never leaves a partial file. Every
 * message is read through the backend's own verified read path (for `.duas`
 * files: strict UTF-8, the final newline, `message_count` and
 * `history_crc32`, as `loadState`). Header and history are one saved state
 * (see `readSession`: a save landing mid-read starts the read again). To
 * stdout, where a partial output cannot be taken back, the export is written
 * and verified in a temporary file first, then copied out, so a failed or
 * interrupted read never reaches stdout.
 *
 * @module
 */

import { createReadStream, createWriteStream, statSync } from "node:fs";
import { mkdtemp, open, rename, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGzip } from "node:zlib";
import { Command } from "commander";
import type { StateBackend } from "../../backends/types.js";
import { encodeHistoryLines } from "../../core/codec/encode.js";
import { encodeHeader } from "../../core/codec/header.js";
import { FormatError } from "../../core/errors.js";
import type { Message } from "../../core/messages.js";
import { closeBackend, openBackendAsync, readSession, type SessionView, withBackendOptions } from "../backend.js";
import { UsageError } from "../errors.js";

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
 * Writes the stored session `key` as `.duas` (gzip-compressed with `gzip`) to `target`: to a temporary
 * name beside it, fsync'ed, then renamed into place, so a failed export never leaves a partial file.
 * Header and history are one saved state; a save that lands mid-read starts the read again.
 *
 * @param backend - the backend
 * @param key - the session key
 * @param label - backend label for messages
 * @param target - the file to write (replaced when it exists)
 * @param gzip - gzip-compress the output
 * @throws {StateNotFoundError} / {FormatError} / {InvalidKeyError} as the read path; nothing is left at `target`
 */
export async function exportSession(
  backend: StateBackend,
  key: string,
  label: string | undefined,
  target: string,
  gzip: boolean,
): Promise<void> {
  const temp = path.join(path.dirname(target), `.${path.basename(target)}.${process.pid}.tmp`);
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
}

/**
 * Exports `key` to a new temporary file (see {@link exportSession}), complete and verified, for a
 * reader that cannot take back what it already sent (stdout, an HTTP response).
 *
 * @returns `file`, and `remove()` to delete it (and its folder) once read
 * @throws as {@link exportSession}; then nothing is left behind
 */
export async function exportToTemp(
  backend: StateBackend,
  key: string,
  label: string | undefined,
  gzip: boolean,
): Promise<{ file: string; remove: () => Promise<void> }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "dumplings-export-"));
  const remove = () => rm(dir, { recursive: true, force: true });
  const file = path.join(dir, gzip ? "session.duas.gz" : "session.duas");
  try {
    await exportSession(backend, key, label, file, gzip);
  } catch (e) {
    await remove();
    throw e;
  }
  return { file, remove };
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
          const { file, remove } = await exportToTemp(backend, key, label, gzip);
          try {
            await pipeline(createReadStream(file), process.stdout, { end: false });
          } finally {
            await remove();
          }
          return;
        }
        const out = path.resolve(options.output);
        const dir = path.dirname(out);
        if (!statSync(dir, { throwIfNoEntry: false })?.isDirectory()) {
          throw new UsageError(
            `cannot write ${options.output}: the directory ${dir} does not exist (nothing was written)`,
          );
        }
        await exportSession(backend, key, label, out, gzip);
        process.stderr.write(`exported ${key} to ${options.output}\n`);
      } finally {
        await closeBackend(backend);
      }
    });
}
