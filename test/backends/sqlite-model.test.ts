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
import { afterAll, describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend } from "../../src/backends/types.js";
import { ConflictError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import { makeState } from "../../src/testing/states.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-sqlite-model-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const text = fc.oneof(
  fc.string({ unit: "binary", maxLength: 20 }),
  fc.string({ unit: fc.constantFrom("a", "\n", "\u0000", "\ud83d", "\ude00", "🥟", "م", '"', "\\"), maxLength: 12 }),
  fc.constant("x".repeat(400)),
);
const message: fc.Arbitrary<Message> = fc
  .record({
    role: fc.constantFrom("user", "assistant"),
    content: text,
    extra: fc.option(
      fc.jsonValue({ maxDepth: 2 }).map((v) => JSON.parse(JSON.stringify(v)) as unknown) /* -0 is refused by design */,
      { nil: undefined },
    ),
  })
  .map(({ extra, ...m }) => (extra === undefined ? m : { ...m, extra }) as Message);

type Op =
  | { kind: "append"; messages: Message[] }
  | { kind: "edit"; at: number; message: Message }
  | { kind: "truncate"; to: number }
  | { kind: "header" }
  | { kind: "force"; messages: Message[] }
  | { kind: "stale" }
  | { kind: "delete" };

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({ kind: fc.constant("append" as const), messages: fc.array(message, { maxLength: 4 }) }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("edit" as const), at: fc.nat(), message }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("truncate" as const), to: fc.nat() }) },
  { weight: 1, arbitrary: fc.constant({ kind: "header" as const }) },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant("force" as const), messages: fc.array(message, { maxLength: 3 }) }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: "stale" as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: "delete" as const }) },
);

/** Runs the ops against one backend, checking it against the model after each. */
async function check(backend: StateBackend, key: string, ops: Op[]): Promise<void> {
  const write = backend.write?.bind(backend);
  const read = backend.read?.bind(backend);
  if (!write || !read) throw new Error("backend lacks write/read");
  let model: Message[] | undefined; // undefined: deleted / never written
  let revision: number | null = null;
  let stored = 0; // messages the writer knows are stored unchanged
  let step = 0;
  for (const o of ops) {
    step++;
    const fields = { step };
    if (o.kind === "delete") {
      expect(await backend.delete(key)).toBe(model !== undefined);
      model = undefined;
      continue;
    }
    if (o.kind === "stale") {
      if (revision === null) continue;
      const before = await read(key);
      await expect(
        write(key, makeState([...(model ?? []), { role: "user", content: "lost" }], { fields }), {
          expectedRevision: revision - 1,
          baseLength: stored,
        }),
      ).rejects.toBeInstanceOf(ConflictError);
      expect(await read(key)).toEqual(before);
      continue;
    }
    if (model === undefined) {
      // Re-created on purpose (a fresh writer).
      model = [];
      revision = (await write(key, makeState([], { fields }), { expectedRevision: null })).revision;
      stored = 0;
    }
    let next = [...model];
    let base = stored;
    if (o.kind === "append") next.push(...o.messages);
    if (o.kind === "edit" && next.length > 0) {
      const at = o.at % next.length;
      next[at] = o.message;
      base = Math.min(base, at);
    }
    if (o.kind === "truncate") {
      next = next.slice(0, o.to % (next.length + 1));
      base = Math.min(base, next.length);
    }
    if (o.kind === "force") {
      next = o.messages;
      const r = await write(key, makeState(next, { fields }), { expectedRevision: 12345, force: true });
      revision = r.revision;
    } else {
      const r = await write(key, makeState(next, { fields }), { expectedRevision: revision, baseLength: base });
      expect(r.revision).toBe((revision ?? 0) + 1);
      revision = r.revision;
    }
    model = next;
    stored = next.length;
    const got = await read(key);
    expect(got?.revision).toBe(revision);
    expect(got?.state.history).toEqual(model);
    expect(got?.state.state.fields).toEqual(fields);
    if (backend.iterHistory) {
      const streamed: Message[] = [];
      for await (const m of backend.iterHistory(key)) streamed.push(m);
      expect(streamed).toEqual(model);
    }
  }
}

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
