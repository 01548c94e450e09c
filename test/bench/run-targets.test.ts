/**
 * The bench's targets for durable run shapes and workers, checked on given numbers (no timing): each
 * shape and journal is MET or MISS by its ratio to the floor, an absent measurement is NOT RUN, and the
 * worker targets read the right rows.
 */
import { describe, expect, it } from "vitest";
import { floorWrites, RUN_SHAPES, type RunShapeResult, type WorkerResult } from "../../bench/runs.js";
import { runTargets } from "../../bench/targets.js";

const shapeRow = (
  journal: RunShapeResult["journal"],
  shape: RunShapeResult["shape"],
  p50Ms: number,
  floorP50Ms: number,
) =>
  ({
    journal,
    shape,
    label: shape,
    steps: 10,
    runs: 20,
    p50Ms,
    p99Ms: p50Ms,
    floorP50Ms,
    floorP99Ms: floorP50Ms,
    floorWrite: "x",
  }) satisfies RunShapeResult;
const workerRow = (
  journal: WorkerResult["journal"],
  mode: WorkerResult["mode"],
  workers: number,
  runsPerSecond: number,
) =>
  ({
    journal,
    mode,
    workers,
    runs: 100,
    steps: 3,
    runsPerSecond,
    enqueueMs: 1,
    p50Ms: 1,
    p99Ms: 1,
  }) satisfies WorkerResult;

describe("run-shape and worker targets", () => {
  it("a floor writes one record a step and one for the run", () => {
    expect(RUN_SHAPES.map(floorWrites)).toEqual([1, 11, 11, 26]);
  });

  it("every shape on every journal and both worker targets per journal are listed, NOT RUN when not measured", () => {
    const lines = runTargets({ runs: [], workers: [] });
    expect(lines).toHaveLength(3 * RUN_SHAPES.length + 2 * 2);
    expect(lines.every((t) => t.status === "NOT RUN" && t.measured === null)).toBe(true);
  });

  it("a run shape is MET at or under 2× its floor and MISS above", () => {
    const lines = runTargets({
      runs: [shapeRow("sqlite", "sequential-10", 20, 10), shapeRow("redis", "parallel-25", 21, 10)],
      workers: [],
    });
    const sqlite = lines.find((t) => t.id === "run-shape" && t.subject === "sqlite journal, 10 sequential steps");
    const redis = lines.find((t) => t.id === "run-shape" && t.subject === "redis journal, Promise.all of 25 steps");
    expect(sqlite).toMatchObject({ status: "MET", measured: 2 });
    expect(sqlite?.line).toContain("10,820 ms");
    expect(redis).toMatchObject({ status: "MISS", measured: 2.1 });
  });

  it("workers: 2 processes against 1 of ours, and ours on 1 against the raw job on 1", () => {
    const lines = runTargets({
      runs: [],
      workers: [
        workerRow("redis", "raw", 1, 250),
        workerRow("redis", "durable", 1, 100),
        workerRow("redis", "raw", 2, 400),
        workerRow("redis", "durable", 2, 170),
      ],
    });
    const scale = lines.find((t) => t.id === "workers-scale" && t.subject.includes("redis"));
    const overhead = lines.find((t) => t.id === "workers-overhead" && t.subject.includes("redis"));
    expect(scale).toMatchObject({ status: "MET", measured: 1.7 });
    expect(scale?.note).toContain("1.60×");
    expect(overhead).toMatchObject({ status: "MISS", measured: 2.5 });
    expect(lines.filter((t) => t.subject.includes("postgres") && t.id.startsWith("workers"))).toSatisfy(
      (ts: unknown[]) => (ts as { status: string }[]).every((t) => t.status === "NOT RUN"),
    );
  });
});
