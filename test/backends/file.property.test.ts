/**
 * Model-based property test of FileBackend: random sequences of appends,
 * edits, shrinks, header changes (short and long), other "processes" (fresh
 * instances) and interrupted appends (a torn tail left on disk) always load
 * as the last successful write.
 */
import { appendFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { decodeStateBytes } from "../../src/core/codec/bytes.js";
import type { Message } from "../../src/core/messages.js";
import { makeState } from "../../src/testing/states.js";

type Op =
  | { kind: "append"; n: number; text: string }
  | { kind: "edit"; at: number; text: string }
  | { kind: "shrink"; to: number }
  | { kind: "task"; id: string }
  | { kind: "prompt"; length: number }
  | { kind: "reopen" }
  | { kind: "tornTail"; text: string };

const text = fc.string({ unit: "binary", maxLength: 40 });
const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({ kind: fc.constant("append" as const), n: fc.integer({ min: 0, max: 4 }), text }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("edit" as const), at: fc.nat(), text }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("shrink" as const), to: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("task" as const), id: fc.string({ maxLength: 600 }) }) },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant("prompt" as const), length: fc.integer({ min: 0, max: 9000 }) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("reopen" as const) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("tornTail" as const), text }) },
);

describe("file backend model test", () => {
  it("any sequence of writes loads as the last successful write", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 25 }), async (ops) => {
        const dir = mkdtempSync(path.join(tmpdir(), "duas-file-model-"));
        try {
          let backend = new FileBackend({ baseDir: dir });
          let history: Message[] = [];
          let taskId: string | null = null;
          let prompt = "";
          let revision: number | null = null;
          let counter = 0;
          let tornTailOnDisk = false;
          const state = () =>
            makeState(history, {
              uuid: "u",
              savedAt: "2026-01-01T00:00:00Z",
              currentTaskId: taskId,
              config: { prompt },
            });
          for (const o of ops) {
            let base: number | undefined = history.length;
            switch (o.kind) {
              case "append":
                history = [...history];
                for (let i = 0; i < o.n; i++) history.push({ role: "user", content: `${counter++} ${o.text}` });
                break;
              case "edit":
                if (history.length === 0) continue;
                history = [...history];
                history[o.at % history.length] = { role: "assistant", content: `edited ${o.text}` };
                base = o.at % history.length; // stored unchanged: only the messages before the edit
                break;
              case "shrink":
                history = history.slice(0, o.to % (history.length + 1));
                base = undefined;
                break;
              case "task":
                taskId = o.id;
                break;
              case "prompt":
                prompt = "p".repeat(o.length);
                break;
              case "reopen":
                backend = new FileBackend({ baseDir: dir });
                continue;
              case "tornTail":
                if (revision !== null) {
                  appendFileSync(path.join(dir, "k.duas"), `{"role":"user","content":"${o.text.length}`);
                  tornTailOnDisk = true;
                }
                continue;
            }
            const r = await backend.write("k", state(), { expectedRevision: revision, baseLength: base });
            revision = r.revision;
            tornTailOnDisk = false;
            const fresh = new FileBackend({ baseDir: dir });
            expect(await fresh.read("k")).toEqual({ state: state(), revision });
            expect(await backend.load("k")).toEqual(state());
          }
          if (revision !== null && !tornTailOnDisk) {
            // a write repairs any torn tail: afterwards the file is strictly valid for the plain codec
            expect(decodeStateBytes(readFileSync(path.join(dir, "k.duas")))).toEqual(state());
          }
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      }),
      { numRuns: 60 },
    );
  });
});
