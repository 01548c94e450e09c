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
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
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

/**
 * SQLite rewrites a whole record (its overflow pages included) when any column of it changes, and a
 * save always changes the session row (revision, message count, time). So the config must not live in
 * that row: bytes written per save are measured as the WAL's size after each one-message save (the WAL
 * is truncated before each), summed over saves that cross 9 -> 10 messages (a record that changes
 * size cannot be overwritten in place).
 */
describe("SQLite: a one-message save writes O(message) bytes, not O(prompt)", () => {
  async function walBytesPerSaves(prompt: string, saves: number): Promise<number[]> {
    const file = path.join(tmp, `${randomUUID()}.db`);
    const backend = new SQLiteBackend({ dbPath: file });
    const raw = new Database(file);
    try {
      const agent = new BaseAgent({ name: "wal", prompt });
      const key = `wal-${randomUUID().slice(0, 8)}`;
      await saveState(agent, key, { backend });
      const sizes: number[] = [];
      for (let i = 0; i < saves; i++) {
        const [checkpoint] = raw.pragma("wal_checkpoint(TRUNCATE)") as { busy: number }[];
        expect(checkpoint?.busy).toBe(0); // the WAL really is empty before the save
        agent.history.push({ role: i % 2 ? "assistant" : "user", content: `message ${i} ${"x".repeat(200)}` });
        const r = await saveState(agent, undefined, { backend });
        expect(r.written).toBe(1);
        sizes.push(statSync(`${file}-wal`).size);
      }
      const loaded = await loadState(key, { backend });
      expect(loaded.config.prompt).toBe(prompt);
      expect(loaded.history).toEqual(agent.history);
      return sizes;
    } finally {
      raw.close();
      backend.close();
    }
  }

  it("the WAL grows as much per save with a 50 MB prompt as with a 1 KB one (within 2x)", async () => {
    const small = await walBytesPerSaves("p".repeat(1024), 12);
    const big = await walBytesPerSaves("You are a careful assistant. ".repeat(1_750_000), 12); // ~50 MB
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    expect(sum(big), `1 KB: ${small.join(",")}; 50 MB: ${big.join(",")}`).toBeLessThanOrEqual(2 * sum(small));
    expect(Math.max(...big)).toBeLessThan(1 << 20);
  }, 120_000);
});
