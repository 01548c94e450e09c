/**
 * Property: whatever a program does to an agent's history between saves
 * (append, replace a message, remove one, truncate, edit the last message in
 * place, replace the whole history by parsed copies), the append detection never stores a wrong history — after every
 * save, loading gives exactly the agent's history ("detected, not assumed").
 * Runs on the memory and SQLite backends (both implement append-only writes).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { BaseAgent, loadState, MemoryBackend, type Message, type StateBackend } from "../../src/index.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-prop-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

type Op =
  | { kind: "push"; text: string }
  | { kind: "replace"; at: number; text: string }
  | { kind: "remove"; at: number }
  | { kind: "truncate"; to: number }
  | { kind: "editLast"; text: string }
  | { kind: "reparse" }
  | { kind: "save" };

const text = fc.string({ maxLength: 12, unit: "binary" });
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: text.map((t) => ({ kind: "push" as const, text: t })) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("replace" as const), at: fc.nat(40), text }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("remove" as const), at: fc.nat(40) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("truncate" as const), to: fc.nat(40) }) },
  { weight: 1, arbitrary: text.map((t) => ({ kind: "editLast" as const, text: t })) },
  { weight: 2, arbitrary: fc.constant({ kind: "reparse" as const }) },
  { weight: 4, arbitrary: fc.constant({ kind: "save" as const }) },
);

const backends: [string, () => StateBackend][] = [
  ["memory", () => new MemoryBackend()],
  ["sqlite", () => new SQLiteBackend({ dbPath: path.join(mkdtempSync(path.join(tmp, "d-")), "p.db") })],
];

describe.each(backends)("append detection on %s", (_name, make) => {
  it("after every save, the stored history is exactly the agent's history", async () => {
    const backend = make();
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 40 }), async (ops) => {
        const key = `p${run++}`;
        const agent = new BaseAgent({ name: "prop" });
        for (const o of [...ops, { kind: "save" } as Op]) {
          const h = agent.history;
          switch (o.kind) {
            case "push":
              h.push({ role: h.length % 2 ? "assistant" : "user", content: o.text } as Message);
              break;
            case "replace":
              if (h.length > 0) h[o.at % h.length] = { role: "user", content: o.text };
              break;
            case "remove":
              if (h.length > 0) h.splice(o.at % h.length, 1);
              break;
            case "truncate":
              h.length = Math.min(h.length, o.to);
              break;
            case "reparse": // the history replaced by parsed copies (as rebuilt from a request body)
              h.splice(0, h.length, ...(JSON.parse(JSON.stringify(h)) as Message[]));
              break;
            case "editLast":
              if (h.length > 0) (h[h.length - 1] as { content: string }).content = o.text;
              break;
            case "save": {
              await agent.saveState(key, { backend });
              const loaded = await loadState(key, { backend });
              expect(loaded.history).toEqual(agent.history);
            }
          }
        }
      }),
      { numRuns: 60 },
    );
  });
});
