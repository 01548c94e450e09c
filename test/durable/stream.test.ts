/**
 * The side channel: in-process and Redis Streams implementations deliver a
 * run's events in order, resume from an index, and stop on `until`.
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { FormatError, InvalidOptionError, NonJsonValueError } from "../../src/core/errors.js";
import { MemoryRunStream, RedisRunStream, type RunEventStream, readText } from "../../src/durable/stream.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const skip = await redisSkipReason();
const opened: RunEventStream[] = [];
afterAll(async () => {
  for (const s of opened) await s.close();
});

function streamSuite(label: string, make: () => RunEventStream, skipReason?: string) {
  describe.skipIf(!!skipReason)(`run event stream: ${label}${skipReason ? ` (skipped: ${skipReason})` : ""}`, () => {
    it("appends with dense 1-based indexes, reads after an index, refuses non-JSON", async () => {
      const s = make();
      const run = `r-${randomUUID()}`;
      expect(await s.append(run, { type: "token", text: "a" })).toBe(1);
      expect(await s.append(run, { type: "token", text: "b", n: [1, { x: null }] })).toBe(2);
      expect(await s.append(run, "plain")).toBe(3);
      expect(await s.read(run)).toEqual([
        { index: 1, data: { type: "token", text: "a" } },
        { index: 2, data: { type: "token", text: "b", n: [1, { x: null }] } },
        { index: 3, data: "plain" },
      ]);
      expect(await s.read(run, 2)).toEqual([{ index: 3, data: "plain" }]);
      expect(await s.read(run, 0, 1)).toHaveLength(1);
      await expect(s.append(run, { bad: 1n } as never)).rejects.toBeInstanceOf(NonJsonValueError);
      await s.delete(run);
      expect(await s.read(run)).toEqual([]);
    });

    it("a subscriber resumes from an index and receives live events until told to stop", async () => {
      const s = make();
      const run = `r-${randomUUID()}`;
      await s.append(run, { i: 1 });
      await s.append(run, { i: 2 });
      const got: number[] = [];
      const sub = (async () => {
        for await (const e of s.subscribe(run, {
          after: 1,
          until: (e) => (e.data as { end?: boolean }).end === true,
        })) {
          got.push(e.index);
        }
      })();
      await new Promise((r) => setTimeout(r, 50));
      await s.append(run, { i: 3 });
      await s.append(run, { end: true });
      await sub;
      expect(got).toEqual([2, 3, 4]);
      const ac = new AbortController();
      const idle = (async () => {
        for await (const _ of s.subscribe(run, { after: 4, signal: ac.signal })) got.push(-1);
      })();
      setTimeout(() => ac.abort(), 50);
      await idle;
      expect(got).toEqual([2, 3, 4]);
      await s.delete(run);
    });
  });
}

streamSuite("memory", () => new MemoryRunStream());
streamSuite(
  "redis",
  () => {
    const s = new RedisRunStream({ url: REDIS_URL, prefix: `test:stream:${randomUUID()}:`, blockMs: 100 });
    opened.push(s);
    return s;
  },
  skip,
);

describe.skipIf(skip)("RedisRunStream retention", () => {
  it("ttlMs: both keys of a run expire that long after its last event", async () => {
    const prefix = `test:stream:${randomUUID()}:`;
    const s = new RedisRunStream({ url: REDIS_URL, keyPrefix: prefix, blockMs: 100, ttlMs: 60_000 });
    opened.push(s);
    await s.append("r1", { type: "token", text: "a" });
    const probe = new Redis(REDIS_URL);
    try {
      const keys = await probe.keys(`${prefix}*`);
      expect(keys).toHaveLength(2);
      for (const k of keys) {
        const ttl = await probe.pttl(k);
        expect(ttl).toBeGreaterThan(50_000);
        expect(ttl).toBeLessThanOrEqual(60_000);
      }
      // without ttlMs the keys stay (the default)
      const kept = new RedisRunStream({ url: REDIS_URL, keyPrefix: `${prefix}kept:`, blockMs: 100 });
      opened.push(kept);
      await kept.append("r2", { type: "token", text: "b" });
      for (const k of await probe.keys(`${prefix}kept:*`)) expect(await probe.pttl(k)).toBe(-1);
      expect(() => new RedisRunStream({ url: REDIS_URL, ttlMs: -5 })).toThrow(InvalidOptionError);
      await s.delete("r1");
      await kept.delete("r2");
    } finally {
      probe.disconnect();
    }
  });

  it("readText refuses a stream whose first events were trimmed (maxLength) instead of returning the end of the text", async () => {
    const s = new RedisRunStream({
      url: REDIS_URL,
      keyPrefix: `test:stream:${randomUUID()}:`,
      blockMs: 100,
      maxLength: 5,
    });
    opened.push(s);
    for (let i = 0; i < 400; i++) await s.append("long", { type: "token", text: `w${i} ` });
    expect((await s.read("long"))[0]?.index).toBeGreaterThan(1);
    await expect(readText(s, "long")).rejects.toBeInstanceOf(FormatError);
    await s.delete("long");
    const short = new MemoryRunStream();
    await short.append("ok", { type: "token", text: "all " });
    await short.append("ok", { type: "token", text: "here" });
    expect(await readText(short, "ok")).toBe("all here");
  });
});
