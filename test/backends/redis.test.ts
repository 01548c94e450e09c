/**
 * Redis-specific behaviour beyond the conformance suite: key layout, appends
 * that touch only new messages, boundary-edit detection, TTL on all of a
 * session's keys together, SCAN-based listKeys, pb-07 (NUL and control
 * characters), corrupt data, two clients racing, an injected client.
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { RedisBackend, type RedisLikeClient } from "../../src/backends/redis.js";
import {
  BackendError,
  ConflictError,
  FormatError,
  InvalidOptionError,
  StateNotFoundError,
} from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import { makeState } from "../../src/testing/states.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const skip = await redisSkipReason();

const msgs = (n: number, tag = "m"): Message[] =>
  Array.from({ length: n }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `${tag} ${i}` }) as Message);

describe.skipIf(!!skip)(`redis backend${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const admin = new Redis(REDIS_URL, { lazyConnect: true });
  const prefixes: string[] = [];
  const backends: RedisBackend[] = [];
  const make = (options: ConstructorParameters<typeof RedisBackend>[0] = {}) => {
    const keyPrefix = options.keyPrefix ?? `duas-rt:${randomUUID()}:`;
    prefixes.push(keyPrefix);
    const b = new RedisBackend({ url: REDIS_URL, ...options, keyPrefix });
    backends.push(b);
    return b;
  };
  afterAll(async () => {
    for (const b of backends) await b.close();
    for (const prefix of prefixes) {
      let cursor = "0";
      do {
        const [next, keys] = await admin.scan(
          cursor,
          "MATCH",
          `${prefix.replace(/[*?[\]\\]/g, "\\$&")}*`,
          "COUNT",
          1000,
        );
        cursor = next;
        if (keys.length > 0) await admin.del(...keys);
      } while (cursor !== "0");
    }
    admin.disconnect();
  });

  it("stores a header hash and a history list under the prefix", async () => {
    const b = make();
    const state = makeState(msgs(3), { name: "layout" });
    const r = await b.write("s1", state);
    expect(r).toEqual({ revision: 1, written: 3, rewritten: true });
    expect(await admin.type(`${b.keyPrefix}s1`)).toBe("hash");
    expect(await admin.type(`${b.keyPrefix}s1/history`)).toBe("list");
    const header = await admin.hgetall(`${b.keyPrefix}s1`);
    expect(header).toMatchObject({ fmt: "1", rev: "1", count: "3" });
    expect(JSON.parse(header.meta as string)).toEqual(state.meta);
    expect(await admin.lrange(`${b.keyPrefix}s1/history`, 0, -1)).toEqual(state.history.map((m) => JSON.stringify(m)));
  });

  it("an append sends only the new messages and leaves the stored ones untouched", async () => {
    const b = make();
    const h = msgs(10);
    const r1 = await b.write("app", makeState(h.slice(0, 8)), { expectedRevision: null });
    // Mark a stored element: a full rewrite would replace it.
    const marked = JSON.stringify({ role: "user", content: "m 0", marker: true });
    await admin.lset(`${b.keyPrefix}app/history`, 0, marked);
    const r2 = await b.write("app", makeState(h), { expectedRevision: r1.revision, baseLength: 8 });
    expect(r2).toEqual({ revision: 2, written: 2, rewritten: false });
    expect(await admin.lindex(`${b.keyPrefix}app/history`, 0)).toBe(marked);
    expect(await admin.llen(`${b.keyPrefix}app/history`)).toBe(10);
  });

  it("detects an edit of the boundary message and rewrites instead of merging", async () => {
    const b = make();
    const h = msgs(5);
    const r1 = await b.write("edit", makeState(h));
    const edited = [...h.slice(0, 4), { role: "user", content: "edited 4" } as Message, ...msgs(2, "new")];
    const r2 = await b.write("edit", makeState(edited), { expectedRevision: r1.revision, baseLength: 5 });
    expect(r2.rewritten).toBe(true);
    expect((await b.load("edit")).history).toEqual(edited);
  });

  it("a key ending in :history does not collide with another key's history", async () => {
    const b = make();
    await b.save("a", makeState(msgs(2, "a")));
    await b.save("a:history", makeState(msgs(3, "b")));
    expect((await b.load("a")).history).toEqual(msgs(2, "a"));
    expect((await b.load("a:history")).history).toEqual(msgs(3, "b"));
    expect((await b.listKeys()).sort()).toEqual(["a", "a:history"]);
  });

  it("listKeys uses SCAN, lists header hashes and strings (the original design's entries), and treats prefix glob characters literally", async () => {
    const globby = make({ keyPrefix: `duas-rt:${randomUUID()}:g[a]*?:` });
    const plain = make({ keyPrefix: globby.keyPrefix.replace("g[a]*?:", "ga-x:") });
    await globby.save("k1", makeState(msgs(1)));
    await plain.save("k2", makeState(msgs(1)));
    await admin.set(`${globby.keyPrefix}stray-string`, "x");
    await admin.rpush(`${globby.keyPrefix}stray-list`, "x");
    // a string under the prefix is an entry of the original design's layout (read as one: FormatError if it is not)
    expect((await globby.listKeys()).sort()).toEqual(["k1", "stray-string"]);
    expect(await plain.listKeys()).toEqual(["k2"]);
    // Many keys: SCAN pages through all of them.
    const many = make();
    await Promise.all(Array.from({ length: 1500 }, (_, i) => many.save(`n${i}`, makeState([]))));
    expect((await many.listKeys()).length).toBe(1500);
  });

  it("applies the TTL to the header and the history together, and both expire together", async () => {
    const b = make({ ttlMs: 60_000 });
    const r = await b.write("ttl", makeState(msgs(4)));
    const [pHeader, pHistory] = await Promise.all([
      admin.pttl(`${b.keyPrefix}ttl`),
      admin.pttl(`${b.keyPrefix}ttl/history`),
    ]);
    expect(pHeader).toBeGreaterThan(0);
    expect(pHistory).toBeGreaterThan(0);
    expect(Math.abs(pHeader - pHistory)).toBeLessThan(1000);
    // An append refreshes both, including a history that only now gets its messages.
    await b.write("ttl", makeState(msgs(6)), { expectedRevision: r.revision, baseLength: 4 });
    expect(await admin.pttl(`${b.keyPrefix}ttl/history`)).toBeGreaterThan(0);
    // A writer without TTL makes the session persistent again (both keys).
    const persistent = new RedisBackend({ url: REDIS_URL, keyPrefix: b.keyPrefix });
    await persistent.save("ttl", makeState(msgs(2)));
    await persistent.close();
    expect(await admin.pttl(`${b.keyPrefix}ttl`)).toBe(-1);
    expect(await admin.pttl(`${b.keyPrefix}ttl/history`)).toBe(-1);

    // Short TTL: while it expires, a read sees the whole session or nothing, never a header without history.
    const short = make({ ttlMs: 300 });
    await short.save("brief", makeState(msgs(50)));
    let gone = false;
    for (let i = 0; i < 400 && !gone; i++) {
      const read = await short.read("brief");
      if (read === undefined) gone = true;
      else expect(read.state.history.length).toBe(50);
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(gone).toBe(true);
    expect(await admin.exists(`${short.keyPrefix}brief`, `${short.keyPrefix}brief/history`)).toBe(0);
    expect(await short.listKeys()).toEqual([]);
  });

  it("a session that expired restarts above its last revision: a writer holding that revision conflicts", async () => {
    // An expiry runs no code, so with a TTL every write raises the prefix's revision floor.
    const b = make({ ttlMs: 200 });
    let rev = (await b.write("exp", makeState(msgs(1)), { expectedRevision: null })).revision;
    for (let i = 2; i <= 3; i++) {
      rev = (await b.write("exp", makeState(msgs(i)), { expectedRevision: rev, baseLength: i - 1 })).revision;
    }
    for (let i = 0; i < 100 && (await admin.exists(`${b.keyPrefix}exp`)) === 1; i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(await b.read("exp")).toBeUndefined();
    const fresh = make({ keyPrefix: b.keyPrefix, ttlMs: 60_000 });
    const created = await fresh.write("exp", makeState([{ role: "user", content: "new session" }]), {
      expectedRevision: null,
    });
    expect(created.revision).toBeGreaterThan(rev);
    await expect(b.write("exp", makeState(msgs(4)), { expectedRevision: rev, baseLength: 3 })).rejects.toThrow(
      ConflictError,
    );
    expect((await fresh.read("exp"))?.state.history).toEqual([{ role: "user", content: "new session" }]);
    // The floor is a string key outside the sessions: listKeys does not show it.
    expect(await fresh.listKeys()).toEqual(["exp"]);
  });

  it("readHeader returns meta/config/state and the revision without the history", async () => {
    const b = make();
    const state = makeState(msgs(7), { name: "hdr", config: { prompt: "p\u0000" }, fields: { f: [1] } });
    state.meta.messageCount = 999; // the stored count wins
    await b.write("hdr", state);
    const r2 = await b.write("hdr", { ...state, history: msgs(8) }, { expectedRevision: 1, baseLength: 7 });
    const found = await b.readHeader("hdr");
    expect(found?.revision).toBe(r2.revision);
    expect(found?.header).toEqual({
      meta: { ...state.meta, messageCount: 8 },
      config: state.config,
      state: state.state,
    });
    expect(await b.readHeader("nothing-here")).toBeUndefined();
  });

  it("pb-07: NUL and other control characters round-trip exactly", async () => {
    const b = make();
    const history: Message[] = [
      { role: "user", content: "what's the \u0000 weather in nyc" },
      { role: "tool", tool_call_id: "call_N1", content: "binary-ish output: \u0000\u0001\u001f end" },
    ];
    await b.save("conv-7", makeState(history));
    const loaded = await b.load("conv-7");
    expect(loaded.history[0]).toEqual({ role: "user", content: "what's the \u0000 weather in nyc" });
    expect((loaded.history[1] as { content: string }).content).toBe("binary-ish output: \u0000\u0001\u001f end");
  });

  it("compressHistory stores big messages gzip-compressed, and any reader decodes them", async () => {
    const writer = make({ compressHistory: true });
    const big = { role: "tool", tool_call_id: "c1", content: "log line\n".repeat(2000) } as Message;
    const history = [{ role: "user", content: "small" } as Message, big];
    await writer.save("z", makeState(history));
    const raw = await admin.lrange(`${writer.keyPrefix}z/history`, 0, -1);
    expect(raw[0]).toBe(JSON.stringify(history[0]));
    expect(raw[1]?.startsWith("~")).toBe(true);
    expect((raw[1] as string).length).toBeLessThan(JSON.stringify(big).length / 10);
    const reader = make({ keyPrefix: writer.keyPrefix });
    expect((await reader.load("z")).history).toEqual(history);
    const streamed: Message[] = [];
    for await (const m of reader.iterHistory("z")) streamed.push(m);
    expect(streamed).toEqual(history);
  });

  it("corrupt stored data gives FormatError naming the key", async () => {
    const b = make();
    await b.save("bad", makeState(msgs(3)));
    await admin.hset(`${b.keyPrefix}bad`, "meta", "{not json");
    const e1 = await b.load("bad").catch((e) => e);
    expect(e1).toBeInstanceOf(FormatError);
    expect(String(e1.message)).toContain('"bad"');

    await b.save("bad", makeState(msgs(3)));
    await admin.rpush(`${b.keyPrefix}bad/history`, JSON.stringify({ role: "user", content: "stray" }));
    await expect(b.load("bad")).rejects.toBeInstanceOf(FormatError);

    await b.save("bad", makeState(msgs(3)));
    await admin.lset(`${b.keyPrefix}bad/history`, 1, "{torn");
    await expect(b.load("bad")).rejects.toThrow(/history\[1\]/);

    await b.save("bad", makeState(msgs(3)));
    await admin.hset(`${b.keyPrefix}bad`, "fmt", "99");
    const e4 = await b.load("bad").catch((e) => e);
    expect(e4).toBeInstanceOf(FormatError);
    expect(e4.version).toBe("99");

    await admin.del(`${b.keyPrefix}bad`);
    // a string is read as an entry of the original design's layout: this one is not a state
    await admin.set(`${b.keyPrefix}bad`, "a string, not a hash");
    await expect(b.load("bad")).rejects.toBeInstanceOf(FormatError);
  });

  it("two clients on separate connections with the same stale revision: exactly one wins", async () => {
    const one = make();
    const two = make({ keyPrefix: one.keyPrefix });
    const h = msgs(4);
    const r1 = await one.write("race", makeState(h));
    const results = await Promise.allSettled([
      one.write("race", makeState([...h, { role: "user", content: "one" }]), {
        expectedRevision: r1.revision,
        baseLength: 4,
      }),
      two.write("race", makeState([...h, { role: "user", content: "two" }]), {
        expectedRevision: r1.revision,
        baseLength: 4,
      }),
    ]);
    const won = results.findIndex((r) => r.status === "fulfilled");
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    const lost = results[1 - won] as PromiseRejectedResult;
    expect(lost.reason).toBeInstanceOf(ConflictError);
    expect(lost.reason.actualRevision).toBe(r1.revision + 1);
    expect((await two.load("race")).history.at(-1)).toEqual({ role: "user", content: won === 0 ? "one" : "two" });
  });

  it("concurrent whole-state saves of one key from several clients all succeed, and one whole state wins", async () => {
    const first = make();
    const writers = [first, ...Array.from({ length: 3 }, () => make({ keyPrefix: first.keyPrefix }))];
    const states = writers.map((_, i) => makeState(msgs(20 + i, `w${i}`), { name: `w${i}` }));
    await Promise.all(writers.map((b, i) => b.save("shared", states[i]!)));
    const read = (await first.read("shared"))!;
    expect(read.revision).toBe(4);
    expect(states).toContainEqual(read.state);
  });

  it("iterHistory streams the history as it was when iteration began and detects a rewrite", async () => {
    const b = make();
    const h = msgs(1200);
    const r1 = await b.write("it", makeState(h));
    const seen: Message[] = [];
    let appended = false;
    for await (const m of b.iterHistory("it")) {
      seen.push(m);
      if (!appended) {
        appended = true;
        await b.write("it", makeState([...h, { role: "user", content: "later" }]), {
          expectedRevision: r1.revision,
          baseLength: 1200,
        });
      }
    }
    expect(seen).toEqual(h);
    const iterator = b.iterHistory("it")[Symbol.asyncIterator]();
    await iterator.next();
    await b.save("it", makeState(msgs(1200, "rewritten")));
    let error: unknown;
    try {
      for (;;) if ((await iterator.next()).done) break;
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConflictError);
    await b.delete("it");
    await expect(
      (async () => {
        for await (const _ of b.iterHistory("it")) {
          // nothing
        }
      })(),
    ).rejects.toBeInstanceOf(StateNotFoundError);
  });

  it("works with an injected ioredis client and leaves it open on close", async () => {
    const client = new Redis(REDIS_URL);
    const shaped: RedisLikeClient = client; // the documented structural shape fits ioredis as is
    const keyPrefix = `duas-rt:${randomUUID()}:`;
    prefixes.push(keyPrefix);
    const b = new RedisBackend({ client: shaped, keyPrefix });
    await client.script("FLUSH"); // EVALSHA must fall back to EVAL when the script cache is empty
    await b.save("inj", makeState(msgs(2)));
    expect((await b.load("inj")).history).toEqual(msgs(2));
    await b.close();
    expect(client.status).toBe("ready");
    await expect(b.load("inj")).rejects.toBeInstanceOf(BackendError);
    client.disconnect();
  });

  it("works with a minimal client offering only evalsha/eval/scan (reads through the Lua script)", async () => {
    const client = new Redis(REDIS_URL);
    const minimal: RedisLikeClient = {
      evalsha: (sha, numKeys, ...args) => client.evalsha(sha, numKeys, ...args),
      eval: (script, numKeys, ...args) => client.eval(script, numKeys, ...args),
      scan: (cursor, m, pattern, c, count, t, type) => client.scan(cursor, m, pattern, c, count, t, type),
    };
    const keyPrefix = `duas-rt:${randomUUID()}:`;
    prefixes.push(keyPrefix);
    const b = new RedisBackend({ client: minimal, keyPrefix });
    const state = makeState(msgs(1234), { name: "minimal" });
    const r1 = await b.write("min", state, { expectedRevision: null });
    expect(await b.read("min")).toEqual({ state, revision: r1.revision });
    expect(await b.read("absent")).toBeUndefined();
    expect(await b.listKeys()).toEqual(["min"]);
    await client.rpush(`${keyPrefix}min/history`, JSON.stringify({ role: "user", content: "stray" }));
    await expect(b.load("min")).rejects.toBeInstanceOf(FormatError);
    expect(await b.delete("min")).toBe(true);
    await b.close();
    client.disconnect();
  });

  it("refuses bad options with an InvalidOptionError", () => {
    expect(() => new RedisBackend({ ttlMs: -1 })).toThrow(InvalidOptionError);
    expect(() => new RedisBackend({ commandTimeoutMs: Number.NaN })).toThrow(InvalidOptionError);
  });
});
