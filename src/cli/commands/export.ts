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

import { createReadStream, statSync } from "node:fs";
import path from "node:path";
import { pipeline } from "node:stream/promises";
import { Command } from "commander";
import { closeBackend, openBackendAsync } from "../../ops/backend.js";
import { UsageError } from "../../ops/errors.js";
import { exportSession, exportToTemp } from "../../ops/export.js";
import { withBackendOptions } from "../backend.js";

/** Options of `dumplings export`. */
interface ExportOptions {
  backend?: string;
  dir?: string;
  db?: string;
  output?: string;
  gzip?: boolean;
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
