/**
 * `dumplings rm KEY…`: delete stored sessions.
 *
 * @module
 */
import { Command } from "commander";
import { validateKey } from "../../backends/keys.js";
import { isBackendNotFound } from "../../backends/not-found.js";
import { StateNotFoundError } from "../../core/errors.js";
import { closeBackend, openBackendAsync } from "../../ops/backend.js";
import { ExitCode, errorLine } from "../../ops/errors.js";
import { withBackendOptions } from "../backend.js";
import { printJson } from "../output.js";

/** Options of `dumplings rm`. */
interface RmOptions {
  backend?: string;
  dir?: string;
  db?: string;
  force?: boolean;
  json?: boolean;
}

/**
 * Builds the `rm` command. Every key is validated before anything is
 * deleted; a missing key is an error (exit 3) unless `--force`.
 *
 * @returns the commander command
 * @example
 * dumplings rm weather-1 --backend sqlite
 */
export function rmCommand(): Command {
  return withBackendOptions(new Command("rm"))
    .description("delete stored sessions")
    .argument("<keys...>", "session keys")
    .option("-f, --force", "do not fail when a key is not stored")
    .option("--json", "print JSON")
    .action(async (keys: string[], options: RmOptions) => {
      for (const key of keys) validateKey(key);
      const { backend, label } = await openBackendAsync(options, process.env, { mustExist: true });
      try {
        const deleted: string[] = [];
        const missing: string[] = [];
        for (const key of keys) {
          // a custom backend's own not-found error (ENOENT, FileNotFoundError) says nothing was stored, as false does
          const removed = await Promise.resolve()
            .then(() => backend.delete(key))
            .catch((e: unknown) => {
              if (isBackendNotFound(e)) return false;
              throw e;
            });
          if (removed) deleted.push(key);
          else missing.push(key);
        }
        const failure =
          missing.length > 0 && !options.force ? new StateNotFoundError(missing[0] ?? "", label) : undefined;
        if (options.json) {
          printJson({
            backend: label,
            deleted,
            missing,
            ...(failure
              ? { error: { code: failure.code, message: failure.message, exitCode: ExitCode.notFound } }
              : {}),
          });
          if (failure) {
            // one JSON document on stdout: the report carries the error; the usual line goes to stderr
            process.stderr.write(`${errorLine(failure)}\n`);
            process.exitCode = ExitCode.notFound;
          }
          return;
        }
        for (const key of deleted) process.stdout.write(`deleted ${key}\n`);
        if (failure) throw failure;
      } finally {
        await closeBackend(backend);
      }
    });
}
