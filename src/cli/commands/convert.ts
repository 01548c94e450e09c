/**
 * `dumplings convert --from SPEC --to SPEC [--overwrite]`: copy every session
 * from one backend to another, then read each copy back from the target and
 * compare it with the source. Any difference is reported with its path and
 * the command exits 5.
 *
 * A key the target already holds is refused before anything is copied
 * (`KEY_EXISTS`, exit 1, the keys listed), as `import` does, unless `--overwrite`; then the
 * replaced sessions are reported as replaced, by key, never counted as new
 * copies. Where the target offers revisions, a new key is written
 * create-only, so a session another process creates meanwhile is not
 * overwritten either.
 *
 * SPEC: any form of `spec.ts` (`file:DIR`, `sqlite:PATH`, `postgres://…`,
 * `redis://…`, `memory:`) or a registered backend name.
 *
 * @module
 */
import { Command } from "commander";
import { closeBackend, listKeysSorted, loadRaw, openSpec } from "../backend.js";
import { firstDifference } from "../compare.js";
import { ExitCode, errorLine, KeyExistsError, UsageError, VerifyError } from "../errors.js";
import { printJson } from "../output.js";
import { Progress } from "../progress.js";
import { SESSION_KINDS, specForms } from "../spec.js";

/** Options of `dumplings convert`. */
interface ConvertOptions {
  from: string;
  to: string;
  overwrite?: boolean;
  json?: boolean;
  quiet?: boolean;
}

/**
 * Builds the `convert` command.
 *
 * `--json` prints `{ from, to, copied, created, overwritten: [key], verified, messages, mismatches: [{ key, path }] }`.
 *
 * @returns the commander command
 * @example
 * dumplings convert --from file:./.dumplingsAI_sessions --to sqlite:./sessions.db
 */
export function convertCommand(): Command {
  return new Command("convert")
    .description("copy every session between two backends and verify each copy")
    .requiredOption("--from <spec>", `source: ${specForms(SESSION_KINDS, true)}`)
    .requiredOption("--to <spec>", "target, in the same forms")
    .option("--overwrite", "replace sessions the target already holds (default: refuse them, copy nothing)")
    .option("--json", "print JSON")
    .option("-q, --quiet", "no progress on stderr")
    .action(async (options: ConvertOptions) => {
      if (options.from === options.to) throw new UsageError("--from and --to name the same backend");
      const source = await openSpec(options.from, { mustExist: true }, "--from");
      let target: Awaited<ReturnType<typeof openSpec>> | undefined;
      try {
        target = await openSpec(options.to, {}, "--to");
        const keys = await listKeysSorted(source.backend);
        const existing = new Set(await target.backend.listKeys());
        const clashes = keys.filter((k) => existing.has(k));
        if (clashes.length > 0 && !options.overwrite) {
          throw new KeyExistsError(clashes[0] ?? "", options.from, { target: target.label, keys: clashes });
        }
        const progress = new Progress("convert", keys.length, { silent: options.quiet === true });
        const mismatches: { key: string; path: string }[] = [];
        const overwritten: string[] = [];
        let messages = 0;
        for (const key of keys) {
          const state = await loadRaw(source.backend, key, source.label);
          const replaces = existing.has(key);
          if (!replaces && typeof target.backend.write === "function") {
            // create-only: a session created in the target since the check above is refused (ConflictError), not replaced
            await target.backend.write(key, state, { expectedRevision: null });
          } else {
            await target.backend.save(key, state);
          }
          if (replaces) overwritten.push(key);
          const copy = await loadRaw(target.backend, key, target.label);
          const path = firstDifference(state, copy);
          if (path !== undefined) mismatches.push({ key, path });
          messages += state.history.length;
          progress.tick(key, path !== undefined ? `DIFFERS at ${path}` : replaces ? "replaced" : "ok");
        }
        progress.done();
        const created = keys.length - overwritten.length;
        const createdOk = keys.filter((k) => !existing.has(k) && !mismatches.some((m) => m.key === k)).length;
        const failure = mismatches.length > 0 ? new VerifyError(mismatches, keys.length) : undefined;
        if (options.json) {
          printJson({
            from: source.label,
            to: target.label,
            copied: keys.length,
            created,
            overwritten,
            verified: keys.length - mismatches.length,
            messages,
            mismatches,
            ...(failure ? { error: { code: failure.code, message: failure.message, exitCode: ExitCode.verify } } : {}),
          });
          if (failure) {
            // one JSON document on stdout: the report carries the error; the usual line goes to stderr
            process.stderr.write(`${errorLine(failure)}\n`);
            process.exitCode = ExitCode.verify;
          }
          return;
        }
        {
          const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? "" : "s"}`;
          const replaced =
            overwritten.length === 0
              ? ""
              : `; replaced ${plural(overwritten.length, "existing session")} of the target (--overwrite): ${overwritten.slice(0, 10).join(", ")}${overwritten.length > 10 ? ", …" : ""}`;
          process.stdout.write(
            `copied ${plural(keys.length, "session")} (${messages} messages) from ${source.label} to ${target.label}; ${createdOk} of ${created} new verified identical${replaced}\n`,
          );
        }
        if (failure) throw failure;
      } finally {
        await closeBackend(source.backend);
        if (target) await closeBackend(target.backend);
      }
    });
}
