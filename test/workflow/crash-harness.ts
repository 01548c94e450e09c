/**
 * Crash-test harness: runs the 20-node crash graph
 * (`test/fixtures/workflow/crash-graph.ts`) for several workflows at once in
 * real child processes, SIGKILLs them at random points, restarts them until
 * every workflow finishes, and checks each against an uninterrupted run.
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { expect } from "vitest";
import { type CheckpointStore, ResumableGraphRunner, type WorkflowState } from "../../src/workflow/index.js";
import { buildCrashGraph, NODE_NAMES, NODES } from "../fixtures/workflow/crash-graph.js";

const CHILD = fileURLToPath(new URL("../fixtures/workflow/child.ts", import.meta.url));
const ROOT = fileURLToPath(new URL("../../", import.meta.url));

/** How a child process ended. */
export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
}

/**
 * Starts the child; with `kill`, SIGKILLs it `delayMs` after it has reported `afterSteps`
 * checkpointed nodes (so the kill lands mid-run however fast or slow the machine is).
 * @returns how it ended
 */
export function runChild(
  env: Record<string, string>,
  kill?: { afterSteps: number; delayMs: number },
): Promise<ChildExit> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", CHILD], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stderr = "";
    let steps = 0;
    let armed = kill;
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    child.stdout.on("data", (d: Buffer) => {
      for (const ch of d.toString()) if (ch === "S") steps++;
      if (armed && steps >= armed.afterSteps) {
        const delay = armed.delayMs;
        armed = undefined;
        setTimeout(() => child.kill("SIGKILL"), delay);
      }
    });
    child.once("error", reject);
    child.once("exit", (code, signal) => resolve({ code, signal, stderr }));
  });
}

/** A small seeded PRNG (mulberry32), so a failing kill schedule can be replayed from its seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Comparable view of a final state (tool timings differ from run to run). */
export function comparable(s: WorkflowState): unknown {
  return {
    stepIndex: s.stepIndex,
    isFinished: s.isFinished,
    status: s.status,
    sharedMemory: s.sharedMemory,
    records: s.historyRecords.map((r) => [r.toolName, r.arguments, r.result]),
  };
}

/**
 * Runs `runs` workflows in child processes SIGKILLed `killRounds` times at random points,
 * then once more to completion; checks every workflow against an uninterrupted reference run
 * and every guarded side effect for exactly one execution.
 *
 * @returns ids of workflows that a kill interrupted mid-run, and kills that landed
 */
export async function crashRuns(options: {
  label: string;
  runs: number;
  env: Record<string, string>;
  store: CheckpointStore;
  effectsDb: string;
  seed: number;
  killRounds?: number;
  /** Upper bound of the random delay after the chosen checkpoint, ms. @default 15 */
  maxDelayMs?: number;
}): Promise<{ interrupted: Set<string>; landed: number }> {
  const rand = prng(options.seed);
  const where = `[${options.label}, seed ${options.seed}]`;

  // The uninterrupted reference run, in this process, same graph.
  const graph = buildCrashGraph(options.effectsDb);
  const refId = `${options.label}-ref`;
  const reference = (
    await new ResumableGraphRunner({ store: options.store, nodes: graph.nodes }).runOrResume(refId, {
      sharedMemory: { acc: 0 },
    })
  ).state;
  graph.close();
  expect(reference.isFinished).toBe(true);
  expect(reference.stepIndex).toBe(NODES);

  const ids = Array.from({ length: options.runs }, (_, i) => `${options.label}-run-${i}`);
  const unfinished = async () => {
    const out: string[] = [];
    for (const id of ids) if ((await options.store.summary(id))?.status !== "finished") out.push(id);
    return out;
  };
  const interrupted = new Set<string>();
  let landed = 0;
  for (let round = 0; round < (options.killRounds ?? 3); round++) {
    const todo = await unfinished();
    if (todo.length === 0) break;
    let remaining = 0;
    for (const id of todo) remaining += NODES - ((await options.store.summary(id))?.latestStep ?? 0);
    // Kill after a random number of checkpointed nodes, plus a random delay inside the next ones.
    const kill = {
      // within the first 80% of the remaining work, so the kill cannot miss the run's end
      afterSteps: 1 + Math.floor(rand() * Math.max(1, Math.floor(remaining * 0.8))),
      delayMs: Math.floor(rand() * (options.maxDelayMs ?? 15)),
    };
    const exit = await runChild({ ...options.env, WF_IDS: todo.join(",") }, kill);
    if (exit.signal === "SIGKILL") {
      landed++;
      const stepsAtKill = await Promise.all(
        todo.map(async (id) => [id, (await options.store.summary(id))?.latestStep] as const),
      );
      for (const [id, step] of stepsAtKill) if (step !== undefined && step > 0 && step < NODES) interrupted.add(id);
    } else {
      expect(exit.code, `${where} round ${round}: ${exit.stderr}`).toBe(0);
    }
  }
  const todo = await unfinished();
  if (todo.length > 0) {
    const exit = await runChild({ ...options.env, WF_IDS: todo.join(",") });
    expect(exit.code, `${where} final run: ${exit.stderr}`).toBe(0);
  }

  for (const id of ids) {
    const final = await options.store.loadLatest(id);
    expect(final, `${where} ${id}`).toBeDefined();
    expect(comparable(final!), `${where} ${id} differs from the uninterrupted run`).toEqual(comparable(reference));
    const history = await options.store.history(id);
    expect(history.map((h) => h.stepIndex)).toEqual(Array.from({ length: NODES + 1 }, (_, i) => i));
    expect(history.map((h) => h.nodeName)).toEqual(["__start__", ...NODE_NAMES]);
  }

  // Every guarded side effect happened exactly once per workflow, the reference's included.
  const effects = new Database(options.effectsDb, { readonly: true });
  const rows = effects
    .prepare(
      "SELECT workflow_id, COUNT(*) AS effects, SUM(n) AS executions, MAX(n) AS worst FROM effects GROUP BY workflow_id ORDER BY workflow_id",
    )
    .all() as { workflow_id: string; effects: number; executions: number; worst: number }[];
  effects.close();
  expect(rows.map((r) => r.workflow_id).sort()).toEqual([refId, ...ids].sort());
  for (const r of rows) {
    expect(r, `${where} side effects of ${r.workflow_id}`).toMatchObject({
      effects: NODES,
      executions: NODES,
      worst: 1,
    });
  }
  return { interrupted, landed };
}
