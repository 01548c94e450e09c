import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import * as vitest from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { runBackendConformance } from "../../src/testing/index.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-sqlite-conf-"));
vitest.afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;

runBackendConformance("sqlite", () => new SQLiteBackend({ dbPath: path.join(dir, `c${n++}.db`) }), { test: vitest });
runBackendConformance(
  "sqlite (compressHistory)",
  () => new SQLiteBackend({ dbPath: path.join(dir, `z${n++}.db`), compressHistory: true, compressMinBytes: 16 }),
  { test: vitest, largeHistory: 20_000, samples: "bundled" },
);
