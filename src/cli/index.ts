#!/usr/bin/env node
/**
 * The `dumplings` command: inspect, move and maintain stored agent sessions.
 *
 * `dumplings ls | show KEY | export KEY [-o FILE] | import FILE… [--key K] |
 * rm KEY | convert --from SPEC --to SPEC | gc --older-than 30d`, each with
 * `--backend`, `--dir`, `--db` (or the `DUMPLINGS_PERSISTENCE_*` env vars);
 * `dumplings chat` (a resumable terminal chat), `dumplings workflows …`
 * (workflow checkpoints), `dumplings runs | approve | reject | signal`
 * (durable runs) and `dumplings ui` (the local web inspector over all three).
 *
 * Each command lives in its own factory; adding one is an entry of
 * `COMMANDS` in ./command-table.ts (name, help term, description, loader):
 * a command's module is imported only when it runs, so `dumplings --help`
 * starts without loading backends, zod or the AI SDK.
 *
 * @module
 */
import { Command } from "commander";
import { packageVersion } from "../core/version.js";
import { addCommands } from "./command-table.js";
import { runProgram } from "./run.js";

const program = new Command("dumplings")
  .description(
    "Durable AI agents: inspect, import, export and convert sessions; chat; workflows; durable runs (dumplings-ai).",
  )
  .version(packageVersion(), "-V, --version")
  .showHelpAfterError(false);

// only the module of the command on the command line is loaded (the others are listed from a table)
await addCommands(program);

await runProgram(program);
