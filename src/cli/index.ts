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
 * Each command lives in its own factory; adding one is a single
 * `program.addCommand(factory())` line below.
 *
 * @module
 */
import { Command } from "commander";
import { packageVersion } from "../core/version.js";
import { chatCommand } from "./chat.js";
import { convertCommand } from "./commands/convert.js";
import { exportCommand } from "./commands/export.js";
import { gcCommand } from "./commands/gc.js";
import { importCommand } from "./commands/import.js";
import { lsCommand } from "./commands/ls.js";
import { rmCommand } from "./commands/rm.js";
import { showCommand } from "./commands/show.js";
import { durableCommands } from "./durable-commands.js";
import { runProgram } from "./run.js";
import { uiCommand } from "./ui.js";
import { workflowCommands } from "./workflow-commands.js";

const program = new Command("dumplings")
  .description(
    "Durable AI agents: inspect, import, export and convert sessions; chat; workflows; durable runs (dumplings-ai).",
  )
  .version(packageVersion(), "-V, --version")
  .showHelpAfterError(false);

program.addCommand(lsCommand());
program.addCommand(showCommand());
program.addCommand(exportCommand());
program.addCommand(importCommand());
program.addCommand(rmCommand());
program.addCommand(convertCommand());
program.addCommand(gcCommand());
program.addCommand(chatCommand());
for (const c of workflowCommands()) program.addCommand(c);
for (const c of durableCommands()) program.addCommand(c);
program.addCommand(uiCommand());

await runProgram(program);
