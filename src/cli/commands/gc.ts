/**
 * `dumplings gc --older-than 30d`: delete sessions last saved before a cut-off
 * (retention). A backend that offers its own `gc` (SQLite: one transaction on
 * the time of each session's last write, then an incremental vacuum, or a
 * full `VACUUM` with `--vacuum`) is asked to do it; any other backend is
 * scanned through the storage contract and each session whose `saved_at`
 * (`meta.savedAt`) is older is deleted by key. `--dry-run` scans the same
 * way and deletes nothing. A session whose header cannot be read has no known
 * age: the scan keeps it, names it on stderr (and in `--json`'s `unreadable`),
 * goes on with the others and exits 6 (`SESSIONS_UNREADABLE`).
 *
 * @module
 */
import { Command } from "commander";
import type { StateBackend } from "../../backends/types.js";
import { closeBackend, openBackendAsync } from "../../ops/backend.js";
import {
  ExitCode,
  errorLine,
  isItemFault,
  SessionsUnreadableError,
  type UnreadableSession,
  UsageError,
  unreadableLine,
  unreadableSession,
} from "../../ops/errors.js";
import { listKeysSorted, readHeaderOf } from "../../ops/sessions.js";
import { withBackendOptions } from "../backend.js";
import { parseDuration } from "../duration.js";
import { printJson } from "../output.js";

/** Options of `dumplings gc`. */
interface GcOptions {
  backend?: string;
  dir?: string;
  db?: string;
  olderThan?: string;
  dryRun?: boolean;
  vacuum?: boolean;
  json?: boolean;
}

/** Result of a collection, as printed by `gc --json`. */
export interface GcReport {
  backend: string;
  olderThanMs: number;
  /** ISO-8601 cut-off: sessions saved before it are deleted. */
  cutoff: string;
  dryRun: boolean;
  /** Keys deleted (or that would be, with `--dry-run`), when known. */
  deleted: string[];
  /** Number of sessions deleted. */
  count: number;
  /**
   * Sessions whose header cannot be read during a scan (their age is unknown: they are kept);
   * then the command exits 6. Empty when the backend collects by itself (SQLite).
   */
  unreadable: UnreadableSession[];
}

/** A backend with its own retention method (e.g. `SQLiteBackend.gc`, which returns `{ deleted }`). */
interface GcCapable {
  gc(options: { olderThanMs: number; vacuum?: boolean }): unknown;
}

function hasGc(backend: StateBackend): backend is StateBackend & GcCapable {
  return typeof (backend as Partial<GcCapable>).gc === "function";
}

/**
 * Builds the `gc` command.
 *
 * @returns the commander command
 * @example
 * dumplings gc --older-than 30d --backend sqlite
 */
export function gcCommand(): Command {
  return withBackendOptions(new Command("gc"))
    .description("delete sessions last saved longer ago than a duration (e.g. 30d, 12h)")
    .option("--older-than <duration>", "age cut-off: a number and a unit (ms, s, m, h, d, w), e.g. 30d")
    .option("--dry-run", "list what would be deleted, delete nothing")
    .option("--vacuum", "compact the database file with a full VACUUM after deleting (SQLite)")
    .option("--json", "print JSON")
    .action(async (options: GcOptions) => {
      if (options.olderThan === undefined)
        throw new UsageError("gc needs --older-than <duration>, e.g. --older-than 30d");
      const olderThanMs = parseDuration(options.olderThan);
      const cutoffMs = Date.now() - olderThanMs;
      const { backend, label } = await openBackendAsync(options, process.env, { mustExist: true });
      try {
        const report: GcReport = {
          backend: label,
          olderThanMs,
          cutoff: new Date(cutoffMs).toISOString(),
          dryRun: options.dryRun === true,
          deleted: [],
          count: 0,
          unreadable: [],
        };
        let failure: SessionsUnreadableError | undefined;
        if (!options.dryRun && hasGc(backend)) {
          const result = await backend.gc({ olderThanMs, vacuum: options.vacuum === true });
          const { keys, count } = readGcResult(result);
          report.deleted = keys;
          report.count = count;
        } else {
          const keys = await listKeysSorted(backend);
          for (const key of keys) {
            let savedAtText: string;
            try {
              savedAtText = (await readHeaderOf(backend, key, label)).meta.savedAt;
            } catch (e) {
              // A session whose header cannot be read has no known age: it is kept, named, and the scan goes on.
              if (!isItemFault(e)) throw e;
              report.unreadable.push(unreadableSession(key, e));
              continue;
            }
            const savedAt = Date.parse(savedAtText);
            if (!Number.isFinite(savedAt) || savedAt >= cutoffMs) continue;
            if (!options.dryRun) await backend.delete(key);
            report.deleted.push(key);
          }
          report.count = report.deleted.length;
          if (report.unreadable.length > 0) {
            failure = new SessionsUnreadableError(
              report.unreadable,
              keys.length,
              label,
              "cannot be read",
              `${report.unreadable.length === 1 ? "its age is" : "their ages are"} unknown, so ${report.unreadable.length === 1 ? "it was" : "they were"} kept; the others were ${options.dryRun ? "checked" : "collected"}`,
            );
            process.exitCode = ExitCode.partial;
          }
        }
        const unreadableLines = () => {
          if (!failure) return;
          for (const s of report.unreadable) process.stderr.write(`${unreadableLine(s)}\n`);
          process.stderr.write(`${errorLine(failure)}\n`);
        };
        if (options.json) {
          printJson({
            ...report,
            ...(failure ? { error: { code: failure.code, message: failure.message, exitCode: ExitCode.partial } } : {}),
          });
          unreadableLines();
          return;
        }
        const verb = options.dryRun ? "would delete" : "deleted";
        for (const key of report.deleted) process.stdout.write(`${verb} ${key}\n`);
        process.stdout.write(
          `${verb} ${report.count} session${report.count === 1 ? "" : "s"} saved before ${report.cutoff} from ${label}${report.unreadable.length > 0 ? `; kept ${report.unreadable.length} unreadable` : ""}\n`,
        );
        unreadableLines();
      } finally {
        await closeBackend(backend);
      }
    });
}

/** Reads the keys/count out of a backend's own gc result (a count, a key list, or an object with either). */
function readGcResult(result: unknown): { keys: string[]; count: number } {
  if (typeof result === "number") return { keys: [], count: result };
  if (Array.isArray(result)) return { keys: result.map(String), count: result.length };
  if (result !== null && typeof result === "object") {
    const r = result as { deleted?: unknown; keys?: unknown; count?: unknown };
    const list = Array.isArray(r.deleted) ? r.deleted : Array.isArray(r.keys) ? r.keys : undefined;
    if (list) return { keys: list.map(String), count: list.length };
    if (typeof r.deleted === "number") return { keys: [], count: r.deleted };
    if (typeof r.count === "number") return { keys: [], count: r.count };
  }
  return { keys: [], count: 0 };
}
