#!/usr/bin/env node
/**
 * The `dumplings` command: inspect, move and maintain stored agent sessions.
 *
 * `dumplings ls | show KEY | export KEY [-o FILE] | import FILE… [--key K] |
 * rm KEY | convert --from SPEC --to SPEC | gc --older-than 30d`, each with
 * `--backend`, `--dir`, `--db` (or the `DUMPLINGS_PERSISTENCE_*` env vars).
 *
 * Each command lives in its own factory; adding one is a single
 * `program.addCommand(factory())` line below.
 *
 * @module
 */
import { Command } from "commander";
import { packageVersion } from "../core/version.js";
import { convertCommand } from "./commands/convert.js";
import { exportCommand } from "./commands/export.js";
import { gcCommand } from "./commands/gc.js";
import { importCommand } from "./commands/import.js";
import { lsCommand } from "./commands/ls.js";
import { rmCommand } from "./commands/rm.js";
import { showCommand } from "./commands/show.js";
import { runProgram } from "./run.js";

const program = new Command("dumplings")
  .description("Inspect, import, export and convert durable agent sessions (dumplings-ai).")
  .version(packageVersion(), "-V, --version")
  .showHelpAfterError(false);

program.addCommand(lsCommand());
program.addCommand(showCommand());
program.addCommand(exportCommand());
program.addCommand(importCommand());
program.addCommand(rmCommand());
program.addCommand(convertCommand());
program.addCommand(gcCommand());

await runProgram(program);
