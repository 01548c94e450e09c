/**
 * `dumplings convert --from SPEC --to SPEC [--overwrite]`: copy every session
 * from one backend to another, then read each copy back from the target and
 * compare it with the source. Any difference is reported with its path and
 * the command exits 5.
 *
 * A source session that cannot be read (a truncated or hand-edited `.duas`
 * file, a malformed row), or that the target refuses, is not converted:
 * nothing is written for it in the target, it is named on stderr with its
 * error (a `FormatError`'s file and line), every other session is still
 * copied and verified, the summary counts both, and the command exits 6
 * (`SESSIONS_UNREADABLE`; 5 when a copy also differs). A failure of a whole
 * store (server down) stops the command as any error does.
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
import type { AgentState } from "../../core/state.js";
import { closeBackend, openSpec } from "../../ops/backend.js";
import {
  ExitCode,
  errorLine,
  isItemFault,
  KeyExistsError,
  SessionsUnreadableError,
  type UnreadableSession,
  UsageError,
  unreadableLine,
  unreadableSession,
  VerifyError,
} from "../../ops/errors.js";
import { listKeysSorted, loadRaw } from "../../ops/sessions.js";
import { SESSION_KINDS, specForms } from "../../ops/spec.js";
import { firstDifference } from "../compare.js";
import { printJson } from "../output.js";
import { Progress } from "../progress.js";

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
 * `--json` prints `{ from, to, copied, created, overwritten: [key], verified, messages, mismatches: [{ key, path }],
 * failed: [{ key, code, message, file?, line?, side: "source" | "target" }] }`, plus
 * `error: { code, message, exitCode }` when a copy differs (5) or a session was not converted (6).
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
        // Sessions not converted: unreadable in the source, or refused by the target (one key only).
        const failed: (UnreadableSession & { side: "source" | "target" })[] = [];
        let messages = 0;
        for (const key of keys) {
          let state: AgentState;
          try {
            state = await loadRaw(source.backend, key, source.label);
          } catch (e) {
            // One bad session is reported and skipped: the others are still copied (a store-wide failure stops).
            if (!isItemFault(e)) throw e;
            failed.push({ ...unreadableSession(key, e), side: "source" });
            progress.log(unreadableLine(unreadableSession(key, e), "convert"));
            progress.tick(key, "NOT CONVERTED (unreadable in the source)");
            continue;
          }
          const replaces = existing.has(key);
          try {
            if (!replaces && typeof target.backend.write === "function") {
              // create-only: a session created in the target since the check above is refused (ConflictError), not replaced
              await target.backend.write(key, state, { expectedRevision: null });
            } else {
              await target.backend.save(key, state);
            }
          } catch (e) {
            // A session the target refuses (an invalid state, a key created there meanwhile) was not written.
            if (!isItemFault(e)) throw e;
            failed.push({ ...unreadableSession(key, e), side: "target" });
            progress.log(unreadableLine(unreadableSession(key, e), "convert"));
            progress.tick(key, "NOT CONVERTED (refused by the target)");
            continue;
          }
          if (replaces) overwritten.push(key);
          const copy = await loadRaw(target.backend, key, target.label);
          const path = firstDifference(state, copy);
          if (path !== undefined) mismatches.push({ key, path });
          messages += state.history.length;
          progress.tick(key, path !== undefined ? `DIFFERS at ${path}` : replaces ? "replaced" : "ok");
        }
        progress.done();
        const copied = keys.length - failed.length;
        const created = copied - overwritten.length;
        const createdOk = created - mismatches.filter((m) => !existing.has(m.key)).length;
        const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? "" : "s"}`;
        const partial =
          failed.length > 0
            ? new SessionsUnreadableError(
                failed,
                keys.length,
                source.label,
                "were not converted",
                `nothing was written for ${failed.length === 1 ? "it" : "them"} in ${target.label}; ${copied === 0 ? "no other session was" : `the ${plural(copied, "other session")} ${copied === 1 ? "was" : "were"}`} copied`,
              )
            : undefined;
        const verify = mismatches.length > 0 ? new VerifyError(mismatches, copied) : undefined;
        // A copy that differs is the worse news: it sets the exit code when both happen (both lines are printed).
        const failure = verify ?? partial;
        const exitCode = verify ? ExitCode.verify : ExitCode.partial;
        if (options.json) {
          printJson({
            from: source.label,
            to: target.label,
            copied,
            created,
            overwritten,
            verified: copied - mismatches.length,
            messages,
            mismatches,
            failed,
            ...(failure ? { error: { code: failure.code, message: failure.message, exitCode } } : {}),
          });
          // one JSON document on stdout: the report carries the error; the usual lines go to stderr
          if (partial && verify) process.stderr.write(`${errorLine(partial)}\n`);
          if (failure) {
            process.stderr.write(`${errorLine(failure)}\n`);
            process.exitCode = exitCode;
          }
          return;
        }
        {
          const replaced =
            overwritten.length === 0
              ? ""
              : `; replaced ${plural(overwritten.length, "existing session")} of the target (--overwrite): ${overwritten.slice(0, 10).join(", ")}${overwritten.length > 10 ? ", …" : ""}`;
          const notConverted =
            failed.length === 0
              ? ""
              : `; ${failed.length} not converted: ${failed
                  .slice(0, 10)
                  .map((f) => f.key)
                  .join(", ")}${failed.length > 10 ? ", …" : ""}`;
          const count =
            failed.length === 0 ? plural(keys.length, "session") : `${copied} of ${plural(keys.length, "session")}`;
          process.stdout.write(
            `copied ${count} (${messages} messages) from ${source.label} to ${target.label}; ${createdOk} of ${created} new verified identical${replaced}${notConverted}\n`,
          );
        }
        if (partial && verify) process.stderr.write(`${errorLine(partial)}\n`);
        if (failure) throw failure;
      } finally {
        await closeBackend(source.backend);
        if (target) await closeBackend(target.backend);
      }
    });
}
