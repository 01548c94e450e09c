/**
 * `npm run bench`: save-after-every-message benchmark of agent-state stores.
 *
 * Scenarios: (a) a growing conversation to N = 1,000 and N = 10,000 messages,
 * built by concatenating the real recorded messages of the bundled
 * conversations (a construction: no real conversation is that long), and (b)
 * every real conversation of the data set (the full shared set when present,
 * else the bundled subset), each saved after every message.
 *
 * For every store: save p50/p99 (µs), p50 of the first and last 40 saves, total
 * save time, bytes written (the `wchar` counter of /proc/self/io: every byte
 * this process handed to write(2)/send(2), to files or to a server's socket),
 * final storage size and load time; and each figure as a ratio to the JSONL
 * baseline of the same run. Whole-history stores (LangGraph) are sampled in
 * windows of 40 saves at N = 10,000 and their totals extrapolated from a
 * least-squares line through the windows (their per-save cost grows linearly
 * with the history), which the table marks with `~`; with `--quick`, above
 * N = 500 already (N = 1,000 is sampled too), so the quick run stays quick.
 *
 * LangGraph.js checkpointers (LangGraph's `SqliteSaver`, `PostgresSaver`,
 * `MemorySaver` and our `DumplingsSaver` on SQLite, PostgreSQL, Redis and
 * memory) are driven as a graph appending one message per step drives them:
 * a save is the step's pending write plus the next checkpoint. Their curves
 * are drawn in a second chart.
 *
 * Options: `--quick` (N = 1,000 only, bundled data), `--only <regex>` (stores
 * whose name matches it, case-insensitive), `--json <file>` (write raw results), `--chart <file.svg>`,
 * `--checkpoint-chart <file.svg>` (the checkpointers' chart).
 *
 * @module
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import type { Message } from "../src/core/messages.js";
import { loadSampleConversations } from "../src/testing/samples.js";
import { renderChart } from "./chart.js";
import { allStores, type BenchContext, type BenchStore } from "./registry.js";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const only = argValue("--only");
const jsonOut = argValue("--json") ?? "bench/results/latest.json";
// The committed chart (docs/) is the full run's; a quick run draws its own under bench/results/.
const chartOut = argValue("--chart") ?? (quick ? "bench/results/save-time-quick.svg" : "docs/bench-save-time.svg");
const checkpointChartOut =
  argValue("--checkpoint-chart") ??
  (quick ? "bench/results/checkpoint-time-quick.svg" : "docs/bench-checkpoint-time.svg");
const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const WINDOW = 40;
/** Above this history length, whole-history stores are sampled in windows (see the module comment). */
const SAMPLE_ABOVE = quick ? 500 : 2000;

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

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}
const median = (xs: number[]) =>
  quantile(
    [...xs].sort((a, b) => a - b),
    0.5,
  );

/** One measured (store, scenario) pair. */
export interface Result {
  scenario: string;
  store: string;
  group: BenchStore["group"];
  family: BenchStore["family"];
  n: number;
  saves: number;
  /** µs */
  p50: number;
  p99: number;
  first40: number;
  last40: number;
  /** ms */
  totalMs: number;
  bytesWritten: number;
  size: number | undefined;
  /** ms */
  loadMs: number;
  rawBytes: number;
  extrapolated: boolean;
  /** [history length, µs] points for the chart. */
  curve: [number, number][];
}

async function measure(store: BenchStore, scenario: string, conversations: Message[][]): Promise<Result> {
  const durations: number[] = [];
  const curve: [number, number][] = [];
  let totalMs = 0;
  let bytes = 0;
  let size = 0;
  let sizeKnown = true;
  let loadMs = 0;
  let rawBytes = 0;
  let first40: number[] = [];
  let last40: number[] = [];
  let extrapolated = false;
  let n = 0;
  for (const [ci, messages] of conversations.entries()) {
    const dir = mkdtempSync(path.join(os.tmpdir(), "dumplings-bench-"));
    const ctx: BenchContext = {
      dir,
      id: `${process.pid}_${Date.now().toString(36)}_${ci}`,
      redisUrl: REDIS_URL,
      databaseUrl: DATABASE_URL,
    };
    await store.open(ctx);
    try {
      const N = messages.length;
      n = Math.max(n, N);
      rawBytes += messages.reduce((s, m) => s + Buffer.byteLength(JSON.stringify(m)) + 1, 0);
      const sampled = store.wholeHistory === true && N > SAMPLE_ABOVE;
      const starts = sampled ? [0, Math.floor(N * 0.25), Math.floor(N * 0.5), Math.floor(N * 0.75), N - WINDOW] : [0];
      const points: [number, number, number][] = []; // [length, µs, bytes]
      for (const start of starts) {
        const end = sampled ? start + WINDOW : N;
        // One growing array, as an agent's history grows: no per-save copying in the measured loop.
        const history = messages.slice(0, start);
        for (let i = start; i < end; i++) {
          history.push(messages[i]!);
          const w0 = wchar();
          const t0 = performance.now();
          await store.save(history);
          const us = (performance.now() - t0) * 1000;
          const b = wchar() - w0;
          durations.push(us);
          points.push([i + 1, us, b]);
          if (!sampled) {
            totalMs += us / 1000;
            bytes += b;
          }
        }
      }
      if (sampled) {
        extrapolated = true;
        const fitUs = linearFit(points.map(([x, y]) => [x, y]));
        const fitB = linearFit(points.map(([x, , b]) => [x, b]));
        // Σ_{x=1..N} (a + b·x) = N·a + b·N(N+1)/2
        const sum = (f: { a: number; b: number }) => N * f.a + (f.b * N * (N + 1)) / 2;
        totalMs += sum(fitUs) / 1000;
        bytes += sum(fitB);
      }
      const series = points.map((p) => p[1]);
      if (ci === 0 || conversations.length === 1) {
        first40 = series.slice(0, WINDOW);
        last40 = series.slice(-WINDOW);
        curve.push(...bucket(points));
      }
      const t0 = performance.now();
      const loaded = await store.load();
      loadMs += performance.now() - t0;
      const expectedLength = N;
      if (loaded.length !== expectedLength || JSON.stringify(loaded.at(-1)) !== JSON.stringify(messages.at(-1))) {
        throw new Error(
          `${store.name}: loaded ${loaded.length} messages, expected ${expectedLength} equal to the input`,
        );
      }
      const s = await store.size();
      if (s === undefined) sizeKnown = false;
      else if (sampled) {
        // Storage of a whole-history store after N saves ≈ what it holds now × (N saves / saves made).
        size += (s * N) / points.length;
      } else size += s;
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const sorted = [...durations].sort((a, b) => a - b);
  return {
    scenario,
    store: store.name,
    group: store.group,
    family: store.family,
    n,
    saves: durations.length,
    p50: quantile(sorted, 0.5),
    p99: quantile(sorted, 0.99),
    first40: median(first40),
    last40: median(last40),
    totalMs,
    bytesWritten: bytes,
    size: sizeKnown ? size : undefined,
    loadMs,
    rawBytes,
    extrapolated,
    curve,
  };
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

function table(results: Result[]): string {
  const lines = [
    "| scenario | store | saves | p50 µs | p99 µs | first 40 p50 µs | last 40 p50 µs | total save | bytes written | stored | load ms |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const r of results) {
    const base = results.find((b) => b.scenario === r.scenario && b.store.startsWith("baseline: JSONL"));
    const t = r.extrapolated ? "~" : "";
    lines.push(
      `| ${r.scenario} | ${r.store} | ${fmt(r.saves)} | ${fmt(r.p50)}${ratio(r.p50, base?.p50)} | ${fmt(r.p99)} | ${fmt(r.first40)} | ${fmt(r.last40)} | ${t}${fmt(r.totalMs / 1000, 2)} s${ratio(r.totalMs, base?.totalMs)} | ${t}${mb(r.bytesWritten)}${ratio(r.bytesWritten, base?.bytesWritten)} | ${t}${mb(r.size)}${ratio(r.size, r.rawBytes)} | ${fmt(r.loadMs, 1)}${ratio(r.loadMs, base?.loadMs)} |`,
    );
  }
  return lines.join("\n");
}

function targets(results: Result[]): string[] {
  const out: string[] = [];
  const at = results.filter((r) => r.scenario === "synthetic N=10000");
  const jsonl = at.find((r) => r.store.startsWith("baseline: JSONL"));
  const lg = at.find((r) => r.store === "LangGraph SqliteSaver");
  const baselineFor: Record<string, string> = {
    file: "baseline: JSONL",
    sqlite: "baseline: SQLite",
    redis: "baseline: Redis",
    postgres: "baseline: PostgreSQL",
  };
  for (const [ours, theirs] of [
    ["DumplingsSaver (sqlite)", "LangGraph SqliteSaver"],
    ["DumplingsSaver (postgres)", "LangGraph PostgresSaver"],
  ]) {
    const r = at.find((x) => x.store === ours);
    const l = at.find((x) => x.store === theirs);
    if (!r || !l) continue;
    const check = (ok: boolean, text: string) => out.push(`${ok ? "MET " : "MISS"} ${r.store}: ${text}`);
    check(r.last40 <= 1.5 * r.first40, `last 40 / first 40 = ${(r.last40 / r.first40).toFixed(2)} (target ≤ 1.5)`);
    if (r.size !== undefined)
      check(r.size <= 5 * r.rawBytes, `stored ${(r.size / r.rawBytes).toFixed(2)}× raw JSONL (target ≤ 5×)`);
    check(
      l.totalMs >= 10 * r.totalMs,
      `total checkpoint time ${(l.totalMs / r.totalMs).toFixed(0)}× less than ${theirs} (target ≥ 10×)`,
    );
  }
  for (const r of at.filter((x) => x.group === "ours")) {
    const base = at.find((b) => b.store.startsWith(baselineFor[r.family] ?? "?"));
    const check = (ok: boolean, text: string) => out.push(`${ok ? "MET " : "MISS"} ${r.store}: ${text}`);
    if (base) check(r.p50 <= 3 * base.p50, `p50 ${(r.p50 / base.p50).toFixed(2)}× ${base.store} (target ≤ 3×)`);
    check(r.last40 <= 1.5 * r.first40, `last 40 / first 40 = ${(r.last40 / r.first40).toFixed(2)} (target ≤ 1.5)`);
    if (lg)
      check(
        lg.totalMs >= 100 * r.totalMs,
        `total save ${(lg.totalMs / r.totalMs).toFixed(0)}× less than LangGraph SqliteSaver (target ≥ 100×)`,
      );
    if (r.size !== undefined)
      check(r.size <= 1.3 * r.rawBytes, `stored ${(r.size / r.rawBytes).toFixed(2)}× raw JSONL (target ≤ 1.3×)`);
    if (jsonl)
      check(
        r.loadMs <= 1.5 * jsonl.loadMs,
        `load ${(r.loadMs / jsonl.loadMs).toFixed(2)}× JSONL parse (target ≤ 1.5×)`,
      );
  }
  return out;
}

async function main(): Promise<void> {
  const bundled = loadSampleConversations({ source: quick ? "bundled" : "shared", protocol: "openai" });
  const pool = bundled.flatMap((c) => c.messages);
  const scenarios: [string, Message[][]][] = [["synthetic N=1000", [syntheticConversation(1000, pool)]]];
  if (!quick) scenarios.push(["synthetic N=10000", [syntheticConversation(10_000, pool)]]);
  scenarios.push([`real conversations (${bundled.length})`, bundled.map((c) => c.messages)]);

  const up = { redis: await reachable(REDIS_URL, 6379), postgres: await reachable(DATABASE_URL, 5432) };
  const stores = (await allStores()).filter((s) => !only || new RegExp(only, "i").test(s.name));
  const results: Result[] = [];
  for (const s of stores) {
    if (s.needs && !up[s.needs]) {
      console.error(
        `skipped ${s.name}: ${s.needs} is not reachable (${s.needs === "redis" ? REDIS_URL : DATABASE_URL})`,
      );
    }
  }
  for (const [name, convs] of scenarios) {
    for (const store of stores) {
      if (store.needs && !up[store.needs]) continue;
      process.stderr.write(`${name}: ${store.name} … `);
      const t0 = performance.now();
      const r = await measure(store, name, convs);
      process.stderr.write(`${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
      results.push(r);
    }
  }
  const md = table(results);
  console.log(md);
  console.log("\nTargets (synthetic N=10000):");
  const checked = targets(results);
  if (checked.length === 0) console.log("  not checked: N = 10,000 was not run (--quick)");
  for (const line of checked) console.log(`  ${line}`);
  mkdirSync(path.dirname(path.resolve(jsonOut)), { recursive: true });
  writeFileSync(path.resolve(jsonOut), JSON.stringify(results, null, 1));
  const curveScenario = quick ? "synthetic N=1000" : "synthetic N=10000";
  // The session stores' chart keeps LangGraph's SqliteSaver as the reference; the checkpointers get their own.
  const main = results.filter(
    (r) => r.scenario === curveScenario && (r.group !== "langgraph" || r.store === "LangGraph SqliteSaver"),
  );
  const checkpointers = results.filter((r) => r.scenario === curveScenario && r.group === "langgraph");
  if (main.length > 0) {
    await renderChart(main, path.resolve(chartOut), `Save time after every message (${curveScenario})`);
  }
  if (checkpointers.length > 0) {
    await renderChart(
      checkpointers,
      path.resolve(checkpointChartOut),
      `LangGraph checkpoint time, one message per step (${curveScenario})`,
    );
  }
  console.error(`\nraw results: ${jsonOut}; charts: ${chartOut}, ${checkpointChartOut}`);
}

await main();
