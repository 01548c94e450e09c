/**
 * `dumplings ui`: a local web inspector for stored sessions, workflow
 * checkpoints and durable runs (see `src/ui/`).
 *
 * `dumplings ui [--host 127.0.0.1] [--port N] [--no-open] [--backend SPEC] [--store SPEC] [--journal SPEC]`
 * opens the stores the other commands would (same options, environment
 * variables and defaults), serves the inspector and prints one line on stdout,
 * its address with this start's token: `http://127.0.0.1:N/?token=…`. A store
 * named on the command line (or in the environment) must exist (exit 3, as for
 * the other commands); a default store that does not exist is shown as missing
 * and the others are served. It runs until SIGINT or SIGTERM. The web server
 * (hono) is loaded only by this command.
 *
 * A workflow store kept in a durable journal (`sqlite:PATH`: workflow W is run
 * W of the file's journal) is also the runs pages' journal when `--journal`
 * names the same file, or when no journal is named (`--journal` nor
 * `DUMPLINGS_DURABLE_JOURNAL`) and the store is named or the default journal
 * does not exist: the runs list then shows the workflows as runs (workflow
 * `graph`), and a waiting workflow's run page answers its interrupt.
 *
 * @module
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { Command } from "commander";
import type { StateBackend } from "../backends/types.js";
import { assertPeers } from "../core/peers.js";
import { JournalColdStore } from "../durable/checkpoints/journal-store.js";
import type { Journal } from "../durable/journal.js";
import type { RunEventStream } from "../durable/stream-contract.js";
import { closeBackend, DEFAULT_DIR, openBackendAsync } from "../ops/backend.js";
import { InputNotFoundError, UsageError } from "../ops/errors.js";
import { DEFAULT_JOURNAL, defaultJournalSpec, openJournal } from "../ops/journal.js";
import { parseSpec } from "../ops/spec.js";
import { DEFAULT_WORKFLOW_STORE, openWorkflowStore } from "../ops/workflows.js";
import type { Source, UiSources } from "../ui/sources.js";
import type { CheckpointStore } from "../workflow/store.js";
import { withBackendOptions } from "./backend.js";

/** Options of `dumplings ui`. */
interface UiOptions {
  host: string;
  port: string;
  open?: boolean;
  backend?: string;
  dir?: string;
  db?: string;
  store?: string;
  journal?: string;
  stream?: string;
  queue?: string;
  by?: string;
}

const set = (v: string | undefined) => v !== undefined && v !== "";

/** Opens one store: a missing default store is reported as missing, a missing named one is an error. */
async function openOrMissing<T>(
  named: boolean,
  label: string,
  open: () => Promise<{ value: T; label: string }>,
): Promise<Source<T>> {
  try {
    return await open();
  } catch (error) {
    if (!named && error instanceof InputNotFoundError) {
      process.stderr.write(`dumplings ui: ${label} does not exist; its pages say so\n`);
      return { label, missing: `no store at ${label} (give its SPEC to dumplings ui)` };
    }
    throw error;
  }
}

/** Whether two SPECs name one SQLite file (`sqlite:PATH`, paths resolved). */
function sameSqliteFile(a: string, b: string): boolean {
  const file = (text: string) => {
    try {
      const spec = parseSpec(text, { kinds: ["sqlite", "postgres", "redis"], option: "--journal" });
      return spec.kind === "sqlite" ? path.resolve(spec.path) : undefined;
    } catch {
      return undefined; // an unsuitable spec is reported when it is opened
    }
  };
  const fa = file(a);
  return fa !== undefined && fa === file(b);
}

function openBrowser(url: string): void {
  const [cmd, args] =
    process.platform === "darwin"
      ? ["open", [url]]
      : process.platform === "win32"
        ? ["cmd", ["/c", "start", "", url]]
        : ["xdg-open", [url]];
  const child = spawn(cmd as string, args as string[], { stdio: "ignore", detached: true });
  child.on("error", () =>
    process.stderr.write(`dumplings ui: could not open a browser (${cmd}); open the address above\n`),
  );
  child.unref();
}

/**
 * Builds the `ui` command.
 *
 * @returns the commander command
 * @example
 * dumplings ui --backend sqlite:./sessions.db --journal sqlite:./runs.db --port 8080
 */
export function uiCommand(): Command {
  return withBackendOptions(new Command("ui"))
    .description("serve a local web inspector for sessions, workflows and durable runs; prints its address")
    .option(
      "--host <address>",
      "address to bind (0.0.0.0 exposes it to the network: a warning is printed)",
      "127.0.0.1",
    )
    .option("--port <n>", "port to listen on (0: any free port)", "0")
    .option("--open", "open the address in the system's browser")
    .option("--no-open", "only print the address (the default)")
    .option("--store <spec>", `workflow store (default: $DUMPLINGS_WORKFLOW_STORE, else ${DEFAULT_WORKFLOW_STORE})`)
    .option("--journal <spec>", `durable journal (default: $DUMPLINGS_DURABLE_JOURNAL, else ${DEFAULT_JOURNAL})`)
    .option("--stream <url>", "Redis side channel of the runs (redis://…), to follow model tokens live")
    .option("--queue <name>", "BullMQ queue a released run is put back on (Redis at $REDIS_URL)")
    .option("--by <name>", "who operator actions are recorded as (default: user@host)")
    .action(async (options: UiOptions) => {
      const port = Number(options.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) {
        throw new UsageError(`--port ${JSON.stringify(options.port)} is not a port (0..65535; 0 picks a free one)`);
      }
      // the web server is an optional peer: say what to install before opening any store
      assertPeers("ui", ["hono", "@hono/node-server"]);
      const env = process.env;
      const opened: (() => Promise<void>)[] = [];
      try {
        const sessions = await openOrMissing<StateBackend>(
          set(options.backend) || set(options.dir) || set(options.db) || set(env.DUMPLINGS_PERSISTENCE_BACKEND),
          `file:${env.DUMPLINGS_PERSISTENCE_DIR || DEFAULT_DIR}`, // the default session store
          async () => {
            const b = await openBackendAsync(options, env, { mustExist: true });
            opened.push(() => closeBackend(b.backend));
            return { value: b.backend, label: b.label };
          },
        );
        const workflows = await openOrMissing<CheckpointStore>(
          set(options.store) || set(env.DUMPLINGS_WORKFLOW_STORE),
          options.store ?? env.DUMPLINGS_WORKFLOW_STORE ?? DEFAULT_WORKFLOW_STORE,
          async () => {
            const s = await openWorkflowStore(options.store ? { store: options.store } : {}, { mustExist: true });
            opened.push(() => s.close());
            return { value: s, label: options.store ?? env.DUMPLINGS_WORKFLOW_STORE ?? DEFAULT_WORKFLOW_STORE };
          },
        );
        const storeText = options.store ?? env.DUMPLINGS_WORKFLOW_STORE ?? DEFAULT_WORKFLOW_STORE;
        const journalNamed = set(options.journal) || set(env.DUMPLINGS_DURABLE_JOURNAL);
        const journalText = options.journal ?? env.DUMPLINGS_DURABLE_JOURNAL ?? defaultJournalSpec();
        // The workflow store's own journal (workflow W is run W there), when it is kept in one.
        const storeJournal =
          workflows.value?.cold instanceof JournalColdStore ? workflows.value.cold.journal : undefined;
        const storeAsJournal: Source<Journal> = storeJournal
          ? { value: storeJournal, label: workflows.label }
          : { label: journalText, missing: "" };
        const openNamedOrDefault = () =>
          openOrMissing<Journal>(journalNamed, journalText, async () => {
            const j = await openJournal(options.journal ? { journal: options.journal } : {}, { mustExist: true });
            opened.push(() => j.close());
            return { value: j, label: journalText };
          });
        let journal: Source<Journal>;
        if (storeJournal && journalNamed && sameSqliteFile(journalText, storeText)) journal = storeAsJournal;
        else if (storeJournal && !journalNamed && (set(options.store) || set(env.DUMPLINGS_WORKFLOW_STORE))) {
          journal = storeAsJournal;
        } else {
          journal = await openNamedOrDefault();
          if (journal.value === undefined && storeJournal) {
            process.stderr.write(
              `dumplings ui: the runs pages show the workflow store's journal (${workflows.label})\n`,
            );
            journal = storeAsJournal;
          }
        }
        let stream: RunEventStream | undefined;
        if (options.stream !== undefined) {
          const spec = parseSpec(options.stream, { kinds: ["redis"], option: "--stream" });
          if (spec.kind !== "redis") throw new UsageError("--stream takes a Redis URL (redis://…)");
          const { RedisRunStream } = await import("../durable/stream.js");
          const s = new RedisRunStream({ url: spec.url, ...(spec.param ? { keyPrefix: spec.param } : {}) });
          opened.push(() => s.close());
          stream = s;
        }
        const sources: UiSources = {
          sessions,
          workflows,
          journal,
          ...(stream ? { stream } : {}),
          ...(options.queue ? { queue: options.queue } : {}),
          ...(options.by ? { by: options.by } : {}),
        };
        const { startUi } = await import("../ui/server.js");
        const ui = await startUi(sources, { host: options.host, port });
        if (options.host === "0.0.0.0" || options.host === "::") {
          process.stderr.write(
            `dumplings ui: WARNING: listening on ${options.host}: anyone who can reach this machine and learns the token can read every store and approve runs; prefer 127.0.0.1 (the default) with an SSH tunnel\n`,
          );
        }
        process.stdout.write(`${ui.url}\n`);
        process.stderr.write("dumplings ui: serving; Ctrl-C stops it\n");
        if (options.open === true) openBrowser(ui.url);
        await new Promise<void>((resolve) => {
          const stop = () => resolve();
          process.once("SIGINT", stop);
          process.once("SIGTERM", stop);
        });
        await ui.close();
      } finally {
        for (const close of opened.reverse()) await close().catch(() => undefined);
      }
    });
}
