/**
 * The order and the cursor of {@link Journal.listRuns}, the same in every journal (issue 25 item 7).
 *
 * Runs are listed newest created first, by `(createdAt, runId)`, both descending. Both are fixed
 * when a run is created and never change, so a run keeps its place however often it is updated:
 * a walk page by page ({@link runCursor} of a page's last run as the next page's `after`) lists
 * each run exactly once while runs are updated, leased, cancelled or retried between the pages.
 * A run created during the walk is newer than the walk's first page: it is not listed by the
 * later pages (a new walk shows it first), and never twice. A run deleted during the walk is not
 * listed once its page is read after the delete. With a `status` filter, a run is listed when it
 * has that status as its page is read.
 *
 * The cursors of earlier releases named a position in update order (`[updatedAt, runId]`): they
 * are refused with an {@link InvalidOptionError} that says to list again from the first page.
 *
 * @module
 */
import { InvalidOptionError } from "../core/errors.js";
import { checkOptions, optionKeys } from "../core/options.js";
import type { ListRunsFilter, RunRecord, RunStatus } from "./journal-types.js";

/** Every {@link RunStatus}, in a run's usual order (internal: `listRuns` and `dumplings runs --status` check against it). */
export const RUN_STATUSES: readonly RunStatus[] = [
  "pending",
  "running",
  "waiting",
  "blocked",
  "completed",
  "failed",
  "cancelled",
];

/** The keys of {@link ListRunsFilter}: any other is an `InvalidOptionError`. */
const LIST_RUNS_KEYS = optionKeys<ListRunsFilter>({ status: true, workflow: true, limit: true, after: true });

/** The tag of a cursor in creation order (a cursor of an earlier release, in update order, has none). */
const CREATED = "created";

/**
 * The opaque cursor of a run in {@link Journal.listRuns}' order (newest created first): pass it as
 * `after` to list the runs created before it. It encodes the run's `createdAt` and `runId`, which
 * never change, so the walk lists each run once while runs are updated between its pages; the
 * same in every journal.
 *
 * @param run - a run as listed (only `createdAt` and `runId` are read)
 * @returns a URL-safe string
 * @example
 * const page = await journal.listRuns({ workflow: "graph", limit: 50 });
 * const next = await journal.listRuns({ workflow: "graph", limit: 50, after: runCursor(page.at(-1)!) });
 */
export function runCursor(run: Pick<RunRecord, "createdAt" | "runId">): string {
  return Buffer.from(JSON.stringify([CREATED, run.createdAt, run.runId]), "utf8").toString("base64url");
}

/** A {@link ListRunsFilter} checked, its cursor decoded. */
export interface CheckedListRuns {
  status?: RunStatus;
  workflow?: string;
  limit: number;
  /** The position after which the page starts: runs created before it (or at the same ms with a lower id). */
  after?: { createdAt: number; runId: string };
}

/**
 * Checks a {@link ListRunsFilter} (shared by the stores) and decodes its cursor.
 * @throws {InvalidOptionError} on an unknown key, a bad value, or a cursor of an earlier release
 */
export function checkListRuns(store: string, filter: ListRunsFilter | undefined): CheckedListRuns {
  const component = `${store} listRuns`;
  if (filter === undefined || filter === null) return { limit: 1000 };
  if (typeof filter !== "object") {
    throw new InvalidOptionError(component, "filter", "must be an object { status?, workflow?, limit?, after? }");
  }
  checkOptions(component, filter, LIST_RUNS_KEYS);
  const { status, workflow, limit = 1000, after } = filter;
  if (!Number.isSafeInteger(limit) || limit < 1) {
    throw new InvalidOptionError(component, "limit", `must be an integer ≥ 1, got ${String(limit)}`);
  }
  if (status !== undefined && (typeof status !== "string" || !RUN_STATUSES.includes(status as RunStatus))) {
    throw new InvalidOptionError(
      component,
      "status",
      `must be one of ${RUN_STATUSES.join(", ")}, got ${typeof status === "string" ? JSON.stringify(status) : typeof status}`,
    );
  }
  if (workflow !== undefined && typeof workflow !== "string") {
    throw new InvalidOptionError(component, "workflow", `must be a string, got ${typeof workflow}`);
  }
  const out: CheckedListRuns = { limit };
  if (status) out.status = status;
  if (workflow !== undefined) out.workflow = workflow;
  if (after !== undefined) out.after = decodeRunCursor(component, "after", after);
  return out;
}

/**
 * Decodes a {@link runCursor}.
 *
 * @param component - names the caller in the error, e.g. `sqlite listRuns`
 * @param option - the option that carried the cursor, e.g. `after`
 * @param text - the cursor as given
 * @returns its run's `createdAt` and `runId`
 * @throws {InvalidOptionError} when `text` is not a cursor, or is one of an earlier release (update order)
 */
export function decodeRunCursor(
  component: string,
  option: string,
  text: unknown,
): { createdAt: number; runId: string } {
  let v: unknown;
  try {
    v = typeof text === "string" ? JSON.parse(Buffer.from(text, "base64url").toString("utf8")) : undefined;
  } catch {
    v = undefined;
  }
  if (
    Array.isArray(v) &&
    v.length === 3 &&
    v[0] === CREATED &&
    Number.isSafeInteger(v[1]) &&
    typeof v[2] === "string"
  ) {
    return { createdAt: v[1] as number, runId: v[2] };
  }
  if (Array.isArray(v) && v.length === 2 && Number.isSafeInteger(v[0]) && typeof v[1] === "string") {
    throw new InvalidOptionError(
      component,
      option,
      `${JSON.stringify(text)} is a cursor of an earlier release, which listed by update time: this one lists newest created first, so that a walk lists each item once while items change; list again from the first page`,
    );
  }
  throw new InvalidOptionError(
    component,
    option,
    `${JSON.stringify(text)} is not a cursor: pass the cursor of the last item of the previous page`,
  );
}

/**
 * The SQL journals' `listRuns` query: one keyset query on an index of `(created_at, run_id)`
 * (after `workflow`, `status`, or both when filtered; migration 7 of the journal's tables):
 * `(created_at, run_id) < cursor`, `ORDER BY created_at DESC, run_id DESC LIMIT limit`, `run_id`
 * compared byte by byte (UTF-8) as in every journal.
 *
 * @param runs - the quoted runs table
 * @param f - the checked filter
 * @param bytewise - what makes `run_id` compare byte by byte in this database (`RUN_ID_BYTEWISE`)
 * @returns the statement (`$n` placeholders) and its values
 */
export function sqlListRuns(runs: string, f: CheckedListRuns, bytewise: string): { text: string; values: unknown[] } {
  const id = `run_id${bytewise}`;
  const where: string[] = [];
  const values: unknown[] = [];
  if (f.workflow !== undefined) {
    values.push(f.workflow);
    where.push(`workflow = $${values.length}`);
  }
  if (f.status !== undefined) {
    values.push(f.status);
    where.push(`status = $${values.length}`);
  }
  if (f.after !== undefined) {
    values.push(f.after.createdAt, f.after.runId);
    where.push(`(created_at, ${id}) < ($${values.length - 1}, $${values.length})`);
  }
  values.push(f.limit);
  const text = `SELECT * FROM ${runs}${where.length ? ` WHERE ${where.join(" AND ")}` : ""}
       ORDER BY created_at DESC, ${id} DESC LIMIT $${values.length}`;
  return { text, values };
}
