/**
 * The `dumplings` commands as the root program knows them before one runs:
 * each one's name, the term and description the root help lists, and where
 * its module lives. `src/cli/index.ts` loads only the module of the command
 * on the command line (every command's module loads backends, zod, the AI SDK
 * or database drivers: loading all of them made every start, `--help`
 * included, take seconds); the others are listed from this table.
 * test/cli/startup.test.ts checks the table against the real commands.
 *
 * @module
 */
import { Command, Help } from "commander";

/** A command known by name until it runs. */
export interface LazyCommand {
  /** Its name on the command line. */
  name: string;
  /** What the root help lists it as (commander's subcommand term: `show [options] <key>`). */
  term: string;
  /** Its description. */
  description: string;
  /** Builds the real command (imports its module). */
  load(): Promise<Command>;
}

/** A durable-run command, built by `durableCommands()`. */
const durable = (name: string) => async () => {
  const command = (await import("./durable-commands.js")).durableCommands().find((c) => c.name() === name);
  if (!command) throw new Error(`durableCommands() has no command ${JSON.stringify(name)}`);
  return command;
};

/** Every command, in the order of the root help. */
export const COMMANDS: readonly LazyCommand[] = [
  {
    name: "ls",
    term: "ls [options]",
    description: "list stored sessions (each one that cannot be read is marked, and the command exits 6)",
    load: async () => (await import("./commands/ls.js")).lsCommand(),
  },
  {
    name: "show",
    term: "show [options] <key>",
    description: "show a stored session: meta, config, message counts, tool calls and the last messages",
    load: async () => (await import("./commands/show.js")).showCommand(),
  },
  {
    name: "export",
    term: "export [options] <key>",
    description: "write a stored session as .duas (or .duas.gz) to a file or stdout",
    load: async () => (await import("./commands/export.js")).exportCommand(),
  },
  {
    name: "edit",
    term: "edit [options] <key>",
    description: "open a stored session in $VISUAL/$EDITOR as .duas and save the edit back (checked, compare-and-set)",
    load: async () => (await import("./commands/edit.js")).editCommand(),
  },
  {
    name: "import",
    term: "import [options] <files...>",
    description: "import .duas, .duas.gz, OpenAI-format JSONL or JSON message arrays (one session per file)",
    load: async () => (await import("./commands/import.js")).importCommand(),
  },
  {
    name: "rm",
    term: "rm [options] <keys...>",
    description: "delete stored sessions",
    load: async () => (await import("./commands/rm.js")).rmCommand(),
  },
  {
    name: "convert",
    term: "convert [options]",
    description: "copy every session between two backends and verify each copy",
    load: async () => (await import("./commands/convert.js")).convertCommand(),
  },
  {
    name: "gc",
    term: "gc [options]",
    description: "delete sessions last saved longer ago than a duration (e.g. 30d, 12h)",
    load: async () => (await import("./commands/gc.js")).gcCommand(),
  },
  {
    name: "chat",
    term: "chat [options]",
    description: "chat with an agent whose conversation is saved after every message; resumes the session if it exists",
    load: async () => (await import("./chat.js")).chatCommand(),
  },
  {
    name: "workflows",
    term: "workflows",
    description: "inspect and maintain workflow checkpoints (ls, show, rm, prune)",
    load: async () => (await import("./workflow-commands.js")).workflowsCommand(),
  },
  {
    name: "runs",
    term: "runs [options] [runId]",
    description: "list durable runs (status, waiting approvals), or print one run's journal",
    load: durable("runs"),
  },
  {
    name: "approve",
    term: "approve [options] <runId> <toolCallId>",
    description: "approve a tool call a durable agent waits on (the tool runs when the run resumes)",
    load: durable("approve"),
  },
  {
    name: "reject",
    term: "reject [options] <runId> <toolCallId>",
    description: "reject a tool call a durable agent waits on (the model receives the refusal)",
    load: durable("reject"),
  },
  {
    name: "signal",
    term: "signal [options] <runId> <name> [json]",
    description: "send a signal to a durable run (waitForSignal)",
    load: durable("signal"),
  },
  {
    name: "cancel",
    term: "cancel [options] <runId>",
    description: "cancel a durable run: it takes no more steps (a running step is aborted, a waiting run released)",
    load: durable("cancel"),
  },
  {
    name: "reset",
    term: "reset [options] <runId>",
    description: "drop a run's journal after step N; the run continues from step N+1 on its next resume",
    load: durable("reset"),
  },
  {
    name: "retry",
    term: "retry [options] <runId>",
    description: "retry a failed or blocked run (its failed step runs again with a fresh retry budget)",
    load: durable("retry"),
  },
  {
    name: "ui",
    term: "ui [options]",
    description: "serve a local web inspector for sessions, workflows and durable runs; prints its address",
    load: async () => (await import("./ui.js")).uiCommand(),
  },
];

/**
 * The command a command line runs: its first argument that is not an option
 * (the root takes only `-V` / `-h`, which have no value), or the one after `help`.
 *
 * @param args - the arguments after the script (`process.argv.slice(2)`)
 * @returns the command name, or undefined for the root alone (`--help`, `--version`, nothing)
 * @example
 * commandOnLine(["help", "ls"]) // "ls"
 */
export function commandOnLine(args: readonly string[]): string | undefined {
  const words = args.filter((a) => !a.startsWith("-"));
  return words[0] === "help" ? words[1] : words[0];
}

/**
 * Adds every command to the root program: the one on the command line built
 * (its module imported), the others as placeholders the root help lists with
 * their terms from {@link COMMANDS}.
 *
 * @param program - the root `dumplings` command
 * @param args - the arguments after the script @default process.argv.slice(2)
 * @returns the program
 */
export async function addCommands(program: Command, args: readonly string[] = process.argv.slice(2)): Promise<Command> {
  const wanted = commandOnLine(args);
  const terms = new Map<Command, string>();
  for (const entry of COMMANDS) {
    if (entry.name === wanted) {
      program.addCommand(await entry.load());
      continue;
    }
    const placeholder = new Command(entry.name).description(entry.description);
    terms.set(placeholder, entry.term);
    program.addCommand(placeholder);
  }
  const help = new Help();
  program.configureHelp({ subcommandTerm: (cmd) => terms.get(cmd) ?? help.subcommandTerm(cmd) });
  return program;
}
