/**
 * Running the `dumplings` program: one error line and a class-specific exit
 * code for every failure (usage 2, not found 3, format 4, verification 5,
 * some sessions unreadable 6, other 1; see `errors.ts`), no stack trace unless `DUMPLINGS_DEBUG=1`.
 *
 * Commander's own errors (unknown option, missing argument) are caught the
 * same way, so every error a user sees has the form
 * `dumplings: <message> (<CODE>)`.
 *
 * @module
 */
import { type Command, CommanderError } from "commander";
import { ExitCode, errorLine, errorParts, exitCodeFor } from "../ops/errors.js";

/**
 * Makes commander throw instead of exiting, on a command and all its
 * subcommands (commands added with `addCommand` do not inherit it).
 *
 * @param command - the root command
 */
function throwInsteadOfExit(command: Command): void {
  command.exitOverride();
  command.configureOutput({ outputError: () => {} });
  for (const sub of command.commands) throwInsteadOfExit(sub);
}

/**
 * Parses `argv` and runs the selected command, then sets `process.exitCode`.
 *
 * @param program - the root `dumplings` command with its subcommands added
 * @param argv - the process arguments @default process.argv
 * @returns the exit code (also stored in `process.exitCode`)
 * @example
 * const program = new Command("dumplings"); program.addCommand(lsCommand());
 * await runProgram(program);
 */
export async function runProgram(program: Command, argv: readonly string[] = process.argv): Promise<number> {
  throwInsteadOfExit(program);
  // A reader that stops early (`dumplings export k | head`) is not an error: stop quietly, as Unix tools do.
  process.stdout.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code === "EPIPE") process.exit(0);
    process.stderr.write(`${errorLine(error)}\n`);
    process.exit(1);
  });
  let code: number = ExitCode.ok;
  try {
    await program.parseAsync([...argv]);
    // A command that printed its output but met a problem (e.g. `ls` with an unreadable session) sets its own code.
    if (typeof process.exitCode === "number") code = process.exitCode;
  } catch (error) {
    code = report(error, { json: wantsJson(argv) });
  }
  process.exitCode = code;
  return code;
}

/** Whether the command line asks for JSON output (`--json` before any `--`). */
function wantsJson(argv: readonly string[]): boolean {
  const end = argv.indexOf("--");
  return (end < 0 ? argv : argv.slice(0, end)).includes("--json");
}

/**
 * Prints the one line for an error on stderr (and its stack under `DUMPLINGS_DEBUG=1`);
 * with `json`, also `{ "error": { "code", "message", "exitCode" } }` on stdout, so a
 * script that asked for `--json` always reads JSON.
 *
 * @param error - anything thrown while running a command
 * @param options - `json`: the command line had `--json`
 * @returns the exit code for it
 */
export function report(error: unknown, options: { json?: boolean } = {}): number {
  if (error instanceof CommanderError) {
    if (error.exitCode === 0) return ExitCode.ok; // --help, --version
    const message = error.message
      .replace(/^error:\s*/i, "")
      .replace(/\s*\r?\n\s*/g, " ")
      .trim();
    if (error.code === "commander.help" || error.code === "commander.helpDisplayed") return ExitCode.usage;
    process.stderr.write(`dumplings: ${message} (USAGE)\n`);
    if (options.json) printJsonError("USAGE", message, ExitCode.usage);
    return ExitCode.usage;
  }
  if ((error as NodeJS.ErrnoException)?.code === "EPIPE") return ExitCode.ok;
  process.stderr.write(`${errorLine(error)}\n`);
  if (options.json) {
    const { code, message } = errorParts(error);
    printJsonError(code ?? "ERROR", message, exitCodeFor(error));
  }
  if (process.env.DUMPLINGS_DEBUG === "1") {
    let e: unknown = error;
    while (e instanceof Error) {
      process.stderr.write(`${e.stack ?? e.message}\n`);
      e = e.cause;
      if (e !== undefined) process.stderr.write("caused by: ");
    }
  }
  return exitCodeFor(error);
}

function printJsonError(code: string, message: string, exitCode: number): void {
  process.stdout.write(`${JSON.stringify({ error: { code, message, exitCode } })}\n`);
}
