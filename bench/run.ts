/**
 * `npm run bench`: the cost of making an agent's conversation durable, as
 * users pay it, next to the raw floor of each store, in one run.
 *
 * Main table: a `BaseAgent` saved with `agent.saveState(key)` after every
 * pushed message (file `.duas`, SQLite, Redis, PostgreSQL, memory), at N =
 * 1,000 and 10,000 messages, beside each store's raw floor (JSONL append +
 * fdatasync; an SQLite row per message, WAL, the backend's `synchronous` (FULL); Redis
 * RPUSH; a PostgreSQL INSERT per message) and LangGraph.js's `SqliteSaver`
 * and `PostgresSaver`. The histories are built by concatenating the real
 * recorded messages of the data set's conversations (a construction: no real
 * conversation is that long). Each store runs in lockstep with its floor
 * (see `measure`), so the ratios stay fair on a machine shared with other work.
 *
 * Second table: the backends' `write` driven directly (as the persistence
 * layer drives it), at the same N and on every real conversation of the data
 * set (the full shared set when present, else the bundled subset). Third:
 * LangGraph.js checkpointers, LangGraph's and our `DumplingsSaver`.
 *
 * Then the scenarios of `scenarios.ts` (50 MB prompt, CPU per save on tmpfs,
 * durable steps and replay, workflow checkpoints), and a MET/MISS line for
 * every target, written with the measurements to the JSON results.
 *
 * For every store and N: save p50/p99 (µs), p50 of the first and last 40
 * saves, total save time, bytes written (the `wchar` counter of
 * /proc/self/io: every byte this process handed to write(2)/send(2), to files
 * or to a server's socket), final storage size and load time (median of 3
 * loads); each as a ratio to the floor of the same kind of store in the same
 * run. Whole-history stores (LangGraph) are sampled in windows of 40 saves
 * above N = 2,000 (with `--quick`, above 500) and their totals extrapolated
 * from a least-squares line through the windows (their per-save cost grows
 * linearly with the history), which the tables mark with `~`.
 *
 * Chat saves from request bodies: `createChatStore(...).save` of a freshly
 * parsed array one message longer each time, 5,000 messages against 10, on
 * every backend (`--chat-only`: that scenario alone, with its target).
 *
 * Options: `--quick` (N = 1,000 only, the bundled data, fewer repeats;
 * targets are then checked at N = 1,000, indicatively), `--only <regex>`
 * (stores whose name matches it, case-insensitive; the extra scenarios run
 * only without it or with `--scenarios`), `--json <file>` (raw results,
 * default `bench/results/latest.json`), `--chart <file.svg>`,
 * `--checkpoint-chart <file.svg>` (the checkpointers' chart), `--runs-chart <file.svg>` (run latency
 * per shape).
 *
 * Durable runs in Vercel Workflow's shapes and queued runs on worker processes (`runs.ts`):
 * `--runs-only` runs those alone, with their targets.
 *
 * @module
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import type { Message } from "../src/core/messages.js";
import { loadSampleConversations } from "../src/testing/samples.js";
import { renderChart, renderRunChart } from "./chart.js";
import { allStores, type BackendSpec, type BenchContext, type BenchStore, backendSpecs } from "./registry.js";
import type { Result, ScenarioResults } from "./results.js";
import {
  floorWrites,
  RUN_SHAPES,
  type RunShapeResult,
  runShapesScenario,
  VERCEL_WORKFLOW_LOCAL,
  type WorkerResult,
  workerScenario,
} from "./runs.js";
import {
  type ChatSaveResult,
  type CheckpointResult,
  type CpuResult,
  chatSaveScenario,
  checkpointScenario,
  cliStartupScenario,
  cpuPerSave,
  type DurableResult,
  durableScenario,
  jsonlAppender,
  median,
  newContext,
  type PromptResult,
  promptScenario,
  promptText,
  quantile,
  type StartupResult,
  tmpfsRoot,
} from "./scenarios.js";
import { agentStore } from "./stores.js";
import { checkTargets, earlierTargets, runTargets, type TargetCheck } from "./targets.js";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const only = argValue("--only");
const chatOnly = args.includes("--chat-only");
const runsOnly = args.includes("--runs-only");
const runScenarios = !only || args.includes("--scenarios") || chatOnly || runsOnly;
const jsonOut = argValue("--json") ?? "bench/results/latest.json";
// The committed charts (docs/) are the full run's; a quick run draws its own under bench/results/.
const chartOut = argValue("--chart") ?? (quick ? "bench/results/save-time-quick.svg" : "docs/bench-save-time.svg");
const checkpointChartOut =
  argValue("--checkpoint-chart") ??
  (quick ? "bench/results/checkpoint-time-quick.svg" : "docs/bench-checkpoint-time.svg");
const runsChartOut =
  argValue("--runs-chart") ?? (quick ? "bench/results/run-shapes-quick.svg" : "docs/bench-run-shapes.svg");
const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const WINDOW = 40;
/** Above this history length, whole-history stores are sampled in windows (see the module comment). */
const SAMPLE_ABOVE = quick ? 500 : 2000;
/** History lengths of the synthetic scenarios. */
const SIZES = quick ? [1000] : [1000, 10_000];
/** Loads per (store, scenario); the median is reported. */
const LOADS = 3;
/** The agents' system prompt in the main table and the small side of the prompt scenario. */
const SMALL_PROMPT = 1024;
const LARGE_PROMPT = 50 * 1024 * 1024;

function argValue(name: string): string | undefined {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}

function wchar(): number {
  try {
    const m = /wchar:\s*(\d+)/.exec(readFileSync("/proc/self/io", "utf8"));
    return m ? Number(m[1]) : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

function reachable(url: string, port: number): Promise<boolean> {
  const u = new URL(url);
  return new Promise((resolve) => {
    const s = net.connect({ host: u.hostname || "127.0.0.1", port: Number(u.port || port) });
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(1000, () => done(false));
    s.once("connect", () => done(true));
    s.once("error", () => done(false));
  });
}

/** What {@link measure} accumulates for one store of a group. */
interface Tally {
  durations: number[];
  points: [number, number, number][]; // of the first conversation: [length, µs, bytes]
  totalMs: number;
  bytes: number;
  size: number;
  sizeKnown: boolean;
  loadMs: number;
  extrapolated: boolean;
}

/**
 * Saves every conversation after every message into each store of `group`,
 * in lockstep: message i is saved to the first store, then to the second, …,
 * before message i + 1, so a burst of load on the machine (other processes'
 * disk or CPU) hits every store of the group alike, and their ratios stay
 * fair. Loads are interleaved the same way. A whole-history store (sampled in
 * windows at large N) is measured alone.
 */
async function measure(group: BenchStore[], scenario: string, conversations: Message[][]): Promise<Result[]> {
  if (group.length > 1 && group.some((s) => s.wholeHistory)) throw new Error("a sampled store is measured alone");
  const tallies: Tally[] = group.map(() => ({
    durations: [],
    points: [],
    totalMs: 0,
    bytes: 0,
    size: 0,
    sizeKnown: true,
    loadMs: 0,
    extrapolated: false,
  }));
  let n = 0;
  let rawBytes = 0;
  for (const [ci, messages] of conversations.entries()) {
    const contexts = group.map(() => newContext(REDIS_URL, DATABASE_URL));
    const opened: BenchStore[] = [];
    try {
      for (const [k, store] of group.entries()) {
        await store.open(contexts[k]!);
        opened.push(store);
      }
      const N = messages.length;
      n = Math.max(n, N);
      rawBytes += messages.reduce((s, m) => s + Buffer.byteLength(JSON.stringify(m)) + 1, 0);
      const sampled = group[0]!.wholeHistory === true && N > SAMPLE_ABOVE;
      const starts = sampled ? [0, Math.floor(N * 0.25), Math.floor(N * 0.5), Math.floor(N * 0.75), N - WINDOW] : [0];
      const points: [number, number, number][][] = group.map(() => []);
      for (const start of starts) {
        const end = sampled ? start + WINDOW : N;
        // One growing array per store, as an agent's history grows: no per-save copying in the measured loop.
        const histories = group.map(() => messages.slice(0, start));
        for (let i = start; i < end; i++) {
          for (const [k, store] of group.entries()) {
            const history = histories[k]!;
            history.push(messages[i]!);
            const w0 = wchar();
            const t0 = performance.now();
            await store.save(history);
            const us = (performance.now() - t0) * 1000;
            const b = wchar() - w0;
            const t = tallies[k]!;
            t.durations.push(us);
            points[k]!.push([i + 1, us, b]);
            if (!sampled) {
              t.totalMs += us / 1000;
              t.bytes += b;
            }
          }
        }
      }
      for (const [k, t] of tallies.entries()) {
        if (sampled) {
          t.extrapolated = true;
          const fitUs = linearFit(points[k]!.map(([x, y]) => [x, y]));
          const fitB = linearFit(points[k]!.map(([x, , b]) => [x, b]));
          // Σ_{x=1..N} (a + b·x) = N·a + b·N(N+1)/2
          const sum = (f: { a: number; b: number }) => N * f.a + (f.b * N * (N + 1)) / 2;
          t.totalMs += sum(fitUs) / 1000;
          t.bytes += sum(fitB);
        }
        if (ci === 0) t.points = points[k]!;
      }
      const loads: number[][] = group.map(() => []);
      for (let l = 0; l < (conversations.length === 1 ? LOADS : 1); l++) {
        for (const [k, store] of group.entries()) {
          const t0 = performance.now();
          const loaded = await store.load();
          loads[k]!.push(performance.now() - t0);
          if (loaded.length !== N || JSON.stringify(loaded.at(-1)) !== JSON.stringify(messages.at(-1))) {
            throw new Error(`${store.name}: loaded ${loaded.length} messages, expected ${N} equal to the input`);
          }
        }
      }
      for (const [k, store] of group.entries()) {
        const t = tallies[k]!;
        t.loadMs += median(loads[k]!);
        const s = await store.size();
        if (s === undefined) t.sizeKnown = false;
        else if (sampled) {
          // Storage of a whole-history store after N saves ≈ what it holds now × (N saves / saves made).
          t.size += (s * N) / points[k]!.length;
        } else t.size += s;
      }
    } finally {
      for (const store of opened) await store.close();
      for (const ctx of contexts) rmSync(ctx.dir, { recursive: true, force: true });
    }
  }
  return group.map((store, k) => {
    const t = tallies[k]!;
    const series = t.points.map((p) => p[1]);
    return {
      scenario,
      store: store.name,
      group: store.group,
      family: store.family,
      n,
      saves: t.durations.length,
      p50: quantile(t.durations, 0.5),
      p99: quantile(t.durations, 0.99),
      // Of the first conversation (the only one of a synthetic scenario).
      first40: median(series.slice(0, WINDOW)),
      last40: median(series.slice(-WINDOW)),
      totalMs: t.totalMs,
      bytesWritten: t.bytes,
      size: t.sizeKnown ? t.size : undefined,
      loadMs: t.loadMs,
      rawBytes,
      extrapolated: t.extrapolated,
      curve: bucket(t.points),
    };
  });
}

function linearFit(points: [number, number][]): { a: number; b: number } {
  const n = points.length;
  const mx = points.reduce((s, p) => s + p[0], 0) / n;
  const my = points.reduce((s, p) => s + p[1], 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  const b = den === 0 ? 0 : num / den;
  return { a: my - b * mx, b };
}

/** Chart points: the median of each run of saves, about 50 points per curve. */
function bucket(points: [number, number, number][]): [number, number][] {
  const size = Math.max(1, Math.floor(points.length / 50));
  const out: [number, number][] = [];
  for (let i = 0; i < points.length; i += size) {
    const chunk = points.slice(i, i + size);
    out.push([chunk[chunk.length - 1]![0], median(chunk.map((p) => p[1]))]);
  }
  return out;
}

function syntheticConversation(n: number, pool: Message[]): Message[] {
  const out: Message[] = [];
  for (let i = 0; i < n; i++) out.push(pool[i % pool.length]!);
  return out;
}

const fmt = (x: number | undefined, digits = 0) =>
  x === undefined || Number.isNaN(x) ? "n/a" : x.toLocaleString("en-US", { maximumFractionDigits: digits });
const mb = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? "n/a" : `${(x / 1e6).toFixed(1)} MB`);
const ratio = (x: number | undefined, base: number | undefined) =>
  x === undefined || base === undefined || !base || Number.isNaN(x)
    ? ""
    : ` (${(x / base).toFixed(x / base < 10 ? 2 : 0)}×)`;

/** The floor of a result's kind of store in the same scenario (none for memory). */
export function floorOf(results: Result[], r: Pick<Result, "scenario" | "family">): Result | undefined {
  return results.find((b) => b.scenario === r.scenario && b.group === "baseline" && b.family === r.family);
}

function table(results: Result[]): string {
  const lines = [
    "| scenario | store | saves | p50 µs | p99 µs | first 40 p50 µs | last 40 p50 µs | total save | bytes written | stored | load ms |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const r of results) {
    const base = floorOf(results, r);
    const t = r.extrapolated ? "~" : "";
    lines.push(
      `| ${r.scenario} | ${r.store} | ${fmt(r.saves)} | ${fmt(r.p50)}${ratio(r.p50, base?.p50)} | ${fmt(r.p99)} | ${fmt(r.first40)} | ${fmt(r.last40)} | ${t}${fmt(r.totalMs / 1000, 2)} s${ratio(r.totalMs, base?.totalMs)} | ${t}${mb(r.bytesWritten)}${ratio(r.bytesWritten, base?.bytesWritten)} | ${t}${mb(r.size)}${ratio(r.size, r.rawBytes)} | ${fmt(r.loadMs, 1)}${ratio(r.loadMs, base?.loadMs)} |`,
    );
  }
  return lines.join("\n");
}

function promptTable(rows: PromptResult[]): string {
  const lines = [
    "| store | history | saves | p50 µs, 1 KB prompt | p50 µs, 50 MB prompt | ratio |",
    "| --- | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.store} | ${fmt(r.history)} | ${r.saves} | ${fmt(r.smallP50)} | ${fmt(r.largeP50)} | ${(r.largeP50 / r.smallP50).toFixed(2)}× |`,
    );
  }
  return lines.join("\n");
}

function cpuTable(rows: CpuResult[]): string {
  const lines = [
    "| store | directory | saves (N) | CPU µs per save | encode µs per save | CPU − encode µs | wall p50 µs |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.store} | ${path.dirname(r.dir)}${r.tmpfs ? " (tmpfs)" : " (not tmpfs)"} | ${fmt(r.saves)} (${fmt(r.n)}) | ${fmt(r.cpuPerSave, 1)} | ${fmt(r.encodePerSave, 1)} | ${fmt(r.cpuPerSave - r.encodePerSave, 1)} | ${fmt(r.wallP50)} |`,
    );
  }
  return lines.join("\n");
}

function startupTable(rows: StartupResult[]): string {
  const lines = [
    "| command | runs | p50 ms | min ms | node -e 0 p50 ms | p50 − node ms |",
    "| --- | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.command} | ${r.runs} | ${fmt(r.p50Ms)} | ${fmt(r.minMs)} | ${fmt(r.nodeP50Ms)} | ${fmt(r.p50Ms - r.nodeP50Ms)} |`,
    );
  }
  return lines.join("\n");
}

function durableTable(rows: DurableResult[]): string {
  const lines = [
    "| journal | steps | step p50 µs | floor write p50 µs | ratio | replay ms | raw read ms | ratio |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.journal} | ${fmt(r.steps)} | ${fmt(r.stepP50)} | ${fmt(r.floorWriteP50)} | ${(r.stepP50 / r.floorWriteP50).toFixed(2)}× | ${fmt(r.replayMs, 1)} | ${fmt(r.rawReadMs, 1)} | ${(r.replayMs / r.rawReadMs).toFixed(2)}× |`,
    );
  }
  return lines.join("\n");
}

function checkpointTable(r: CheckpointResult): string {
  return [
    "| checkpoints | state bytes | CheckpointStore.save p50 µs | floor p50 µs (SQLite INSERT + Redis SET) | SQLite part | Redis part | ratio |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    `| ${r.checkpoints} | ${fmt(r.stateBytes)} | ${fmt(r.saveP50)} | ${fmt(r.floorP50)} | ${fmt(r.floorSqliteP50)} | ${fmt(r.floorRedisP50)} | ${(r.saveP50 / r.floorP50).toFixed(2)}× |`,
  ].join("\n");
}

function progress<T>(label: string, f: () => Promise<T>): Promise<T> {
  process.stderr.write(`${label} … `);
  const t0 = performance.now();
  return f().then(
    (v) => {
      process.stderr.write(`${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
      return v;
    },
    (e) => {
      process.stderr.write("failed\n");
      throw e;
    },
  );
}

/** One more message to a 5,000-message chat against a 10-message one, fresh parsed arrays, every live backend. */
async function chatSaves(pool: Message[], live: BackendSpec[]): Promise<ChatSaveResult[]> {
  const out: ChatSaveResult[] = [];
  const ctxOf = () => newContext(REDIS_URL, DATABASE_URL);
  for (const shape of ["UIMessage", "ModelMessage", "saveState"] as const) {
    for (const spec of live) {
      out.push(
        await progress(`chat save, 5,000 vs 10 messages (${shape}): ${spec.label}`, () =>
          chatSaveScenario(spec, ctxOf, pool, { shape, saves: quick ? 20 : 60, short: 10, long: 5000 }),
        ),
      );
    }
  }
  return out;
}

function chatTable(rows: ChatSaveResult[]): string {
  const lines = [
    "| store | messages | saves | p50 µs, 10 messages | p50 µs, 5,000 messages | ratio |",
    "| --- | --- | ---: | ---: | ---: | ---: |",
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.store} | ${r.shape} | ${r.saves} | ${fmt(r.shortP50)} | ${fmt(r.longP50)} | ${(r.longP50 / r.shortP50).toFixed(2)}× |`,
    );
  }
  return lines.join("\n");
}

/**
 * Durable runs in Vercel Workflow's shapes on each journal, and queued runs on 1 and 2 worker
 * processes (ours and raw BullMQ, interleaved: raw 1, ours 1, raw 2, ours 2 per journal).
 */
async function runsAndWorkers(
  pool: Message[],
  up: { redis: boolean; postgres: boolean },
  out: ScenarioResults,
): Promise<ScenarioResults> {
  for (const kind of ["sqlite", "postgres", "redis"] as const) {
    if (kind !== "sqlite" && !up[kind]) continue;
    const ctx = newContext(REDIS_URL, DATABASE_URL);
    try {
      out.runs.push(
        ...(await progress(`durable runs, ${RUN_SHAPES.length} shapes: ${kind} journal`, () =>
          runShapesScenario(kind, ctx, pool, { runs: quick ? 20 : 50 }),
        )),
      );
    } finally {
      rmSync(ctx.dir, { recursive: true, force: true });
    }
  }
  if (!up.redis) {
    console.error(`skipped the worker scenario: redis is not reachable (${REDIS_URL})`);
    return out;
  }
  const runs = quick ? 200 : 1000;
  for (const kind of ["redis", "postgres"] as const) {
    if (!up[kind]) continue;
    for (const workers of [1, 2]) {
      for (const mode of ["raw", "durable"] as const) {
        const ctx = newContext(REDIS_URL, DATABASE_URL);
        try {
          out.workers.push(
            await progress(
              `workers: ${fmt(runs)} runs of 3 steps, ${workers} process${workers > 1 ? "es" : ""}, ${mode === "raw" ? "raw BullMQ" : "DurableWorker"}, ${kind} journal`,
              () => workerScenario(mode, kind, ctx, { workers, runs, steps: 3 }),
            ),
          );
        } finally {
          rmSync(ctx.dir, { recursive: true, force: true });
        }
      }
    }
  }
  return out;
}

function runShapesTable(rows: RunShapeResult[]): string {
  const lines = [
    `| journal | shape | runs | p50 ms | p99 ms | floor p50 ms (writes) | floor p99 ms | p50 ratio | Vercel Workflow, local world (published) |`,
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const r of rows) {
    const theirs = VERCEL_WORKFLOW_LOCAL.ms[r.shape];
    lines.push(
      `| ${r.journal} | ${r.label} | ${r.runs} | ${fmt(r.p50Ms, 2)} | ${fmt(r.p99Ms, 2)} | ${fmt(r.floorP50Ms, 2)} (${floorWrites(r)}) | ${fmt(r.floorP99Ms, 2)} | ${(r.p50Ms / r.floorP50Ms).toFixed(2)}× | ${theirs === undefined ? "" : `${fmt(theirs)} ms`} |`,
    );
  }
  return lines.join("\n");
}

function workersTable(rows: WorkerResult[]): string {
  const lines = [
    "| journal | executed by | processes | runs | runs/s | ms per run | enqueue to result p50 ms | p99 ms | enqueue of all ms |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.journal} | ${r.mode === "raw" ? `raw BullMQ job, ${r.steps} record writes` : `DurableWorker, ${r.steps} steps`} | ${r.workers} | ${fmt(r.runs)} | ${fmt(r.runsPerSecond)} | ${fmt(1000 / r.runsPerSecond, 2)} | ${fmt(r.p50Ms)} | ${fmt(r.p99Ms)} | ${fmt(r.enqueueMs)} |`,
    );
  }
  return lines.join("\n");
}

async function extraScenarios(
  pool: Message[],
  up: { redis: boolean; postgres: boolean },
  specs: BackendSpec[],
): Promise<ScenarioResults> {
  const out: ScenarioResults = {
    prompt: [],
    cpu: [],
    durable: [],
    checkpoint: undefined,
    startup: [],
    chat: [],
    runs: [],
    workers: [],
  };
  const live = specs.filter((s) => !s.needs || up[s.needs]);
  const ctxOf = () => newContext(REDIS_URL, DATABASE_URL);
  if (runsOnly) return runsAndWorkers(pool, up, out);
  out.chat = await chatSaves(pool, live);
  if (chatOnly) return out;
  // 50 MB prompt: a few dozen one-message saves (fewer with --quick) on a 100-message history.
  for (const spec of live) {
    out.prompt.push(
      await progress(`prompt 50 MB vs 1 KB: ${spec.label}`, () =>
        promptScenario(spec, ctxOf, pool, {
          saves: quick ? 12 : 30,
          historyLength: 100,
          smallBytes: SMALL_PROMPT,
          largeBytes: LARGE_PROMPT,
        }),
      ),
    );
  }
  // CPU per save on tmpfs: the file backend through saveState, the JSONL floor, and SQLite for reference.
  const root = tmpfsRoot();
  const n = SIZES[SIZES.length - 1]!;
  const messages = syntheticConversation(n, pool);
  const warmup = Math.min(200, Math.floor(n / 10));
  for (const spec of live.filter((s) => s.family === "file" || s.family === "sqlite")) {
    const ctx = newContext(REDIS_URL, DATABASE_URL, root);
    const store = agentStore(spec.family, spec.label, spec.make, spec.sizeOf, promptText(SMALL_PROMPT));
    await store.open(ctx);
    try {
      out.cpu.push(
        await progress(`CPU per save on ${root}: ${store.name}`, () =>
          cpuPerSave(store.name, ctx.dir, messages, warmup, (h) => store.save(h)),
        ),
      );
    } finally {
      await store.close();
      rmSync(ctx.dir, { recursive: true, force: true });
    }
  }
  {
    const ctx = newContext(REDIS_URL, DATABASE_URL, root);
    const floor = jsonlAppender(ctx.dir);
    try {
      out.cpu.push(
        await progress(`CPU per save on ${root}: JSONL floor`, () =>
          cpuPerSave("floor: JSONL append + fdatasync", ctx.dir, messages, warmup, (h) => floor.save(h)),
        ),
      );
    } finally {
      floor.close();
      rmSync(ctx.dir, { recursive: true, force: true });
    }
  }
  // Durable steps and replay, one run of 1,000 steps per journal.
  for (const kind of ["sqlite", "postgres", "redis"] as const) {
    if (kind !== "sqlite" && !up[kind]) continue;
    const ctx = ctxOf();
    try {
      out.durable.push(
        await progress(`durable steps: ${kind} journal`, () =>
          durableScenario(kind, ctx, pool, { steps: 1000, repeats: quick ? 3 : 5 }),
        ),
      );
    } finally {
      rmSync(ctx.dir, { recursive: true, force: true });
    }
  }
  // Workflow checkpoints of a 100 KB state.
  if (up.redis) {
    const ctx = ctxOf();
    try {
      out.checkpoint = await progress("workflow checkpoints: 100 KB state", () =>
        checkpointScenario(ctx, pool, { checkpoints: quick ? 30 : 60, stateBytes: 100 * 1024 }),
      );
    } finally {
      rmSync(ctx.dir, { recursive: true, force: true });
    }
  }
  await runsAndWorkers(pool, up, out);
  // CLI start-up: `dumplings --help` and `ls` on an empty store, beside `node -e 0` (needs dist/: `npm run build`).
  const cli = path.resolve("dist/cli/index.js");
  if (existsSync(cli)) {
    out.startup = await progress("CLI start-up: --help, ls on an empty store", async () =>
      cliStartupScenario(cli, { runs: quick ? 5 : 15 }),
    );
  }
  return out;
}

/** The checked-out commit, with `+dirty` when the work tree differs from it. */
function gitCommit(): string | undefined {
  try {
    const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim();
    const dirty = execFileSync("git", ["status", "--porcelain", "--untracked-files=no"], { encoding: "utf8" }).trim();
    return dirty ? `${head}+dirty` : head;
  } catch {
    return undefined;
  }
}

async function main(): Promise<void> {
  const started = Date.now();
  const loadAtStart = os.loadavg()[0] ?? Number.NaN;
  const bundled = loadSampleConversations({ source: quick ? "bundled" : "shared", protocol: "openai" });
  const pool = bundled.flatMap((c) => c.messages);
  const scenarios: [string, Message[][]][] = SIZES.map((n) => [`synthetic N=${n}`, [syntheticConversation(n, pool)]]);
  const realName = `real conversations (${bundled.length})`;
  scenarios.push([realName, bundled.map((c) => c.messages)]);
  if (chatOnly || runsOnly) scenarios.length = 0; // the chat scenario, or the run shapes and workers, alone

  const up = { redis: await reachable(REDIS_URL, 6379), postgres: await reachable(DATABASE_URL, 5432) };
  const matches = (s: BenchStore) => !only || new RegExp(only, "i").test(s.name);
  const stores = await allStores(promptText(SMALL_PROMPT));
  const all = [...stores.floors, ...stores.agents, ...stores.backends, ...stores.checkpointers];
  for (const s of all) {
    if (s.needs && !up[s.needs] && matches(s)) {
      console.error(
        `skipped ${s.name}: ${s.needs} is not reachable (${s.needs === "redis" ? REDIS_URL : DATABASE_URL})`,
      );
    }
  }
  const results: Result[] = [];
  for (const [name, convs] of scenarios) {
    // Per kind of store, in lockstep: the floor, ours through saveState, ours through write (see `measure`).
    for (const family of ["file", "sqlite", "redis", "postgres", "memory"] as const) {
      const group = [
        ...stores.floors.filter((s) => s.family === family),
        // The agent rows run the synthetic histories; the real conversations run at backend level.
        ...(name !== realName ? stores.agents.filter((s) => s.family === family) : []),
        ...stores.backends.filter((s) => s.family === family),
      ].filter((s) => matches(s) && (!s.needs || up[s.needs]));
      if (group.length === 0) continue;
      results.push(
        ...(await progress(`${name}: ${group.map((s) => s.name).join(" | ")}`, () => measure(group, name, convs))),
      );
    }
    for (const store of stores.checkpointers) {
      if (!matches(store) || (store.needs && !up[store.needs])) continue;
      results.push(...(await progress(`${name}: ${store.name}`, () => measure([store], name, convs))));
    }
  }
  const scenarioResults: ScenarioResults = runScenarios
    ? await extraScenarios(pool, up, await backendSpecs())
    : { prompt: [], cpu: [], durable: [], checkpoint: undefined, startup: [], chat: [], runs: [], workers: [] };

  const atN = `synthetic N=${SIZES[SIZES.length - 1]}`;
  const mainRows = results.filter(
    (r) => r.scenario !== realName && (r.group === "agent" || r.group === "baseline" || isLangGraphReference(r)),
  );
  if (results.length > 0) {
    console.log("## Saves through saveState (an agent saved after every message)\n");
    console.log(table(mainRows));
    console.log("\n## Backend level: each backend's write\n");
    console.log(table(results.filter((r) => r.group === "backend" || r.group === "baseline")));
    console.log("\n## LangGraph.js checkpointers\n");
    console.log(table(results.filter((r) => r.group === "langgraph")));
  }
  if (scenarioResults.prompt.length > 0) {
    console.log("\n## Save cost with a 50 MB prompt\n");
    console.log(promptTable(scenarioResults.prompt));
  }
  if (scenarioResults.chat.length > 0) {
    console.log("\n## Chat saves from request bodies (fresh JSON.parse arrays)\n");
    console.log(chatTable(scenarioResults.chat));
  }
  if (scenarioResults.cpu.length > 0) {
    console.log("\n## CPU per save on tmpfs\n");
    console.log(cpuTable(scenarioResults.cpu));
  }
  if (scenarioResults.durable.length > 0) {
    console.log("\n## Durable steps and replay\n");
    console.log(durableTable(scenarioResults.durable));
  }
  if (scenarioResults.runs.length > 0) {
    console.log(
      `\n## Durable runs, start to result (Vercel Workflow's shapes; their figures cited from ${VERCEL_WORKFLOW_LOCAL.source}, not re-measured)\n`,
    );
    console.log(runShapesTable(scenarioResults.runs));
  }
  if (scenarioResults.workers.length > 0) {
    console.log("\n## Queued runs on worker processes (all runs enqueued at once)\n");
    console.log(workersTable(scenarioResults.workers));
  }
  if (scenarioResults.checkpoint) {
    console.log("\n## Workflow checkpoints\n");
    console.log(checkpointTable(scenarioResults.checkpoint));
  }

  if (scenarioResults.startup.length > 0) {
    console.log("\n## CLI start-up (built dist, spawn to exit)\n");
    console.log(startupTable(scenarioResults.startup));
  }

  const targets = runsOnly ? runTargets(scenarioResults) : checkTargets(results, scenarioResults, { at: atN });
  const earlier = earlierTargets(results, atN);
  console.log(
    runsOnly
      ? `\n## Targets (durable runs and workers${quick ? "; --quick: fewer runs, indicative only" : ""})\n`
      : `\n## Targets (${atN}${quick ? "; --quick: the targets are for N = 10,000, so these lines are indicative only" : ""})\n`,
  );
  console.log("```");
  for (const t of targets) console.log(t.line);
  console.log("```");
  const met = targets.filter((t) => t.status === "MET").length;
  console.log(
    `\n${met} of ${targets.length} targets met (${os.cpus().length} CPUs; 1-minute load average ${loadAtStart.toFixed(1)} when the run started, ${os.loadavg()[0]!.toFixed(1)} when it ended).`,
  );
  if (earlier.length > 0) {
    console.log("\nEarlier targets (backend-level write and checkpointers):\n\n```");
    for (const t of earlier) console.log(t.line);
    console.log("```");
  }

  mkdirSync(path.dirname(path.resolve(jsonOut)), { recursive: true });
  writeFileSync(
    path.resolve(jsonOut),
    JSON.stringify(
      {
        meta: {
          date: new Date(started).toISOString(),
          durationS: Math.round((Date.now() - started) / 1000),
          quick,
          only: only ?? null,
          node: process.version,
          commit: gitCommit(),
          /** 1-minute load averages when the run started and ended: other work on the machine makes times noisy. */
          loadavg: { start: loadAtStart, end: os.loadavg()[0] },
          cpus: os.cpus().length,
          cpuModel: os.cpus()[0]?.model,
          sizes: SIZES,
          data: `${bundled.length} conversations (${quick ? "bundled" : "shared, else bundled"})`,
        },
        targets: targets satisfies TargetCheck[],
        earlierTargets: earlier,
        results,
        scenarios: scenarioResults,
      },
      null,
      1,
    ),
  );
  // The main chart: every store through saveState, the floors, and LangGraph's SqliteSaver and PostgresSaver.
  const chartRows = mainRows.filter((r) => r.scenario === atN);
  const checkpointers = results.filter((r) => r.scenario === atN && r.group === "langgraph");
  if (chartRows.length > 0) {
    await renderChart(
      chartRows,
      path.resolve(chartOut),
      `Save time after every message, ${atN.replace("synthetic ", "")}: saveState, raw floors, LangGraph`,
      { by: "family" },
    );
  }
  if (checkpointers.length > 0) {
    await renderChart(
      checkpointers,
      path.resolve(checkpointChartOut),
      `LangGraph checkpoint time, one message per step (${atN})`,
    );
  }
  if (scenarioResults.runs.length > 0) {
    await renderRunChart(
      scenarioResults.runs,
      path.resolve(runsChartOut),
      `Durable runs, start to result (p50), beside as many raw record writes${quick ? ", --quick" : ""} (load average ${loadAtStart.toFixed(1)}, ${os.cpus().length} CPUs)`,
    );
  }
  console.error(
    `\nload average ${loadAtStart.toFixed(1)} at the start, ${os.loadavg()[0]!.toFixed(1)} at the end (${os.cpus().length} CPUs)`,
  );
  console.error(
    `raw results: ${jsonOut}; charts: ${chartOut}, ${checkpointChartOut}, ${runsChartOut}; ${((Date.now() - started) / 60000).toFixed(1)} min`,
  );
}

/** LangGraph's own savers on real databases: the reference rows of the main table. */
function isLangGraphReference(r: Result): boolean {
  return r.store === "LangGraph SqliteSaver" || r.store === "LangGraph PostgresSaver";
}

export type { BenchContext, Result, ScenarioResults };

await main();
