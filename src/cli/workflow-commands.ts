/**
 * The workflow-checkpoint commands of `dumplings`, grouped under
 * `dumplings workflows`:
 *
 * - `dumplings workflows ls [--status S] [--limit N] [--cursor C]` — list workflows
 *   (newest created first, keyset pagination: the next page's cursor is printed; following the
 *   cursors lists each workflow once while workflows change);
 * - `dumplings workflows show ID` — one workflow's step timeline and recorded errors;
 * - `dumplings workflows rm ID` — delete a workflow from both tiers;
 * - `dumplings workflows prune --older-than 30d [--keep-last N] [--archive-dir DIR] [--vacuum full]` —
 *   retention; on SQLite, months that end before the cutoff are dropped whole (archived first
 *   to DIR), and `--vacuum full` rewrites the database file.
 *
 * The store is chosen with `--store` (`sqlite:PATH`, `postgres://…` or `postgres:postgres://…`) or
 * `DUMPLINGS_WORKFLOW_STORE`, default `sqlite:./.dumplingsAI_workflows/workflows.db`;
 * An SQLite store is the file's durable journal (workflow W is run W of workflow `graph`), and a
 * file written by an earlier release is moved into it when it is opened; `show` of a workflow
 * waiting on `interrupt()` prints the `dumplings signal` command that answers it.
 * `--redis URL` (or `REDIS_URL`) adds the hot tier so `rm` clears it too. Large values are read
 * from (and deleted with) the store's own database, as the library keeps them; `--blobs DIR` names
 * the directory of a store written with `blobDir`.
 *
 * @module
 */
import { Command } from "commander";
import { DEFAULT_FILES } from "../core/defaults.js";
import { InvalidOptionError } from "../core/errors.js";
import type { WorkflowRowStatus } from "../durable/checkpoints/contract.js";
import { RedisHotTier } from "../durable/checkpoints/hot-redis.js";
import { INTERRUPT_SIGNAL, JournalColdStore } from "../durable/checkpoints/journal-store.js";
import { PostgresColdStore } from "../durable/checkpoints/postgres.js";
import { SqliteColdStore } from "../durable/checkpoints/sqlite.js";
import { WorkflowNotFoundError } from "../workflow/errors.js";
import { CheckpointStore } from "../workflow/store.js";
import { parseDuration } from "./duration.js";
import { missingStore, UsageError } from "./errors.js";
import { printJson } from "./output.js";
import { oneOf, parseSpec, specForms } from "./spec.js";
import { renderTable } from "./table.js";

/** Default store spec of the workflow commands. */
export const DEFAULT_WORKFLOW_STORE = `sqlite:${DEFAULT_FILES.workflowsDb}`;

/** Options common to the workflow commands. */
export interface WorkflowCliOptions {
  /** `sqlite:PATH` or `postgres://…`. @default env DUMPLINGS_WORKFLOW_STORE, else {@link DEFAULT_WORKFLOW_STORE} */
  store?: string;
  /** PostgreSQL schema. @default "dumplings" */
  schema?: string;
  /** Redis URL of the hot tier. @default env REDIS_URL (none when unset) */
  redis?: string;
  /**
   * Directory of a store whose blobs were written with `blobDir` (the library's option).
   * @default none: blobs are in the store's database (blobs of dumplings-ai 0.1 are read from
   *   ./.dumplingsAI_workflows/blobs and the "blobs" directory beside the SQLite file)
   */
  blobs?: string;
  json?: boolean;
}

/** The store kinds a checkpoint archive can be in. */
const STORE_KINDS = ["sqlite", "postgres"] as const;

/**
 * Opens the checkpoint store a spec names (the SPEC syntax of every command, see `spec.ts`):
 * `sqlite:PATH`, or `postgres://…` / `postgres:postgres://…` (`?schema=`).
 *
 * @param options - `store` spec, `schema`, `redis`, `blobs`
 * @param open - `mustExist`: the archive must already exist (an SQLite file or a PostgreSQL
 *   schema with the workflow tables); nothing is created. What every `dumplings workflows` command uses.
 * @returns an open store (close it when done)
 * @throws {UsageError} for an unknown spec
 * @throws {InputNotFoundError} with `mustExist`, when the archive does not exist
 * @example
 * const store = await openWorkflowStore({ store: "sqlite:/tmp/wf.db" });
 */
export async function openWorkflowStore(
  options: WorkflowCliOptions = {},
  open: { mustExist?: boolean } = {},
): Promise<CheckpointStore> {
  const env = process.env.DUMPLINGS_WORKFLOW_STORE === "" ? undefined : process.env.DUMPLINGS_WORKFLOW_STORE;
  const text = storeSpecText(options);
  const spec = parseSpec(text, {
    kinds: STORE_KINDS,
    option: options.store === undefined && env !== undefined ? "DUMPLINGS_WORKFLOW_STORE" : "--store",
  });
  const create = open.mustExist === true ? { create: false } : {};
  let cold: SqliteColdStore | PostgresColdStore;
  let label: string;
  if (spec.kind === "sqlite") {
    label = spec.text;
    try {
      cold = new SqliteColdStore({ path: spec.path, ...create });
    } catch (error) {
      throw missingStore(error, label);
    }
  } else if (spec.kind === "postgres") {
    label = spec.label;
    const schema = oneOf(spec.param, options.schema, "schema");
    cold = new PostgresColdStore({ url: spec.url, ...(schema ? { schema } : {}), ...create });
  } else {
    throw new UsageError(`unknown workflow store ${JSON.stringify(spec.text)}`);
  }
  const redisText = options.redis ?? (process.env.REDIS_URL || undefined);
  // the hot tier's URL in the same SPEC forms (redis://… or redis:redis://…, ?prefix=)
  const redis =
    redisText === undefined
      ? undefined
      : parseSpec(redisText, { kinds: ["redis"], option: options.redis === undefined ? "REDIS_URL" : "--redis" });
  try {
    return await CheckpointStore.open({
      cold,
      hot:
        redis?.kind === "redis"
          ? new RedisHotTier({ url: redis.url, ...(redis.param ? { keyPrefix: redis.param } : {}) })
          : undefined,
      // The library's defaults otherwise (blobs in the store's database), so both read what either wrote.
      ...(options.blobs === undefined ? {} : { blobDir: options.blobs }),
    });
  } catch (error) {
    await cold.close().catch(() => undefined);
    throw missingStore(error, label);
  }
}

/** The store SPEC the options name: `--store`, else `DUMPLINGS_WORKFLOW_STORE`, else the default. */
function storeSpecText(options: WorkflowCliOptions): string {
  const env = process.env.DUMPLINGS_WORKFLOW_STORE === "" ? undefined : process.env.DUMPLINGS_WORKFLOW_STORE;
  return options.store ?? env ?? DEFAULT_WORKFLOW_STORE;
}

function withStoreOptions(command: Command): Command {
  return command
    .option(
      "--store <spec>",
      `${specForms(STORE_KINDS)} (default: $DUMPLINGS_WORKFLOW_STORE, else ${DEFAULT_WORKFLOW_STORE})`,
    )
    .option("--schema <name>", "PostgreSQL schema (default: dumplings)")
    .option("--redis <url>", "Redis hot tier: redis://URL or redis:redis://URL, ?prefix=P (default: $REDIS_URL)")
    .option(
      "--blobs <dir>",
      "blob directory of a store written with blobDir (default: blobs are in the store's database)",
    )
    .option("--json", "print JSON");
}

async function withStore<T>(options: WorkflowCliOptions, fn: (store: CheckpointStore) => Promise<T>): Promise<T> {
  // Every workflows command reads or removes what exists: a mistyped store is an error, never created.
  const store = await openWorkflowStore(options, { mustExist: true });
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

const iso = (ms: number) => new Date(ms).toISOString();
const STATUSES = new Set(["running", "waiting", "finished", "failed"]);

/** The message of a refused `--cursor`, naming the option as the user gave it. */
function cursorMessage(e: Error): string {
  return e instanceof InvalidOptionError ? `--cursor ${e.message.slice(e.message.indexOf(": ") + 2)}` : e.message;
}

function lsCommand(): Command {
  return withStoreOptions(new Command("ls"))
    .description("list workflows, newest created first (following --cursor lists each once while they change)")
    .option("--status <status>", "running, waiting, finished or failed")
    .option("--limit <n>", "page size (1..1000)", "50")
    .option("--cursor <cursor>", "cursor printed by the previous page")
    .action(async (options: WorkflowCliOptions & { status?: string; limit: string; cursor?: string }) => {
      if (options.status !== undefined && !STATUSES.has(options.status)) {
        throw new UsageError(
          `unknown status ${JSON.stringify(options.status)}: use running, waiting, finished or failed`,
        );
      }
      const limit = Number(options.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new UsageError("--limit must be 1..1000");
      await withStore(options, async (store) => {
        const page = await store
          .listWorkflows({ status: options.status as WorkflowRowStatus | undefined, limit, cursor: options.cursor })
          .catch((e: unknown) => {
            throw e instanceof RangeError || e instanceof InvalidOptionError ? new UsageError(cursorMessage(e)) : e;
          });
        if (options.json) return printJson(page);
        const table = renderTable(
          [
            { header: "workflow" },
            { header: "status" },
            { header: "step", align: "right" },
            { header: "next" },
            { header: "created" },
            { header: "updated" },
          ],
          page.items.map((w) => [
            w.workflowId,
            w.status,
            String(w.latestStep),
            w.currentNode,
            iso(w.createdAt),
            iso(w.updatedAt),
          ]),
        );
        process.stdout.write(`${table}\n${page.nextCursor ? `next page: --cursor ${page.nextCursor}\n` : ""}`);
      });
    });
}

function showCommand(): Command {
  return withStoreOptions(new Command("show"))
    .description("print a workflow's step timeline and recorded errors")
    .argument("<workflowId>", "the workflow")
    .action(async (workflowId: string, options: WorkflowCliOptions) => {
      await withStore(options, async (store) => {
        const history = await store.history(workflowId);
        if (history.length === 0) throw new WorkflowNotFoundError(workflowId);
        const errors = await store.errors(workflowId);
        if (options.json) return printJson({ summary: await store.summary(workflowId), history, errors });
        const t0 = history[0]!.createdAt;
        const table = renderTable(
          [
            { header: "step", align: "right" },
            { header: "node" },
            { header: "+ms", align: "right" },
            { header: "status" },
            { header: "next" },
          ],
          history.map((h) => [
            String(h.stepIndex),
            h.nodeName,
            String(h.createdAt - t0),
            h.state.status,
            h.state.currentNode,
          ]),
        );
        const errs = errors.map((e) => `error at step ${e.stepIndex} in ${e.nodeName}: ${String(e.error.message)}`);
        const pending = history.at(-1)!.state.pendingInterrupt;
        const wait = pending ? [`waiting: ${pending.reason} (interrupt ${pending.id})`] : [];
        // A store kept in a durable journal: the interrupt is the run's wait for signal interrupt:<id>.
        const journal = store.cold instanceof JournalColdStore ? store.cold.journal : undefined;
        const run = pending && journal ? await journal.getRun(workflowId) : undefined;
        if (run?.status === "cancelled") {
          // A cancelled workflow waits for nothing: its interrupt cannot be answered any more.
          wait.push(`cancelled: it takes no more steps (its interrupt is not answered)`);
        } else if (pending && journal) {
          const name = `${INTERRUPT_SIGNAL}${pending.id}`;
          const sent = await journal.getSignal(workflowId, name);
          const spec = storeSpecText(options);
          wait.push(
            sent
              ? `answered with ${JSON.stringify(sent.value)}, pending resume (the application's runner.runOrResume continues it)`
              : `answer it: dumplings signal${spec.startsWith("sqlite:") ? ` --journal ${spec}` : ""} ${workflowId} ${name} '<JSON>'`,
          );
        }
        process.stdout.write(`${[table, ...errs, ...wait].join("\n")}\n`);
      });
    });
}

function rmCommand(): Command {
  return withStoreOptions(new Command("rm"))
    .description("delete a workflow (every step, both tiers, its side-effect records and unreferenced blobs)")
    .argument("<workflowId>", "the workflow")
    .action(async (workflowId: string, options: WorkflowCliOptions) => {
      await withStore(options, async (store) => {
        if (!(await store.delete(workflowId))) throw new WorkflowNotFoundError(workflowId);
        if (options.json) printJson({ deleted: workflowId });
        else process.stdout.write(`deleted ${workflowId}\n`);
      });
    });
}

function pruneCommand(): Command {
  return withStoreOptions(new Command("prune"))
    .description(
      "delete old checkpoints, keeping each workflow's newest steps; on SQLite, months that end before the cutoff are dropped whole (archived first with --archive-dir)",
    )
    .requiredOption("--older-than <duration>", "age of the checkpoints to delete, e.g. 30d, 12h")
    .option("--keep-last <n>", "newest steps kept per workflow (>= 1)", "1")
    .option(
      "--archive-dir <dir>",
      "SQLite: copy each month dropped whole to <dir>/workflow_snapshots_YYYY_MM.db first (never overwritten)",
    )
    .option(
      "--vacuum <mode>",
      "incremental (give freed pages back) or full (rewrite the whole database: needs free disk about its size)",
      "incremental",
    )
    .action(
      async (
        options: WorkflowCliOptions & { olderThan: string; keepLast: string; archiveDir?: string; vacuum: string },
      ) => {
        const olderThan = parseDuration(options.olderThan);
        const keepLast = Number(options.keepLast);
        if (!Number.isInteger(keepLast) || keepLast < 1) throw new UsageError("--keep-last must be an integer >= 1");
        if (options.vacuum !== "incremental" && options.vacuum !== "full") {
          throw new UsageError(`--vacuum must be incremental or full, got ${JSON.stringify(options.vacuum)}`);
        }
        const vacuum = options.vacuum;
        await withStore(options, async (store) => {
          const out = await store.prune({
            olderThan,
            keepLast,
            vacuum,
            ...(options.archiveDir === undefined ? {} : { archiveDir: options.archiveDir }),
          });
          if (options.json) printJson(out);
          else {
            const months = out.droppedMonths.map(
              (m) => `dropped month ${m.month}${m.archivedTo ? ` (archived to ${m.archivedTo})` : ""}\n`,
            );
            process.stdout.write(
              `${months.join("")}deleted ${out.deletedSnapshots} checkpoints and ${out.deletedBlobs} blobs${vacuum === "full" ? "; database vacuumed" : ""}\n`,
            );
          }
        });
      },
    );
}

/**
 * `dumplings workflows …` (ls, show, rm, prune), for `program.addCommand(...)`.
 *
 * @returns the `workflows` command group
 * @example
 * dumplings workflows ls --status waiting
 * dumplings workflows show order-42
 * dumplings workflows prune --older-than 30d --keep-last 5
 */
export function workflowsCommand(): Command {
  return new Command("workflows")
    .description("inspect and maintain workflow checkpoints (ls, show, rm, prune)")
    .addCommand(lsCommand())
    .addCommand(showCommand())
    .addCommand(rmCommand())
    .addCommand(pruneCommand());
}

/**
 * All workflow commands, for `program.addCommand(...)`.
 *
 * @returns `[workflows]`
 */
export function workflowCommands(): Command[] {
  return [workflowsCommand()];
}
