/**
 * The shared `--backend`, `--dir` and `--db` options of the storage commands
 * (what they select is opened by `ops/backend.ts`, and read by
 * `ops/sessions.ts`).
 *
 * @module
 */
import type { Command } from "commander";
import { SESSION_KINDS, specForms } from "../ops/spec.js";

/**
 * Adds `--backend`, `--dir` and `--db` to a command.
 *
 * @param command - the commander command
 * @returns the same command, for chaining
 */
export function withBackendOptions(command: Command): Command {
  return command
    .option("--backend <spec>", `${specForms(SESSION_KINDS, true)} (env DUMPLINGS_PERSISTENCE_BACKEND; default file)`)
    .option("--dir <path>", "directory of the file backend (env DUMPLINGS_PERSISTENCE_DIR)")
    .option("--db <path>", "database file of the SQLite backend (env DUMPLINGS_PERSISTENCE_DB)");
}
