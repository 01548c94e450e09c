/**
 * Model-based property test of the append/rewrite logic: random sequences of
 * appends, in-place edits, truncations, header-only writes, forced writes,
 * stale writers and deletes run against SQLiteBackend (plain and compressed)
 * and MemoryBackend; after every step each backend must hold exactly the
 * model's state, and a stale compare-and-set must conflict.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import fc from "fast-check";
import { afterAll, describe, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { check, op } from "../helpers/backend-model.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-sqlite-model-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("append/rewrite logic against a model", () => {
  const sqlite = new SQLiteBackend({ dbPath: path.join(dir, "model.db") });
  const zipped = new SQLiteBackend({
    dbPath: path.join(dir, "model-z.db"),
    compressHistory: true,
    compressMinBytes: 64,
  });
  const memory = new MemoryBackend();
  afterAll(() => {
    sqlite.close();
    zipped.close();
  });
  let run = 0;
  for (const [name, backend] of [
    ["sqlite", sqlite],
    ["sqlite compressed", zipped],
    ["memory", memory],
  ] as const) {
    it(`${name}: every step stores exactly the model's state`, async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 25 }), async (ops) => {
          await check(backend, `model-${run++}`, ops);
        }),
        { numRuns: 60 },
      );
    });
  }
});
