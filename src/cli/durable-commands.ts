/**
 * The durable-execution commands of `dumplings`:
 *
 * - `dumplings runs [RUN_ID]` — list runs with their status and what they
 *   wait for (a pending approval with its tool, arguments and the command that
 *   releases it; a recorded decision as "pending resume"), or print one run's journal;
 * - `dumplings approve RUN_ID TOOL_CALL_ID [--note …] [--args JSON]` / `dumplings reject RUN_ID TOOL_CALL_ID --note …`
 *   — decide a tool call a durable agent waits on (a call it does not wait on is refused);
 * - `dumplings signal RUN_ID NAME [JSON]` — send any signal;
 * - `dumplings cancel RUN_ID [--reason …]`, `dumplings reset RUN_ID --to-step N`,
 *   `dumplings retry RUN_ID` — operator actions, journaled with who did them.
 *
 * The journal is chosen with `--journal` (a SPEC of `spec.ts`: `sqlite:PATH`,
 * `postgres://…` or `postgres:postgres://…`, `redis://…` or `redis:redis://…`)
 * or `DUMPLINGS_DURABLE_JOURNAL`, default `sqlite:./.dumplingsAI_durable.db` (or
 * `./.dumplings-durable.db` of an earlier release while that one does not
 * exist); it must exist (a missing journal is exit 3, nothing is created).
 * With `--queue NAME` (and `REDIS_URL`), a signal that releases a waiting run
 * also puts it back on that BullMQ queue so a worker resumes it.
 *
 * The renderings of the commands ({@link renderRuns}, {@link renderJournal}, {@link renderApproval}) are
 * exported so a program (the demo) prints exactly what the command prints; opening the journal and
 * acting on a run (`openJournal`, `describeWait`, `sendDecision`, …) are in `ops/`, shared with the web
 * inspector.
 *
 * @module
 */
import { Command, Option } from "commander";
import { DumplingsError, FormatError } from "../core/errors.js";
import type { JsonObject, JsonValue } from "../core/json.js";
import {
  type ApprovalView,
  DEFAULT_REJECTION,
  decisionValue,
  pendingApprovals,
  previewJson,
} from "../durable/approvals.js";
import { INTERRUPT_SIGNAL } from "../durable/checkpoints/journal-store.js";
import { RunNotFoundError } from "../durable/errors.js";
import { type Journal, RUN_STATUSES, type RunRecord, type StepRecord } from "../durable/journal.js";
import { approvalSignalName, type SignalResult } from "../durable/signals.js";
import { ExitCode, errorLine, errorParts, isItemFault, RunsUnreadableError, UsageError } from "../ops/errors.js";
import { when } from "../ops/format.js";
import { DEFAULT_JOURNAL, JOURNAL_KINDS, type JournalCliOptions, openJournal, withRunHint } from "../ops/journal.js";
import { describeWait, operatorAction, operatorName, renderNotes, requeue, sendDecision } from "../ops/runs.js";
import { specForms } from "../ops/spec.js";
import { printJson } from "./output.js";
import { renderTable } from "./table.js";

function withJournalOptions(command: Command): Command {
  return command
    .option(
      "--journal <spec>",
      `${specForms(JOURNAL_KINDS)} (default: $DUMPLINGS_DURABLE_JOURNAL, else ${DEFAULT_JOURNAL})`,
    )
    .option("--schema <name>", "PostgreSQL schema of the journal (default: dumplings; or ?schema= in the URL)")
    .option(
      "--prefix <prefix>",
      "Redis key prefix of the journal (default: dumplings:durable:; or ?prefix= in the URL)",
    );
}

/** A row of `dumplings runs`: the run, its step count, what it waits for and its pending approvals. */
export type RunRow = RunRecord & {
  /** Number of step records; `null` when they cannot be read (see `readError`). */
  steps: number | null;
  waiting: string;
  approvals: ApprovalView[];
  /** Set when the run's step records or signals cannot be read (an edited or corrupted journal). */
  readError?: { code: string; message: string };
};

/**
 * Renders the runs table `dumplings runs` prints: the journal's newest 1,000 runs, newest created
 * first (`listRuns`' order; a run keeps its place when it changes). A run whose step records or
 * signals cannot be read (an edited or corrupted journal) is listed with its
 * `readError` (and `UNREADABLE (<CODE>)` in the table) instead of hiding every
 * other run; a failure of the whole store is thrown.
 *
 * @param journal - the journal
 * @param filter - `status` to keep
 * @returns `{ text, runs, unreadable }`: the table, the rows as JSON (each with its `approvals`), and the runs
 *   that could not be read
 */
export async function renderRuns(
  journal: Journal,
  filter: { status?: RunRecord["status"] } = {},
): Promise<{ text: string; runs: RunRow[]; unreadable: { runId: string; code: string; message: string }[] }> {
  const runs = await journal.listRuns(filter.status ? { status: filter.status } : {});
  const rows: RunRow[] = [];
  const unreadable: { runId: string; code: string; message: string }[] = [];
  for (const run of runs) {
    try {
      if (run.readError !== undefined) {
        // the run row itself cannot be read (listRuns names it): listed, marked, the others go on
        throw new FormatError(run.readError.message);
      }
      const steps = await journal.readSteps(run.runId);
      const approvals = run.waitingFor?.startsWith("approval:")
        ? pendingApprovals(run, steps, await journal.listSignals(run.runId))
        : [];
      rows.push({ ...run, steps: steps.length, waiting: describeWait(run, approvals), approvals });
    } catch (e) {
      if (!isItemFault(e)) throw e;
      const { code = "ERROR", message } = errorParts(e);
      unreadable.push({ runId: run.runId, code, message });
      rows.push({ ...run, steps: null, waiting: `UNREADABLE (${code})`, approvals: [], readError: { code, message } });
    }
  }
  const text = renderTable(
    [
      { header: "run" },
      { header: "workflow" },
      { header: "status" },
      { header: "steps", align: "right" },
      { header: "created" },
      { header: "updated" },
      { header: "waiting for / reason" },
    ],
    rows.map((r) => [
      r.runId,
      r.workflow,
      r.status,
      r.steps === null ? "-" : String(r.steps),
      when(r.createdAt),
      when(r.updatedAt),
      r.waiting,
    ]),
  );
  return { text, runs: rows, unreadable };
}

/**
 * Renders one run's journal (one line per step record).
 *
 * @param steps - the run's step records
 * @returns the table text
 */
export function renderJournal(steps: StepRecord[]): string {
  return renderTable(
    [
      { header: "seq", align: "right" },
      { header: "step" },
      { header: "status" },
      { header: "attempt", align: "right" },
      { header: "token", align: "right" },
      { header: "ms", align: "right" },
      { header: "output" },
    ],
    steps.map((s) => [
      String(s.seq),
      s.name,
      s.status,
      String(s.attempt),
      String(s.fencingToken),
      s.finishedAt === undefined ? "" : String(s.finishedAt - s.startedAt),
      s.status === "failed" ? `${s.error?.name}: ${s.error?.message}` : previewJson(s.output),
    ]),
  );
}

function resultLine(runId: string, name: string, result: SignalResult & { queued: boolean }): string {
  if (!result.wakes)
    return `recorded ${name} for ${runId} (the run is ${result.run.status}; it takes the signal when it gets there)`;
  if (result.queued) return `released ${runId}: ${name} recorded and the run queued again`;
  return name.startsWith(INTERRUPT_SIGNAL)
    ? `released ${runId}: ${name} recorded; the workflow's next runner.runOrResume continues it with this answer`
    : `released ${runId}: ${name} recorded; resume the run with its worker (or pass --queue)`;
}

/**
 * `dumplings runs [RUN_ID]`.
 *
 * @returns the commander command
 * @example
 * dumplings runs --journal sqlite:./runs.db --status waiting
 */
export function runsCommand(): Command {
  return withJournalOptions(new Command("runs"))
    .description("list durable runs (status, waiting approvals), or print one run's journal")
    .argument("[runId]", "print this run's journal")
    .option("--status <status>", `only runs with this status (${RUN_STATUSES.join(", ")})`)
    .option("--json", "print JSON")
    .action(async (runId: string | undefined, options: JournalCliOptions & { status?: RunRecord["status"] }) => {
      if (options.status !== undefined && !RUN_STATUSES.includes(options.status)) {
        throw new UsageError(
          `--status ${JSON.stringify(options.status)} is not a run status: use one of ${RUN_STATUSES.join(", ")}`,
        );
      }
      const journal = await openJournal(options, { mustExist: true });
      try {
        if (runId) {
          const run = await journal.getRun(runId);
          if (!run) throw new RunNotFoundError(runId);
          const steps = await journal.readSteps(runId);
          const events = await journal.readEvents(runId);
          const signals = await journal.listSignals(runId);
          const approvals = pendingApprovals(run, steps, signals);
          const notes = renderNotes(events);
          if (options.json) printJson({ run, steps, signals, approvals, notes });
          else
            process.stdout.write(
              `${run.runId}  ${run.workflow}  ${run.status}  ${describeWait(run, approvals)}\n` +
                approvals.map((a) => `${renderApproval(run.runId, a)}\n`).join("") +
                `${renderJournal(steps)}\n` +
                notes.map((n) => `${n}\n`).join(""),
            );
          return;
        }
        const { text, runs, unreadable } = await renderRuns(journal, options.status ? { status: options.status } : {});
        if (options.json) printJson(runs);
        else process.stdout.write(`${text}\n`);
        if (unreadable.length > 0) {
          // Every run is listed (stdout stays one table or one JSON array); stderr names the unreadable ones.
          for (const r of unreadable) {
            process.stderr.write(`dumplings: cannot read run ${JSON.stringify(r.runId)}: ${r.message} (${r.code})\n`);
          }
          process.stderr.write(`${errorLine(new RunsUnreadableError(unreadable, runs.length))}\n`);
          process.exitCode = ExitCode.partial;
        }
      } catch (e) {
        throw await withRunHint(e, options);
      } finally {
        await journal.close();
      }
    });
}

function decisionCommand(name: "approve" | "reject"): Command {
  const command = withJournalOptions(new Command(name))
    .description(
      name === "approve"
        ? "approve a tool call a durable agent waits on (the tool runs when the run resumes)"
        : "reject a tool call a durable agent waits on (the model receives the refusal)",
    )
    .argument("<runId>", "the waiting run")
    .argument("<toolCallId>", "the tool call (see `dumplings runs`)")
    .option(
      "--note <text>",
      name === "approve"
        ? "what the reviewer says (the model receives it with the tool's result)"
        : `why (the model receives it; default "${DEFAULT_REJECTION}")`,
    )
    .addOption(new Option("--reason <text>", "the old name of --note").hideHelp());
  if (name === "approve") {
    command.option(
      "--args <json>",
      "corrected arguments (a JSON object; the tool runs with them; only for a tool of DurableAgent editableArgs)",
    );
  }
  return command
    .option("--queue <name>", "BullMQ queue to put the released run back on (Redis at $REDIS_URL)")
    .option("--json", "print JSON")
    .action(
      async (
        runId: string,
        toolCallId: string,
        options: JournalCliOptions & { note?: string; reason?: string; args?: string },
      ) => {
        const args = options.args === undefined ? undefined : parseArgs(options.args);
        const journal = await openJournal(options, { mustExist: true });
        try {
          const value = await decisionValue(
            journal,
            runId,
            toolCallId,
            {
              approved: name === "approve",
              ...(options.note !== undefined ? { note: options.note } : {}),
              ...(options.reason !== undefined ? { reason: options.reason } : {}),
              ...(args !== undefined ? { args } : {}),
            },
            `dumplings ${name}`,
          );
          const signalName = approvalSignalName(toolCallId);
          const result = await sendDecision(journal, runId, signalName, value, options.queue);
          if (options.json) printJson({ runId, signal: signalName, value, wakes: result.wakes });
          else process.stdout.write(`${resultLine(runId, signalName, result)}\n`);
        } catch (e) {
          throw await withRunHint(e, options);
        } finally {
          await journal.close();
        }
      },
    );
}

/** `--args JSON`: a JSON object, else a usage error naming what was given. */
function parseArgs(text: string): JsonObject {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (cause) {
    throw new DumplingsError("USAGE", `--args is not JSON: ${text}`, { cause });
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new UsageError(`--args must be a JSON object of the tool's arguments, e.g. '{"amount":40}', got ${text}`);
  }
  return value as JsonObject;
}

/**
 * The approval block of `dumplings runs RUN`: the tool, its whole arguments (pretty JSON, cut past 40 lines)
 * and the commands that decide it, or the decision waiting for the run's resume.
 *
 * @param runId - the run
 * @param a - one of its approvals ({@link pendingApprovals})
 * @returns lines of text, joined by `\n`
 */
export function renderApproval(runId: string, a: ApprovalView): string {
  const lines = [
    a.decision
      ? `${a.decision.approved ? "approved" : "rejected"} tool call ${a.toolCallId}${a.decision.args ? ` with arguments ${previewJson(a.decision.args, 80)}` : ""}${a.decision.note ? ` (${a.decision.note})` : ""}; pending resume: the run takes the decision when its worker, runDurable or --queue resumes it`
      : `pending approval of tool call ${a.toolCallId}: dumplings approve ${runId} ${a.toolCallId} [--note …]${a.editableArgs ? " [--args JSON]" : ""}  |  dumplings reject ${runId} ${a.toolCallId} --note …`,
  ];
  if (a.toolName === undefined) lines.push("  tool: (not found in the journal)");
  else {
    lines.push(`  tool: ${a.toolName}`);
    const args = JSON.stringify(a.input ?? null, null, 2).split("\n");
    const shown =
      args.length > 40 ? [...args.slice(0, 40), `… (${args.length - 40} more lines; --json for all)`] : args;
    lines.push(`  arguments: ${shown.join("\n    ")}`);
  }
  return lines.join("\n");
}

/** `dumplings approve RUN_ID TOOL_CALL_ID [--note …] [--args JSON] [--queue NAME]`. @returns the commander command */
export function approveCommand(): Command {
  return decisionCommand("approve");
}

/** `dumplings reject RUN_ID TOOL_CALL_ID [--note …] [--queue NAME]`. @returns the commander command */
export function rejectCommand(): Command {
  return decisionCommand("reject");
}

/**
 * `dumplings signal RUN_ID NAME [JSON]`: sends any signal (value defaults to `true`).
 *
 * @returns the commander command
 */
export function signalCommand(): Command {
  return withJournalOptions(new Command("signal"))
    .description("send a signal to a durable run (waitForSignal)")
    .argument("<runId>", "the run")
    .argument("<name>", "signal name")
    .argument("[json]", "JSON value (default: true)")
    .option("--queue <name>", "BullMQ queue to put the released run back on (Redis at $REDIS_URL)")
    .option("--json", "print JSON")
    .action(async (runId: string, name: string, json: string | undefined, options: JournalCliOptions) => {
      let value: JsonValue = true;
      if (json !== undefined) {
        try {
          value = JSON.parse(json) as JsonValue;
        } catch (cause) {
          throw new DumplingsError("USAGE", `the signal value is not JSON: ${json}`, { cause });
        }
      }
      const journal = await openJournal(options, { mustExist: true });
      try {
        const result = await sendDecision(journal, runId, name, value, options.queue);
        if (options.json) printJson({ runId, signal: name, value, wakes: result.wakes });
        else process.stdout.write(`${resultLine(runId, name, result)}\n`);
      } catch (e) {
        throw await withRunHint(e, options);
      } finally {
        await journal.close();
      }
    });
}

type OperatorAction = "cancel" | "reset" | "retry";

function operatorCommand(action: OperatorAction): Command {
  const descriptions: Record<OperatorAction, string> = {
    cancel: "cancel a durable run: it takes no more steps (a running step is aborted, a waiting run released)",
    reset: "drop a run's journal after step N; the run continues from step N+1 on its next resume",
    retry: "retry a failed or blocked run (its failed step runs again with a fresh retry budget)",
  };
  const command = withJournalOptions(new Command(action))
    .description(descriptions[action])
    .argument("<runId>", "the run");
  if (action === "cancel") command.option("--reason <text>", "why (recorded with the cancellation)");
  if (action === "reset") command.requiredOption("--to-step <n>", "last step to keep (-1: start over)");
  if (action !== "cancel")
    command.option("--queue <name>", "BullMQ queue to put the run back on (Redis at $REDIS_URL)");
  return command
    .option("--by <name>", "who is acting (recorded in the journal; default: user@host)")
    .option("--json", "print JSON")
    .action(async (runId: string, options: JournalCliOptions & { reason?: string; toStep?: string; by?: string }) => {
      let toSeq = 0;
      if (action === "reset") {
        toSeq = Number(options.toStep);
        if (!Number.isInteger(toSeq) || toSeq < -1) {
          throw new UsageError(`--to-step ${JSON.stringify(options.toStep)} is not a step number (an integer ≥ -1)`);
        }
      }
      const by = options.by ?? operatorName();
      const journal = await openJournal(options, { mustExist: true });
      try {
        const run = await operatorAction(journal, runId, action, { by, reason: options.reason, toSeq });
        const queued = action === "cancel" ? false : await requeue(journal, runId, options.queue);
        if (options.json) printJson({ run, queued });
        else {
          const next =
            action === "cancel"
              ? ""
              : queued
                ? "; queued again"
                : "; it continues on its next resume (runDurable, its worker, or pass --queue)";
          process.stdout.write(`${runId} is ${run.status} (${action} by ${by})${next}\n`);
        }
      } catch (e) {
        throw await withRunHint(e, options);
      } finally {
        await journal.close();
      }
    });
}

/** `dumplings cancel RUN_ID [--reason …]`. @returns the commander command */
export function cancelCommand(): Command {
  return operatorCommand("cancel");
}

/** `dumplings reset RUN_ID --to-step N [--queue NAME]`. @returns the commander command */
export function resetCommand(): Command {
  return operatorCommand("reset");
}

/** `dumplings retry RUN_ID [--queue NAME]`. @returns the commander command */
export function retryCommand(): Command {
  return operatorCommand("retry");
}

/**
 * All durable commands, for `program.addCommand(...)`.
 *
 * @returns `[runs, approve, reject, signal, cancel, reset, retry]`
 */
export function durableCommands(): Command[] {
  return [
    runsCommand(),
    approveCommand(),
    rejectCommand(),
    signalCommand(),
    cancelCommand(),
    resetCommand(),
    retryCommand(),
  ];
}
