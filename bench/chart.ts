/**
 * Renders the bench's save-time curves to SVG with Vega-Lite (compiled to a
 * Vega spec and rendered headless in Node by Vega's own SVG renderer).
 *
 * @module
 */
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import * as vega from "vega";
import * as vegaLite from "vega-lite";

/** Minimal shape of a bench result needed for the chart. */
export interface CurveResult {
  store: string;
  /** Kind of storage (`file`, `sqlite`, …): the line's colour in a chart by family. */
  family?: string;
  /** `agent` (saveState), `baseline` (raw floor), `langgraph`, `backend`: the line's dash in a chart by family. */
  group?: string;
  extrapolated: boolean;
  curve: [number, number][];
}

const WRITER: Record<string, string> = {
  agent: "dumplings-ai saveState",
  backend: "dumplings-ai backend write",
  baseline: "raw floor",
  langgraph: "LangGraph.js saver",
};
const STORAGE: Record<string, string> = {
  file: "file",
  sqlite: "SQLite",
  redis: "Redis",
  postgres: "PostgreSQL",
  memory: "memory",
};

/**
 * Draws save time (µs, log scale) against history length. With `by: "store"`
 * one colour per store; with `by: "family"` the colour is the kind of storage
 * and the dash says who writes (our `saveState` solid, the raw floor dashed,
 * LangGraph's savers dotted), so each store sits next to its floor.
 *
 * @param results - measured results of one scenario
 * @param file - output `.svg` path (its directory is created)
 * @param title - chart title
 * @param options - `by`: how lines are told apart @default "store"
 */
export async function renderChart(
  results: CurveResult[],
  file: string,
  title: string,
  options: { by?: "store" | "family" } = {},
): Promise<void> {
  const byFamily = options.by === "family";
  const values = results.flatMap((r) =>
    r.curve.map(([length, us]) => ({
      store: r.store + (r.extrapolated ? " (sampled)" : ""),
      storage: STORAGE[r.family ?? ""] ?? r.family ?? "?",
      writer: (WRITER[r.group ?? ""] ?? r.group ?? "?") + (r.extrapolated ? " (sampled)" : ""),
      length,
      us,
    })),
  );
  const writers = [...new Set(values.map((v) => v.writer))].sort();
  const dash = (w: string) => (w.startsWith("raw floor") ? [6, 3] : w.startsWith("LangGraph") ? [2, 2] : [1, 0]);
  // A dash legend's symbols get no stroke colour from the colour channel: draw them dark. Vega-Lite passes a
  // legend's `encode` on to Vega, though its `Legend` type does not list it.
  const dashLegend = {
    symbolType: "stroke",
    symbolSize: 400,
    labelLimit: 260,
    encode: { symbols: { update: { stroke: { value: "#333" }, strokeWidth: { value: 2 } } } },
  };
  const spec = {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title,
    width: 640,
    height: 360,
    data: { values },
    mark: { type: "line", point: { size: 12 }, strokeWidth: 1.6 },
    encoding: {
      x: { field: "length", type: "quantitative", title: "history length (messages)" },
      y: { field: "us", type: "quantitative", title: "save time (µs, log scale)", scale: { type: "log" } },
      ...(byFamily
        ? {
            color: {
              field: "storage",
              type: "nominal",
              title: "storage",
              scale: { domain: ["file", "SQLite", "Redis", "PostgreSQL", "memory"] },
            },
            strokeDash: {
              field: "writer",
              type: "nominal",
              title: "written by",
              scale: { domain: writers, range: writers.map(dash) },
              legend: dashLegend,
            },
          }
        : { color: { field: "store", type: "nominal", title: "store", legend: { labelLimit: 260 } } }),
    },
  } as vegaLite.TopLevelSpec;
  await writeSvg(spec, file);
}

/** Minimal shape of a run-shape result needed for {@link renderRunChart}. */
export interface RunShapeBar {
  journal: string;
  label: string;
  p50Ms: number;
  floorP50Ms: number;
}

/**
 * Draws run latency per shape: grouped bars of the p50 start-to-result time (ms) of each journal's
 * runs beside the p50 of its floor (as many raw record writes), one group per shape; the colour is
 * the store, the floor's bar is pale.
 *
 * @param rows - measured run-shape results (every journal, every shape)
 * @param file - output `.svg` path (its directory is created)
 * @param title - chart title
 */
export async function renderRunChart(rows: RunShapeBar[], file: string, title: string): Promise<void> {
  const shapes = [...new Set(rows.map((r) => r.label))];
  const values = rows.flatMap((r) => {
    const storage = STORAGE[r.journal] ?? r.journal;
    return [
      { shape: r.label, storage, writer: "runDurable + step", series: `${storage} run`, ms: r.p50Ms },
      { shape: r.label, storage, writer: "raw floor", series: `${storage} floor`, ms: r.floorP50Ms },
    ];
  });
  const spec = {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title,
    width: 640,
    height: 320,
    data: { values },
    mark: { type: "bar" },
    encoding: {
      x: {
        field: "shape",
        type: "nominal",
        title: "run shape",
        sort: shapes,
        axis: { labelAngle: 0, labelLimit: 300 },
      },
      xOffset: { field: "series", type: "nominal" },
      y: { field: "ms", type: "quantitative", title: "start to result, p50 (ms)" },
      color: {
        field: "storage",
        type: "nominal",
        title: "journal",
        scale: { domain: ["SQLite", "PostgreSQL", "Redis"] },
      },
      opacity: {
        field: "writer",
        type: "ordinal",
        title: "measured",
        scale: { domain: ["runDurable + step", "raw floor"], range: [1, 0.4] },
      },
    },
  } as vegaLite.TopLevelSpec;
  await writeSvg(spec, file);
}

/** Renders a Vega-Lite spec to SVG and writes it to `file` (its directory created). */
async function writeSvg(spec: vegaLite.TopLevelSpec, file: string): Promise<void> {
  const compiled = vegaLite.compile(spec).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: "none" });
  const svg = await view.toSVG();
  view.finalize();
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, svg);
}
