/**
 * Compare-and-set revisions given as the wrong kind of value (a string from an
 * HTTP header, -1, 1.5) are an `InvalidOptionError` naming the option, on
 * `saveState` (`ifRevision`, `force`) and on every built-in backend's `write`
 * (`expectedRevision`, `baseLength`, `force`), with nothing written. They used
 * to be a `ConflictError` that named the same revision twice ("expected
 * revision 5, stored revision is 5"), or were ignored (`force: "yes"`).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend } from "../../src/backends/types.js";
import { InvalidOptionError } from "../../src/core/errors.js";
import { BaseAgent, saveState } from "../../src/index.js";
import { makeState } from "../../src/testing/states.js";

const root = mkdtempSync(path.join(tmpdir(), "rev-options-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const backends: [string, () => StateBackend][] = [
  ["file", () => new FileBackend({ baseDir: mkdtempSync(path.join(root, "f-")) })],
  ["memory", () => new MemoryBackend()],
  ["sqlite", () => new SQLiteBackend({ dbPath: path.join(mkdtempSync(path.join(root, "s-")), "s.db") })],
];

describe("revision option values", () => {
  for (const [name, make] of backends) {
    it(`${name} write: a bad expectedRevision, baseLength or force is an InvalidOptionError, nothing written`, async () => {
      const backend = make();
      try {
        const state = makeState([{ role: "user", content: "hi" }]);
        const { revision } = await backend.write!("k", state, { expectedRevision: null });
        const more = { ...state, history: [...state.history, { role: "user" as const, content: "more" }] };
        for (const options of [
          { expectedRevision: String(revision) },
          { expectedRevision: -1 },
          { expectedRevision: 1.5 },
          { expectedRevision: revision, baseLength: -1 },
          { expectedRevision: revision, baseLength: "1" },
          { force: "yes" },
        ]) {
          const e = await backend.write!("k", more, options as never).catch((x: unknown) => x);
          expect(e, JSON.stringify(options)).toBeInstanceOf(InvalidOptionError);
        }
        expect((await backend.read!("k"))?.revision).toBe(revision);
      } finally {
        await backend.close?.();
      }
    });
  }

  it("saveState: ifRevision must be null or a whole number >= 1, force a boolean", async () => {
    const backend = new FileBackend({ baseDir: mkdtempSync(path.join(root, "a-")) });
    const agent = new BaseAgent({ name: "rev" });
    const { revision } = await saveState(agent, "k", { backend });
    for (const options of [
      { ifRevision: String(revision) },
      { ifRevision: -1 },
      { ifRevision: 0.5 },
      { force: "yes" },
    ]) {
      const e = await saveState(agent, "k", { backend, ...(options as object) }).catch((x: unknown) => x);
      expect(e, JSON.stringify(options)).toBeInstanceOf(InvalidOptionError);
      expect((e as Error).message).toContain(Object.keys(options)[0] as string);
    }
    expect((await saveState(agent, "k", { backend, ifRevision: revision ?? null })).revision).toBe((revision ?? 0) + 1);
  });
});
