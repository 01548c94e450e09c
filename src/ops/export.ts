/**
 * A stored session as `.duas` text, for `dumplings export` and the web
 * inspector's download: the history is streamed in batches, so the text is
 * never built in memory as a whole; a file is written to a temporary name,
 * fsync'ed and renamed into place, so a failed export never leaves a partial
 * file. Every message is read through the backend's own verified read path,
 * and header and history are one saved state (see `readSession`: a save
 * landing mid-read starts the read again).
 *
 * @module
 */
import { createWriteStream } from "node:fs";
import { mkdtemp, open, rename, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGzip } from "node:zlib";
import type { StateBackend } from "../backends/types.js";
import { encodeHistoryLines } from "../core/codec/encode.js";
import { encodeHeader } from "../core/codec/header.js";
import { FormatError } from "../core/errors.js";
import type { Message } from "../core/messages.js";
import { readSession, type SessionView } from "./sessions.js";

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
