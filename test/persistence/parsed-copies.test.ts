/**
 * `saveState` of an agent whose history is replaced by parsed copies (a server that rebuilds it from a
 * request body or a cache each turn): the stored prefix is recognised by its exact JSON text, so one
 * more message writes one message on every backend, and a changed, removed or reordered message is
 * still rewritten, with the stored history exactly the agent's.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { RedisBackend } from "../../src/backends/redis.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import {
  AnthropicAgent,
  BaseAgent,
  loadState,
  MemoryBackend,
  type Message,
  type StateBackend,
  saveState,
} from "../../src/index.js";
import { loadSampleConversations } from "../../src/testing/samples.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-parsed-"));
const redisSkip = await redisSkipReason();
const postgresSkip = await postgresSkipReason();
const redisPrefix = `parsed-copies-test:${randomUUID()}:`;
const pgSchema = `parsed_${randomUUID().replaceAll("-", "").slice(0, 20)}`;
const opened: StateBackend[] = [];

const cases: { name: string; skip?: string; make: () => StateBackend }[] = [
  { name: "memory", make: () => new MemoryBackend() },
  { name: "file", make: () => new FileBackend({ baseDir: mkdtempSync(path.join(tmp, "file-")) }) },
  { name: "sqlite", make: () => new SQLiteBackend({ dbPath: path.join(mkdtempSync(path.join(tmp, "db-")), "s.db") }) },
  { name: "redis", skip: redisSkip, make: () => new RedisBackend({ url: REDIS_URL, keyPrefix: redisPrefix }) },
  { name: "postgres", skip: postgresSkip, make: () => new PostgresBackend({ url: DATABASE_URL, schema: pgSchema }) },
];

afterAll(async () => {
  for (const b of opened) await b.close?.();
  if (!redisSkip) {
    const admin = new Redis(REDIS_URL);
    const keys = await admin.keys(`${redisPrefix.replace(/[*?[\]\\]/g, "\\$&")}*`);
    if (keys.length > 0) await admin.del(...keys);
    admin.disconnect();
  }
  if (!postgresSkip) {
    const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
    await admin.query(`DROP SCHEMA IF EXISTS "${pgSchema}" CASCADE`);
    await admin.end();
  }
  rmSync(tmp, { recursive: true, force: true });
});

const samples = loadSampleConversations({ source: "bundled" });
const reparsed = (h: Message[]): Message[] => JSON.parse(JSON.stringify(h)) as Message[];

describe.each(cases)("saveState of parsed copies on $name", ({ skip, make }) => {
  it.skipIf(skip)("one more message to a history replaced by parsed copies writes one message", async () => {
    const backend = make();
    opened.push(backend);
    for (const protocol of ["openai", "anthropic"] as const) {
      const sample = samples.find((s) => s.protocol === protocol && s.messages.length >= 6);
      if (sample === undefined) throw new Error(`no bundled ${protocol} conversation of 6 messages`);
      const Cls = protocol === "openai" ? BaseAgent : AnthropicAgent;
      const agent = new Cls({ name: `parsed-${protocol}` });
      const key = `parsed-${protocol}-${randomUUID()}`;
      agent.history.push(...reparsed(sample.messages.slice(0, 3)));
      await saveState(agent, key, { backend });
      for (let n = 4; n <= sample.messages.length; n++) {
        // the whole history replaced by fresh copies, one message longer
        agent.history.splice(0, agent.history.length, ...reparsed(sample.messages.slice(0, n)));
        const r = await saveState(agent, key, { backend });
        expect(r, `${protocol} n = ${n}`).toMatchObject({ written: 1, rewritten: false });
      }
      expect((await loadState(key, { backend })).history).toEqual(sample.messages);

      // an older message changed in a parsed copy: rewritten, the stored history is exactly the agent's
      const changed = reparsed(agent.history);
      changed[1] = { role: "user", content: "changed" } as Message;
      agent.history.splice(0, agent.history.length, ...changed);
      expect(await saveState(agent, key, { backend })).toMatchObject({ rewritten: true });
      expect((await loadState(key, { backend })).history).toEqual(changed);
      // removed
      const removed = reparsed(agent.history).filter((_, i) => i !== 2);
      agent.history.splice(0, agent.history.length, ...removed);
      expect(await saveState(agent, key, { backend })).toMatchObject({ rewritten: true });
      expect((await loadState(key, { backend })).history).toEqual(removed);
      // the same content with its keys in another order serialises to other bytes: rewritten, never wrong
      const reordered = reparsed(agent.history).map((m) => Object.fromEntries(Object.entries(m).reverse()) as Message);
      agent.history.splice(0, agent.history.length, ...reordered, { role: "user", content: "one more" });
      expect(await saveState(agent, key, { backend })).toMatchObject({ rewritten: true });
      expect((await loadState(key, { backend })).history).toEqual(agent.history);
    }
  });
});
