/**
 * The targets `npm run bench` checks, each printed as one MET / MISS line with
 * the measured value and the threshold, and written to the JSON results.
 *
 * Every ratio is taken within one run (the same machine load for both
 * sides). A target whose measurement did not run (a server down, `--only`)
 * is `NOT RUN`, never silently left out.
 *
 * @module
 */
import type { Result, ScenarioResults } from "./results.js";
import { RUN_SHAPES, VERCEL_WORKFLOW_LOCAL } from "./runs.js";

/** One checked target. */
export interface TargetCheck {
  /** Stable id of the target, e.g. `save-vs-floor`. */
  id: string;
  /** What was measured: a store, a journal, … */
  subject: string;
  /** What the measured value is. */
  what: string;
  /** Measured value (`unit`), `null` when not run. */
  measured: number | null;
  /** The bound: `≤ threshold` or `≥ threshold` (`direction`). */
  threshold: number;
  direction: "<=" | ">=";
  unit: "×" | "µs" | "ms";
  status: "MET" | "MISS" | "NOT RUN";
  /** Context printed after the bound (e.g. the floor's own ratio), when any. */
  note?: string;
  /** The printed line. */
  line: string;
}

function check(
  id: string,
  subject: string,
  what: string,
  measured: number | undefined,
  direction: "<=" | ">=",
  threshold: number,
  unit: "×" | "µs" | "ms",
  note?: string,
): TargetCheck {
  const ok = measured !== undefined && Number.isFinite(measured);
  const status = !ok
    ? "NOT RUN"
    : (direction === "<=" ? measured <= threshold : measured >= threshold)
      ? "MET"
      : "MISS";
  const shown = !ok
    ? "not measured"
    : unit === "×"
      ? `${measured.toFixed(measured < 10 ? 2 : 0)}×`
      : `${measured.toFixed(1)} ${unit}`;
  const bound = `${direction === "<=" ? "≤" : "≥"} ${threshold}${unit === "×" ? "×" : ` ${unit}`}`;
  return {
    id,
    subject,
    what,
    measured: ok ? measured : null,
    threshold,
    direction,
    unit,
    status,
    ...(note ? { note } : {}),
    line: `${status.padEnd(7)} ${subject}: ${what} ${shown} (target ${bound})${note ? `; ${note}` : ""}`,
  };
}

const FAMILIES = ["file", "sqlite", "redis", "postgres", "memory"] as const;
/** saveState p50 bound, as a multiple of the store's floor. */
const SAVE_BOUND: Record<string, number> = { file: 1.5, sqlite: 2, redis: 2, postgres: 2 };
const FLOOR_NAME: Record<string, string> = {
  file: "JSONL append + fdatasync",
  sqlite: "SQLite row per message",
  redis: "Redis RPUSH",
  postgres: "PostgreSQL INSERT per message",
};

/**
 * Checks every target of the "saves at the speed of the storage" issue.
 *
 * @param results - the save-after-every-message results
 * @param scenarios - the extra scenarios
 * @param opts - `at`: the scenario the save targets are read from (N = 10,000; N = 1,000 with `--quick`)
 */
export function checkTargets(results: Result[], scenarios: ScenarioResults, opts: { at: string }): TargetCheck[] {
  const out: TargetCheck[] = [];
  const at = results.filter((r) => r.scenario === opts.at);
  const agent = (f: string) => at.find((r) => r.group === "agent" && r.family === f);
  const floor = (f: string) => at.find((r) => r.group === "baseline" && r.family === f);
  const div = (a: number | undefined, b: number | undefined) =>
    a === undefined || b === undefined || b === 0 ? undefined : a / b;
  for (const f of ["file", "sqlite", "redis", "postgres"]) {
    out.push(
      check(
        "save-vs-floor",
        `saveState ${f}`,
        `p50 / ${FLOOR_NAME[f]} p50 =`,
        div(agent(f)?.p50, floor(f)?.p50),
        "<=",
        SAVE_BOUND[f]!,
        "×",
      ),
    );
  }
  for (const f of FAMILIES) {
    const r = agent(f);
    // The floor's own ratio, run in lockstep: when it moved too, the machine changed, not the store.
    const fl = floor(f);
    const own = div(fl?.last40, fl?.first40);
    const note = own === undefined ? undefined : `the floor's own in lockstep: ${own.toFixed(2)}×`;
    out.push(
      check("flat", `saveState ${f}`, "last 40 p50 / first 40 p50 =", div(r?.last40, r?.first40), "<=", 1.5, "×", note),
    );
  }
  for (const f of ["file", "sqlite", "redis", "postgres"]) {
    out.push(
      check(
        "load-vs-floor",
        `loadState ${f}`,
        `load of the history / the ${FLOOR_NAME[f]} floor's read + parse =`,
        div(agent(f)?.loadMs, floor(f)?.loadMs),
        "<=",
        1.2,
        "×",
      ),
    );
  }
  const lg = at.find((r) => r.store === "LangGraph SqliteSaver");
  for (const f of FAMILIES) {
    out.push(
      check(
        "total-vs-sqlitesaver",
        `saveState ${f}`,
        `LangGraph SqliteSaver total save time / ours =`,
        div(lg?.totalMs, agent(f)?.totalMs),
        ">=",
        300,
        "×",
      ),
    );
  }
  for (const f of FAMILIES) {
    const p = scenarios.prompt.find((x) => x.family === f);
    out.push(
      check(
        "prompt-50mb",
        `saveState ${f}`,
        "one-message save p50 with a 50 MB prompt / with a 1 KB prompt =",
        div(p?.largeP50, p?.smallP50),
        "<=",
        1.5,
        "×",
      ),
    );
  }
  const cpu = scenarios.cpu.find((c) => c.store === "saveState: file (.duas)");
  out.push(
    check(
      "cpu-tmpfs",
      "saveState file",
      `CPU per save on ${cpu?.tmpfs ? "tmpfs" : "(no tmpfs here)"} minus the encoding of the new bytes =`,
      cpu ? cpu.cpuPerSave - cpu.encodePerSave : undefined,
      "<=",
      30,
      "µs",
    ),
  );
  for (const j of ["sqlite", "postgres", "redis"] as const) {
    const d = scenarios.durable.find((x) => x.journal === j);
    out.push(
      check(
        "durable-step",
        `${j} journal`,
        "journaled step p50 / raw write p50 of its record =",
        div(d?.stepP50, d?.floorWriteP50),
        "<=",
        2,
        "×",
      ),
    );
  }
  for (const j of ["sqlite", "postgres", "redis"] as const) {
    const d = scenarios.durable.find((x) => x.journal === j);
    out.push(
      check(
        "replay",
        `${j} journal`,
        `replay of ${(d?.steps ?? 1000).toLocaleString("en-US")} recorded steps / raw read of their rows =`,
        div(d?.replayMs, d?.rawReadMs),
        "<=",
        1.5,
        "×",
      ),
    );
  }
  const c = scenarios.checkpoint;
  out.push(
    check(
      "checkpoint-100kb",
      "workflow checkpoint",
      `CheckpointStore.save p50 of a ${c ? Math.round(c.stateBytes / 1024) : 100} KB state / (SQLite INSERT + Redis SET) p50 =`,
      div(c?.saveP50, c?.floorP50),
      "<=",
      2,
      "×",
    ),
  );
  for (const f of FAMILIES) {
    const r = scenarios.chat.find((x) => x.family === f && x.shape === "UIMessage");
    out.push(
      check(
        "chat-save-5000",
        `chat save ${f}`,
        `one more UIMessage to a ${r?.long ?? 5000}-message chat / to a ${r?.short ?? 10}-message chat (fresh JSON.parse arrays), p50 =`,
        div(r?.longP50, r?.shortP50),
        "<=",
        3,
        "×",
      ),
    );
  }
  for (const f of FAMILIES) {
    const r = scenarios.chat.find((x) => x.family === f && x.shape === "saveState");
    out.push(
      check(
        "parsed-save-5000",
        `saveState ${f}`,
        `one more message to a ${r?.long ?? 5000}-message history replaced by parsed copies / to a ${r?.short ?? 10}-message one, p50 =`,
        div(r?.longP50, r?.shortP50),
        "<=",
        3,
        "×",
      ),
    );
  }
  out.push(...runTargets(scenarios));
  for (const command of ["dumplings --help", "dumplings ls (empty store)"]) {
    const r = scenarios.startup.find((x) => x.command === command);
    out.push(
      check(
        "cli-startup",
        command,
        "spawn to exit p50 =",
        r?.p50Ms,
        "<=",
        300,
        "ms",
        r ? `node -e 0 p50 ${r.nodeP50Ms.toFixed(0)} ms in the same run` : undefined,
      ),
    );
  }
  return out;
}

/**
 * The targets of durable runs in Vercel Workflow's shapes and of queued runs on workers (issue 27,
 * items 2 and 3): a run's p50 ≤ 2× the floor of as many record writes, per shape and journal; 2 worker
 * processes ≥ 1.6× the runs per second of one; a run's cost on one worker ≤ 2× a raw BullMQ job's
 * doing the same record writes.
 */
export function runTargets(scenarios: Pick<ScenarioResults, "runs" | "workers">): TargetCheck[] {
  const out: TargetCheck[] = [];
  for (const j of ["sqlite", "postgres", "redis"] as const) {
    for (const shape of RUN_SHAPES) {
      const r = scenarios.runs.find((x) => x.journal === j && x.shape === shape.id);
      out.push(
        check(
          "run-shape",
          `${j} journal, ${shape.label}`,
          `run start to result p50 / ${shape.steps + 1} raw record write${shape.steps === 0 ? "" : "s"}${shape.parallel ? " (the steps' in one Promise.all)" : ""} p50 =`,
          r ? r.p50Ms / r.floorP50Ms : undefined,
          "<=",
          2,
          "×",
          r
            ? `${r.p50Ms.toFixed(2)} ms; Vercel Workflow's local world publishes ${VERCEL_WORKFLOW_LOCAL.ms[shape.id]?.toLocaleString("en-US")} ms`
            : undefined,
        ),
      );
    }
  }
  for (const j of ["redis", "postgres"] as const) {
    const find = (mode: "durable" | "raw", workers: number) =>
      scenarios.workers.find((x) => x.journal === j && x.mode === mode && x.workers === workers);
    const [one, two, rawOne, rawTwo] = [find("durable", 1), find("durable", 2), find("raw", 1), find("raw", 2)];
    out.push(
      check(
        "workers-scale",
        `DurableWorker, ${j} journal`,
        "runs/s with 2 worker processes / with 1 =",
        one && two ? two.runsPerSecond / one.runsPerSecond : undefined,
        ">=",
        1.6,
        "×",
        rawOne && rawTwo ? `raw BullMQ's own: ${(rawTwo.runsPerSecond / rawOne.runsPerSecond).toFixed(2)}×` : undefined,
      ),
    );
    out.push(
      check(
        "workers-overhead",
        `DurableWorker, ${j} journal`,
        `ms per run of ${one?.steps ?? 3} steps on 1 worker / a raw BullMQ job's doing as many record writes =`,
        one && rawOne ? rawOne.runsPerSecond / one.runsPerSecond : undefined,
        "<=",
        2,
        "×",
        one && rawOne
          ? `${(1000 / one.runsPerSecond).toFixed(2)} ms against ${(1000 / rawOne.runsPerSecond).toFixed(2)} ms`
          : undefined,
      ),
    );
  }
  return out;
}

/**
 * The targets of earlier work, still checked: the backend-level `write` rows
 * against the floors and LangGraph's `SqliteSaver`, and the `DumplingsSaver`
 * rows against LangGraph's savers.
 */
export function earlierTargets(results: Result[], atName: string): TargetCheck[] {
  const out: TargetCheck[] = [];
  const at = results.filter((r) => r.scenario === atName);
  const jsonl = at.find((r) => r.group === "baseline" && r.family === "file");
  const lg = at.find((r) => r.store === "LangGraph SqliteSaver");
  for (const [ours, theirs] of [
    ["DumplingsSaver (sqlite)", "LangGraph SqliteSaver"],
    ["DumplingsSaver (postgres)", "LangGraph PostgresSaver"],
  ] as const) {
    const r = at.find((x) => x.store === ours);
    const l = at.find((x) => x.store === theirs);
    if (!r || !l) continue;
    out.push(check("cp-flat", ours, "last 40 / first 40 =", r.last40 / r.first40, "<=", 1.5, "×"));
    if (r.size !== undefined)
      out.push(check("cp-stored", ours, "stored / raw JSONL =", r.size / r.rawBytes, "<=", 5, "×"));
    out.push(check("cp-total", ours, `${theirs} total / ours =`, l.totalMs / r.totalMs, ">=", 10, "×"));
  }
  for (const r of at.filter((x) => x.group === "backend")) {
    const base = at.find((b) => b.group === "baseline" && b.family === r.family);
    if (base) out.push(check("write-vs-floor", r.store, `p50 / ${base.store} p50 =`, r.p50 / base.p50, "<=", 3, "×"));
    out.push(check("write-flat", r.store, "last 40 / first 40 =", r.last40 / r.first40, "<=", 1.5, "×"));
    if (lg)
      out.push(
        check("write-total", r.store, "LangGraph SqliteSaver total / ours =", lg.totalMs / r.totalMs, ">=", 100, "×"),
      );
    if (r.size !== undefined)
      out.push(check("write-stored", r.store, "stored / raw JSONL =", r.size / r.rawBytes, "<=", 1.3, "×"));
    if (jsonl) out.push(check("write-load", r.store, "load / JSONL parse =", r.loadMs / jsonl.loadMs, "<=", 1.5, "×"));
  }
  return out;
}
