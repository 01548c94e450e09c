/**
 * User strings never act as Redis glob patterns (issue 11 item 9). A key
 * prefix holding `*`, `?`, `[`, `]` or `\` reaches `SCAN MATCH` only through
 * the shared `globEscape` (src/drivers/redis.ts), or no pattern at all: the
 * backend lists only its own sessions, the journal's `clear()` deletes only
 * its own runs (never those of a journal whose prefix its pattern would
 * match, nor of one whose prefix extends its own), and the hot tier and the
 * run stream address exact keys.
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisBackend } from "../../src/backends/redis.js";
import { globEscape } from "../../src/drivers/redis.js";
import { RedisHotTier } from "../../src/durable/checkpoints/hot-redis.js";
import { RedisJournal } from "../../src/durable/journal-redis.js";
import { RedisRunStream } from "../../src/durable/stream.js";
import { makeState } from "../../src/testing/states.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const skip = await redisSkipReason();
/** Each hostile prefix, and a sibling prefix its unescaped pattern would also match. */
const HOSTILE: [string, string][] = [
  ["j*:", "jX:"],
  ["j?:", "jA:"],
  ["j[ab]:", "ja:"],
  ["j[!x]:", "jy:"],
  ["j\\:", "j\\\\:"],
  ["j]:", "j]x:"],
  ["*", "anything:"],
];

describe.skipIf(skip)("Redis key patterns with hostile prefixes", () => {
  let admin: Redis;
  const base = `test:patterns:${randomUUID()}:`;
  beforeAll(() => {
    admin = new Redis(REDIS_URL, { lazyConnect: false });
  });
  afterAll(async () => {
    // Cleanup with the helper under test's own rule: literal prefix, never KEYS.
    let cursor = "0";
    do {
      const [next, keys] = await admin.scan(cursor, "MATCH", `${globEscape(base)}*`, "COUNT", 1000);
      if (keys.length) await admin.del(...keys);
      cursor = next;
    } while (cursor !== "0");
    await admin.quit();
  });

  it.each(HOSTILE)("globEscape(%j) matches that prefix literally in SCAN MATCH, not %j", async (hostile, sibling) => {
    const ns = `${base}esc:${randomUUID()}:`;
    await admin.set(`${ns}${hostile}k`, "1");
    await admin.set(`${ns}${sibling}k`, "1");
    const found: string[] = [];
    let cursor = "0";
    do {
      const [next, keys] = await admin.scan(cursor, "MATCH", `${globEscape(`${ns}${hostile}`)}*`, "COUNT", 1000);
      found.push(...keys);
      cursor = next;
    } while (cursor !== "0");
    expect(found).toEqual([`${ns}${hostile}k`]);
  });

  it.each(HOSTILE)("RedisBackend %j lists only its own sessions, not those of %j", async (hostile, sibling) => {
    const ns = `${base}be:${randomUUID()}:`;
    const a = new RedisBackend({ url: REDIS_URL, keyPrefix: `${ns}${hostile}` });
    const b = new RedisBackend({ url: REDIS_URL, keyPrefix: `${ns}${sibling}` });
    try {
      await a.save("mine", makeState([]));
      await b.save("theirs", makeState([]));
      expect(await a.listKeys()).toEqual(["mine"]);
      expect(await b.listKeys()).toEqual(["theirs"]);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it.each(HOSTILE)("RedisJournal %j clear() deletes only its own runs, not those of %j", async (hostile, sibling) => {
    const ns = `${base}jr:${randomUUID()}:`;
    const mine = new RedisJournal({ url: REDIS_URL, keyPrefix: `${ns}${hostile}` });
    const other = new RedisJournal({ url: REDIS_URL, keyPrefix: `${ns}${sibling}` });
    // A journal whose prefix starts with this one's: a prefix pattern would reach it too.
    const nested = new RedisJournal({ url: REDIS_URL, keyPrefix: `${ns}${hostile}tenant:` });
    try {
      for (const j of [mine, other, nested]) {
        await j.createRun({ runId: "r1", workflow: "w", input: null });
        await j.createRun({ runId: "r2", workflow: "w", input: { q: 1 } });
      }
      await mine.clear();
      expect(await mine.listRuns()).toEqual([]);
      expect(await mine.getRun("r1")).toBeUndefined();
      expect((await other.listRuns()).map((r) => r.runId).sort()).toEqual(["r1", "r2"]);
      expect((await nested.listRuns()).map((r) => r.runId).sort()).toEqual(["r1", "r2"]);
      expect(await other.getRun("r1")).toMatchObject({ runId: "r1", status: "pending" });
      const left: string[] = [];
      let cursor = "0";
      do {
        const [next, keys] = await admin.scan(cursor, "MATCH", `${globEscape(`${ns}${hostile}`)}*`, "COUNT", 1000);
        left.push(...keys);
        cursor = next;
      } while (cursor !== "0");
      expect(left.every((k) => k.startsWith(`${ns}${hostile}tenant:`))).toBe(true); // only the nested journal's
      await other.clear();
      await nested.clear();
    } finally {
      await mine.close();
      await other.close();
      await nested.close();
    }
  });

  it.each(HOSTILE)("RedisHotTier and RedisRunStream %j address exact keys, apart from %j", async (hostile, sibling) => {
    const ns = `${base}hot:${randomUUID()}:`;
    const a = new RedisHotTier({ url: REDIS_URL, keyPrefix: `${ns}${hostile}` });
    const b = new RedisHotTier({ url: REDIS_URL, keyPrefix: `${ns}${sibling}` });
    const sa = new RedisRunStream({ url: REDIS_URL, keyPrefix: `${ns}${hostile}` });
    const sb = new RedisRunStream({ url: REDIS_URL, keyPrefix: `${ns}${sibling}` });
    try {
      await a.put("wf", { stepIndex: 1, stateJson: '{"a":1}' });
      expect(await b.get("wf")).toBeUndefined();
      await b.put("wf", { stepIndex: 2, stateJson: '{"b":2}' });
      await a.delete("wf");
      expect(await a.get("wf")).toBeUndefined();
      expect(await b.get("wf")).toEqual({ stepIndex: 2, stateJson: '{"b":2}' });
      await sa.append("r", { n: 1 });
      await sb.append("r", { n: 2 });
      await sa.delete("r");
      expect(await sa.read("r")).toEqual([]);
      expect((await sb.read("r")).map((e) => e.data)).toEqual([{ n: 2 }]);
    } finally {
      await Promise.all([a.close(), b.close(), sa.close(), sb.close()]);
    }
  });
});
