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
  extrapolated: boolean;
  curve: [number, number][];
}

/**
 * Draws save time (µs, log scale) against history length, one line per store.
 *
 * @param results - measured results of one scenario
 * @param file - output `.svg` path (its directory is created)
 * @param title - chart title
 */
export async function renderChart(results: CurveResult[], file: string, title: string): Promise<void> {
  const values = results.flatMap((r) =>
    r.curve.map(([length, us]) => ({ store: r.store + (r.extrapolated ? " (sampled)" : ""), length, us })),
  );
  const spec: vegaLite.TopLevelSpec = {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title,
    width: 640,
    height: 360,
    data: { values },
    mark: { type: "line", point: true },
    encoding: {
      x: { field: "length", type: "quantitative", title: "history length (messages)" },
      y: { field: "us", type: "quantitative", title: "save time (µs, log scale)", scale: { type: "log" } },
      color: { field: "store", type: "nominal", title: "store" },
    },
  };
  const compiled = vegaLite.compile(spec).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: "none" });
  const svg = await view.toSVG();
  view.finalize();
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, svg);
}
