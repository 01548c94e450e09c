/**
 * FileBackend runs the shared backend conformance suite, plain and gzip,
 * each test in a fresh temp directory.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import * as vitest from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import type { StateBackend } from "../../src/backends/types.js";
import { runBackendConformance } from "../../src/testing/index.js";

const dirs = new Map<StateBackend, string>();
function make(gzip: boolean): StateBackend {
  const dir = mkdtempSync(path.join(tmpdir(), "duas-file-conf-"));
  const backend = new FileBackend({ baseDir: path.join(dir, "sessions"), gzip });
  dirs.set(backend, dir);
  return backend;
}
function destroy(backend: StateBackend): void {
  const dir = dirs.get(backend);
  dirs.delete(backend);
  if (dir) rmSync(dir, { recursive: true, force: true });
}

runBackendConformance("file", () => make(false), { test: vitest, destroy });
runBackendConformance("file (gzip)", () => make(true), { test: vitest, destroy, samples: "bundled" });
