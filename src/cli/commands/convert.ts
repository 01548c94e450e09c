/**
 * `dumplings convert --from SPEC --to SPEC`: copy every session from one
 * backend to another (overwriting same-named sessions in the target), then
 * read each copy back from the target and compare it with the source. Any
 * difference is reported with its path and the command exits 5.
 *
 * SPEC: `file:<dir>`, `sqlite:<db file>`, `memory:` or a registered backend name.
 *
 * @module
 */
import { Command } from "commander";
import { closeBackend, listKeysSorted, loadRaw, openSpec } from "../backend.js";
import { firstDifference } from "../compare.js";
import { UsageError, VerifyError } from "../errors.js";
import { printJson } from "../output.js";
import { Progress } from "../progress.js";

/** Options of `dumplings convert`. */
interface ConvertOptions {
  from: string;
  to: string;
  json?: boolean;
  quiet?: boolean;
}

/**
 * Builds the `convert` command.
 *
 * `--json` prints `{ from, to, copied, verified, messages, mismatches: [{ key, path }] }`.
 *
 * @returns the commander command
 * @example
 * dumplings convert --from file:./.dumplingsAI_sessions --to sqlite:./sessions.db
 */
export function convertCommand(): Command {
  return new Command("convert")
    .description("copy every session between two backends and verify each copy")
    .requiredOption("--from <spec>", "source: file:<dir>, sqlite:<db file> or a registered backend name")
    .requiredOption("--to <spec>", "target: file:<dir>, sqlite:<db file> or a registered backend name")
    .option("--json", "print JSON")
    .option("-q, --quiet", "no progress on stderr")
    .action(async (options: ConvertOptions) => {
      if (options.from === options.to) throw new UsageError("--from and --to name the same backend");
      const source = await openSpec(options.from, { mustExist: true });
      let target: Awaited<ReturnType<typeof openSpec>> | undefined;
      try {
        target = await openSpec(options.to);
        const keys = await listKeysSorted(source.backend);
        const progress = new Progress("convert", keys.length, { silent: options.quiet === true });
        const mismatches: { key: string; path: string }[] = [];
        let messages = 0;
        for (const key of keys) {
          const state = await loadRaw(source.backend, key, source.label);
          await target.backend.save(key, state);
          const copy = await loadRaw(target.backend, key, target.label);
          const path = firstDifference(state, copy);
          if (path !== undefined) mismatches.push({ key, path });
          messages += state.history.length;
          progress.tick(key, path === undefined ? "ok" : `DIFFERS at ${path}`);
        }
        progress.done();
        if (options.json) {
          printJson({
            from: source.label,
            to: target.label,
            copied: keys.length,
            verified: keys.length - mismatches.length,
            messages,
            mismatches,
          });
        } else {
          process.stdout.write(
            `copied ${keys.length} session${keys.length === 1 ? "" : "s"} (${messages} messages) from ${source.label} to ${target.label}; ${keys.length - mismatches.length} verified identical\n`,
          );
        }
        if (mismatches.length > 0) throw new VerifyError(mismatches, keys.length);
      } finally {
        await closeBackend(source.backend);
        if (target) await closeBackend(target.backend);
      }
    });
}
