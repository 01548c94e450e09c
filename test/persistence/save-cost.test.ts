/**
 * A one-message save costs O(new messages), not O(state): an unchanged config
 * (here a 4 MB prompt) is not serialised again on every save. Asserted without
 * timing: `JSON.stringify` is spied on and every call that produces text as
 * long as the prompt is counted (serialising the config, the header or the
 * whole state does); after the first save, appending a message must make none.
 * The stored data must still be exact afterwards, and a changed prompt must
 * still be written.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { FileBackend } from "../../src/backends/file.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { RedisBackend } from "../../src/backends/redis.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend } from "../../src/backends/types.js";
import { BaseAgent, loadState, saveState } from "../../src/index.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";

const redisSkip = await redisSkipReason();
const postgresSkip = await postgresSkipReason();
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-save-cost-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const PROMPT = "You are a careful assistant. ".repeat(150_000); // ~4.3 MB
const BIG = PROMPT.length;

/** Counts `JSON.stringify` calls that produce at least `BIG` characters while `fn` runs. */
async function bigSerialisations(fn: () => Promise<unknown>): Promise<number> {
  const original = JSON.stringify;
  let count = 0;
  const spy = vi.spyOn(JSON, "stringify").mockImplementation(((...args: Parameters<typeof JSON.stringify>) => {
    const out = original(...args);
    if (typeof out === "string" && out.length >= BIG) count++;
    return out;
  }) as typeof JSON.stringify);
  try {
    await fn();
  } finally {
    spy.mockRestore();
  }
  return count;
}

const cases: { name: string; skip?: string; make: () => StateBackend }[] = [
  { name: "memory", make: () => new MemoryBackend() },
  { name: "sqlite", make: () => new SQLiteBackend({ dbPath: path.join(tmp, `${randomUUID()}.db`) }) },
  { name: "file", make: () => new FileBackend({ baseDir: path.join(tmp, randomUUID()) }) },
  {
    name: "redis",
    skip: redisSkip,
    make: () => new RedisBackend({ url: REDIS_URL, keyPrefix: `duas-cost:${randomUUID()}:` }),
  },
  {
    name: "postgres",
    skip: postgresSkip,
    make: () =>
      new PostgresBackend({ url: DATABASE_URL, schema: `duas_cost_${randomUUID().replaceAll("-", "").slice(0, 16)}` }),
  },
];

const opened: StateBackend[] = [];
afterEach(async () => {
  for (const b of opened.splice(0)) {
    if (b instanceof PostgresBackend && !postgresSkip) {
      const { default: pg } = await import("pg");
      const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
      await admin.query(`DROP SCHEMA IF EXISTS "${b.schema}" CASCADE`);
      await admin.end();
    }
    if (b instanceof RedisBackend && !redisSkip) {
      for (const key of await b.listKeys()) await b.delete(key);
    }
    await b.close?.();
  }
});

describe.each(cases)("a one-message save with a big prompt: $name", ({ name, skip, make }) => {
  it.skipIf(!!skip)(
    `does not serialise the unchanged config again${skip ? ` (skipped: ${skip})` : ""}`,
    async () => {
      const backend = make();
      opened.push(backend);
      const agent = new BaseAgent({ name: `big-${name}`, prompt: PROMPT });
      const key = `big-${randomUUID().slice(0, 8)}`;
      expect(await bigSerialisations(() => saveState(agent, key, { backend }))).toBeGreaterThan(0); // the spy sees it
      for (let i = 0; i < 3; i++) {
        agent.history.push({ role: "user", content: `message ${i}` });
        const count = await bigSerialisations(async () => {
          const r = await saveState(agent, undefined, { backend });
          expect(r.written).toBe(1);
        });
        expect(count, `save ${i}`).toBe(0);
      }
      // The store holds exactly the agent, and a changed prompt is written.
      const loaded = await loadState(key, { backend });
      expect(loaded.config.prompt).toBe(PROMPT);
      expect(loaded.history).toEqual(agent.history);
      loaded.config.prompt = `${PROMPT}!`;
      loaded.history.push({ role: "user", content: "after" });
      await saveState(loaded, undefined, { backend });
      const again = await loadState(key, { backend });
      expect(again.config.prompt).toBe(`${PROMPT}!`);
      expect(again.history).toHaveLength(4);
      // A loaded agent's next one-message save does not serialise the config either.
      again.history.push({ role: "user", content: "next" });
      expect(await bigSerialisations(() => saveState(again, undefined, { backend }))).toBe(0);
      expect((await loadState(key, { backend })).history).toEqual(again.history);
    },
    60_000,
  );
});
