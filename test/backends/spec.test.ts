/**
 * Library options that take a store as a SPEC string (the CLI's syntax):
 * `backendFromSpec` for session backends, `createChatStore({ store: "…" })`
 * and `new DumplingsSaver({ store: "…" })`, on real SQLite, PostgreSQL and
 * Redis; bad SPECs are `InvalidOptionError`s that never show a password.
 */
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { HumanMessage } from "@langchain/core/messages";
import { MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import type { ModelMessage } from "ai";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { createChatStore } from "../../src/ai-sdk/index.js";
import { FileBackend } from "../../src/backends/file/index.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { RedisBackend } from "../../src/backends/redis.js";
import { backendFromSpec } from "../../src/backends/spec.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { InvalidOptionError } from "../../src/core/errors.js";
import { DumplingsSaver } from "../../src/langgraph/index.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";

const pgSkip = await postgresSkipReason();
const redisSkip = await redisSkipReason();
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-spec-"));
const schemas: string[] = [];
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  if (schemas.length > 0 && !pgSkip) {
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    for (const s of schemas) await client.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await client.end();
  }
});

const messages: ModelMessage[] = [
  { role: "user", content: "Where is order 7?" },
  { role: "assistant", content: [{ type: "text", text: "On its way." }] },
];

describe("backendFromSpec", () => {
  it("opens each kind, with the URL's schema/prefix parameter", async () => {
    expect(backendFromSpec(`file:${dir}/sessions`)).toBeInstanceOf(FileBackend);
    const sqlite = backendFromSpec(`sqlite:${dir}/s.db`);
    expect(sqlite).toBeInstanceOf(SQLiteBackend);
    await sqlite.close?.();
    expect(backendFromSpec("memory:")).toBeInstanceOf(MemoryBackend);
    const pgBackend = backendFromSpec("postgres:postgres://u:secret@127.0.0.1:1/db?schema=s1");
    expect(pgBackend).toBeInstanceOf(PostgresBackend);
    await pgBackend.close?.();
    const redis = backendFromSpec("redis://127.0.0.1:1/0?prefix=p:");
    expect(redis).toBeInstanceOf(RedisBackend);
    await redis.close?.();
  });

  it("refuses a bad SPEC with InvalidOptionError, never echoing a password", () => {
    for (const bad of ["", "ftp:x", "sqlite:", "postgres", "redis:", "postgres:http://u:hunter2@h/db"]) {
      let error: unknown;
      try {
        backendFromSpec(bad);
      } catch (e) {
        error = e;
      }
      expect(error, bad).toBeInstanceOf(InvalidOptionError);
      expect(error).toMatchObject({ code: "INVALID_OPTION", option: "store" });
      expect(String((error as Error).message)).not.toContain("hunter2");
    }
  });
});

describe("createChatStore with a SPEC string", () => {
  it("sqlite:PATH round-trips a chat in that file", async () => {
    const file = path.join(dir, "chats.db");
    const chats = createChatStore<ModelMessage>({ store: `sqlite:${file}` });
    await chats.save("c1", messages);
    expect(await chats.load("c1")).toEqual(messages);
    await chats.store.close?.();
    expect(existsSync(file)).toBe(true);
    const again = createChatStore<ModelMessage>({ store: new SQLiteBackend({ dbPath: file }) });
    expect(await again.load("c1")).toEqual(messages);
    await again.store.close?.();
  });

  it.skipIf(!!pgSkip)("postgres://URL?schema=S writes under that schema", async () => {
    const schema = `spec_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
    schemas.push(schema);
    const chats = createChatStore<ModelMessage>({ store: `${DATABASE_URL}?schema=${schema}` });
    await chats.save("c2", messages);
    await chats.store.close?.();
    const direct = createChatStore<ModelMessage>({ store: new PostgresBackend({ url: DATABASE_URL, schema }) });
    expect(await direct.load("c2")).toEqual(messages);
    await direct.store.close?.();
  });

  it.skipIf(!!redisSkip)("redis://URL?prefix=P writes under that prefix", async () => {
    const prefix = `test:spec:${randomUUID()}:`;
    const chats = createChatStore<ModelMessage>({ store: `${REDIS_URL}?prefix=${encodeURIComponent(prefix)}` });
    await chats.save("c3", messages);
    await chats.delete("c3").catch(() => undefined);
    await chats.save("c3", messages);
    await chats.store.close?.();
    const direct = createChatStore<ModelMessage>({ store: new RedisBackend({ url: REDIS_URL, keyPrefix: prefix }) });
    expect(await direct.load("c3")).toEqual(messages);
    await direct.delete("c3");
    await direct.store.close?.();
  });

  it("a bad SPEC is InvalidOptionError and opens nothing", () => {
    expect(() => createChatStore({ store: "sqlite:" })).toThrow(InvalidOptionError);
  });
});

describe("DumplingsSaver with a SPEC string", () => {
  const graph = (saver: DumplingsSaver) =>
    new StateGraph(MessagesAnnotation)
      .addNode("echo", (s) => ({ messages: [new HumanMessage(`echo ${s.messages.length}`)] }))
      .addEdge(START, "echo")
      .compile({ checkpointer: saver });

  it("sqlite:PATH checkpoints a graph that a saver on the same file resumes", async () => {
    const file = path.join(dir, "graph.db");
    const saver = new DumplingsSaver({ store: `sqlite:${file}` });
    const config = { configurable: { thread_id: "t-1" } };
    await graph(saver).invoke({ messages: [new HumanMessage("hi")] }, config);
    await saver.close();
    const reopened = new DumplingsSaver({ store: { sqlite: { path: file } } });
    const tuple = await reopened.getTuple(config);
    expect(tuple?.checkpoint.channel_values.messages as unknown[] | undefined).toHaveLength(2);
    await reopened.close();
  });

  it.skipIf(!!pgSkip)("postgres://URL?schema=S uses that schema", async () => {
    const schema = `spec_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
    schemas.push(schema);
    const saver = new DumplingsSaver({ store: `${DATABASE_URL}?schema=${schema}` });
    await graph(saver).invoke({ messages: [new HumanMessage("hi")] }, { configurable: { thread_id: "t-2" } });
    await saver.close();
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    const { rows } = await client.query("SELECT 1 FROM information_schema.schemata WHERE schema_name = $1", [schema]);
    await client.end();
    expect(rows).toHaveLength(1);
  });

  it("memory: and a bad SPEC", () => {
    expect(new DumplingsSaver({ store: "memory:" })).toBeInstanceOf(DumplingsSaver);
    expect(() => new DumplingsSaver({ store: "file:./x" })).toThrow(/a file store is not accepted here/);
  });
});
