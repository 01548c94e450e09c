/**
 * `dumplings edit KEY`: opens a stored session as `.duas` text in the user's
 * editor (`$VISUAL`, else `$EDITOR`, else `vi`) and saves the edit back with
 * every check a load and a save make: the text is decoded by the strict `.duas`
 * reader (a malformed line is a `FormatError` with its line number), config
 * values that look like credentials are refused (`CredentialError`), and the
 * write is a compare-and-set against the revision that was opened, so a save
 * by someone else meanwhile (or a delete) is a `ConflictError`, not lost. On
 * any refusal nothing is written and the edited text is kept in a file whose
 * path is printed, so the edit is not lost either; an unchanged text writes
 * nothing.
 *
 * The text edited is what `dumplings export` writes (no file-backend checksums:
 * nothing to recompute by hand).
 *
 * @module
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Command } from "commander";
import { validateKey } from "../../backends/keys.js";
import { decodeStateBytes } from "../../core/codec/bytes.js";
import { encodeState } from "../../core/codec/encode.js";
import { ConflictError } from "../../core/errors.js";
import type { Message } from "../../core/messages.js";
import type { AgentState } from "../../core/state.js";
import { closeBackend, openBackendAsync } from "../../ops/backend.js";
import { UsageError } from "../../ops/errors.js";
import { openSession } from "../../ops/sessions.js";
import { assertNoCredentials } from "../../persistence/credentials.js";
import { withBackendOptions } from "../backend.js";
import { printJson } from "../output.js";

/** Options of `dumplings edit`. */
interface EditOptions {
  backend?: string;
  dir?: string;
  db?: string;
  json?: boolean;
}

/** The editor command: `$VISUAL`, else `$EDITOR`, else `vi` (a command line: it may carry arguments). */
function editorCommand(env: NodeJS.ProcessEnv): string {
  for (const v of [env.VISUAL, env.EDITOR]) if (v !== undefined && v.trim() !== "") return v;
  return "vi";
}

/** A path as one POSIX shell word. */
function shellWord(text: string): string {
  return `'${text.replace(/'/g, `'\\''`)}'`;
}

/**
 * Builds the `edit` command.
 *
 * `--json` prints `{ backend, key, changed, revision }`.
 *
 * @returns the commander command
 * @example
 * EDITOR=nano dumplings edit weather-1 --backend sqlite
 */
export function editCommand(): Command {
  return withBackendOptions(new Command("edit"))
    .description("open a stored session in $VISUAL/$EDITOR as .duas and save the edit back (checked, compare-and-set)")
    .argument("<key>", "session key")
    .option("--json", "print JSON")
    .action(async (key: string, options: EditOptions) => {
      validateKey(key);
      const { backend, label } = await openBackendAsync(options, process.env, { mustExist: true });
      try {
        const session = await openSession(backend, key, label);
        const history: Message[] = [];
        for await (const m of session.history) history.push(m);
        const original = encodeState({ ...session.header, history } as AgentState);
        const dir = mkdtempSync(path.join(os.tmpdir(), "dumplings-edit-"));
        const file = path.join(dir, `${key.replace(/[^A-Za-z0-9._-]/g, "_")}.duas`);
        writeFileSync(file, original);
        let keep = false;
        try {
          const editor = editorCommand(process.env);
          const run = spawnSync(`${editor} ${shellWord(file)}`, { shell: true, stdio: "inherit" });
          if (run.error) throw new UsageError(`cannot run the editor ${JSON.stringify(editor)}: ${run.error.message}`);
          if (run.status !== 0) {
            throw new UsageError(
              `the editor ${JSON.stringify(editor)} exited with ${run.status ?? run.signal}; nothing was saved`,
            );
          }
          const edited = readFileSync(file);
          let revision = session.revision;
          const changed = edited.toString("utf8") !== original;
          if (changed) {
            keep = true; // until it is saved: a refused edit stays on disk, named in the message
            let state: AgentState;
            try {
              state = decodeStateBytes(edited, { source: file });
              assertNoCredentials(state.config);
            } catch (e) {
              process.stderr.write(`dumplings: the edited text is kept in ${file}\n`);
              throw e;
            }
            try {
              if (typeof backend.write === "function") {
                // compare-and-set against what was opened: a save or delete meanwhile is a ConflictError
                const r = await backend.write(key, state, { expectedRevision: session.revision ?? null });
                revision = r.revision;
              } else {
                await backend.save(key, state);
                revision = undefined;
              }
            } catch (e) {
              process.stderr.write(`dumplings: the edited text is kept in ${file}\n`);
              if (e instanceof ConflictError) {
                process.stderr.write(
                  `dumplings: ${JSON.stringify(key)} was saved or deleted while it was being edited; nothing was written\n`,
                );
              }
              throw e;
            }
            keep = false;
          }
          if (options.json) printJson({ backend: label, key, changed, revision: revision ?? null });
          else process.stderr.write(changed ? `saved ${key} to ${label}\n` : `${key}: no changes\n`);
        } finally {
          if (!keep) rmSync(dir, { recursive: true, force: true });
        }
      } finally {
        await closeBackend(backend);
      }
    });
}
