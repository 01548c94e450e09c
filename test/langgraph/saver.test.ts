/**
 * DumplingsSaver under a real LangGraph.js `StateGraph` with
 * `MessagesAnnotation`, on every store: how much a 200-step conversation
 * stores (bytes, against the raw JSON of its final messages and against
 * LangGraph's own SqliteSaver), and that what LangGraph reads back is right —
 * state history, time travel and forks, a restart on the same file,
 * `interrupt` + `Command({ resume })`, a non-append change of the messages,
 * `deleteThread`.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { AIMessage, HumanMessage, RemoveMessage } from "@langchain/core/messages";
import { Command, END, interrupt, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import type { BaseCheckpointSaver } from "@langchain/langgraph-checkpoint";
import { SqliteSaver } from "@langchain/langgraph-checkpoint-sqlite";
import Database from "better-sqlite3";
import type { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { InvalidOptionError } from "../../src/core/errors.js";
import { globEscape, type RedisConnection } from "../../src/drivers/redis.js";
import type { SqlDriver } from "../../src/drivers/sql.js";
import { SqliteDriver } from "../../src/drivers/sqlite.js";
import {
  DumplingsSaver,
  MemorySaverStorage,
  RedisSaverStorage,
  type SaverStorage,
  type SqlSaverStorage,
} from "../../src/langgraph/index.js";
import { langgraphMigrations, SqlSaverStorage as SqlStorage } from "../../src/langgraph/storage-sql.js";
import {
  DATABASE_URL,
  postgresSkipReason,
  REDIS_URL,
  redisSkipReason,
  SERVICES_REQUIRED,
} from "../helpers/services.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-langgraph-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const postgresSkip = await postgresSkipReason();
const redisSkip = await redisSkipReason();
const schemas: string[] = [];
let n = 0;

/** A reply of a realistic length (about 400 characters). */
const reply = (i: number) =>
  `Reply ${i}: ${"the quick brown fox jumps over the lazy dog and keeps running. ".repeat(6)}`.trim();

/** A graph that appends one AI message (id `${prefix}${position}`) per step until the thread holds `total` messages. */
function loopGraph(checkpointer: BaseCheckpointSaver, total: number, prefix = "m") {
  return new StateGraph(MessagesAnnotation)
    .addNode("step", (s) => ({
      messages: [new AIMessage({ content: reply(s.messages.length), id: `${prefix}${s.messages.length}` })],
    }))
    .addEdge(START, "step")
    .addConditionalEdges("step", (s) => (s.messages.length < total ? "step" : END))
    .compile({ checkpointer });
}

const config = (threadId: string, checkpointId?: string) => ({
  configurable: { thread_id: threadId, ...(checkpointId === undefined ? {} : { checkpoint_id: checkpointId }) },
  recursionLimit: 1000,
});

/** Bytes stored for a thread, every column counted. */
async function storedBytes(saver: DumplingsSaver, threadId: string): Promise<number> {
  const storage = saver.storage as SaverStorage;
  if (storage instanceof MemorySaverStorage) {
    let total = 0;
    for await (const row of storage.listCheckpoints({ threadId })) {
      total += row.checkpoint.byteLength + row.metadata.byteLength + row.checkpointId.length * 2;
      for (const w of await storage.getWrites(threadId, row.ns, row.checkpointId)) total += w.data.byteLength;
    }
    const blobs = (
      storage as unknown as { threads: Map<string, Map<string, { blobs: Map<string, { data: Uint8Array }> }>> }
    ).threads;
    for (const space of blobs.get(threadId)?.values() ?? [])
      for (const b of space.blobs.values()) total += b.data.byteLength;
    return total;
  }
  if (storage instanceof RedisSaverStorage) {
    // Every byte of every key of the thread: key names, hash fields and values, sorted-set and set members.
    const conn = storage.conn as RedisConnection<Redis>; // the public type names no ioredis command
    return conn.call("measure", threadId, async (c) => {
      let total = 0;
      for (let cursor = "0"; ; ) {
        const [next, keys] = await c.scan(cursor, "MATCH", `${globEscape(`${conn.keyPrefix}{${threadId}}`)}*`);
        for (const key of keys) {
          total += Buffer.byteLength(key);
          const type = await c.type(key);
          if (type === "hash") {
            for (const [f, v] of Object.entries(await c.hgetallBuffer(key)))
              total += Buffer.byteLength(f) + v.byteLength;
          } else if (type === "zset") for (const m of await c.zrange(key, 0, -1)) total += Buffer.byteLength(m);
          else if (type === "set") for (const m of await c.smembers(key)) total += Buffer.byteLength(m);
        }
        cursor = next;
        if (cursor === "0") break;
      }
      return total;
    });
  }
  const driver = (storage as SqlSaverStorage).driver as SqlDriver;
  const len = driver.name === "postgres" ? "octet_length" : "length";
  const cols = {
    langgraph_checkpoints: [
      "thread_id",
      "ns",
      "checkpoint_id",
      "parent_id",
      "type",
      "checkpoint",
      "metadata_type",
      "metadata",
    ],
    langgraph_blobs: ["thread_id", "ns", "channel", "version", "kind", "anchor", "base", "type", "data"],
    langgraph_writes: ["thread_id", "ns", "checkpoint_id", "task_id", "channel", "task_path", "type", "data"],
  };
  let total = 0;
  for (const [table, columns] of Object.entries(cols)) {
    const sum = columns.map((c) => `COALESCE(${len}(${c}), 0)`).join(" + ");
    const r = await driver.query(
      "measure",
      undefined,
      `SELECT SUM(${sum}) AS n FROM ${driver.table(table)} WHERE thread_id = $1`,
      [threadId],
    );
    total += Number(r.rows[0]?.n ?? 0);
  }
  return total;
}

interface Store {
  name: string;
  skip?: string;
  open(file?: string): DumplingsSaver;
}
const stores: Store[] = [
  { name: "memory", open: () => new DumplingsSaver({ store: { memory: true } }) },
  {
    name: "sqlite",
    open: (file) => new DumplingsSaver({ store: { sqlite: { path: file ?? path.join(dir, `s${n++}.db`) } } }),
  },
  {
    name: "postgres",
    skip: SERVICES_REQUIRED ? undefined : postgresSkip,
    open: (schema) => {
      const s = schema ?? `lg_${process.pid}_${Date.now().toString(36)}_${n++}`;
      schemas.push(s);
      return new DumplingsSaver({ store: { postgres: { url: DATABASE_URL, schema: s, maxConnections: 2 } } });
    },
  },
  {
    name: "redis",
    skip: SERVICES_REQUIRED ? undefined : redisSkip,
    open: () =>
      new DumplingsSaver({
        store: { redis: { url: REDIS_URL, keyPrefix: `test:lg:${process.pid}:${Date.now().toString(36)}:${n++}:` } },
      }),
  },
];

afterAll(async () => {
  if (schemas.length === 0 || postgresSkip !== undefined) return;
  const pg = await import("pg");
  const client = new pg.default.Client({ connectionString: DATABASE_URL });
  await client.connect();
  for (const s of new Set(schemas)) await client.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
  await client.end();
});

for (const store of stores) {
  describe.skipIf(store.skip !== undefined)(
    `DumplingsSaver on ${store.name}${store.skip ? ` (${store.skip})` : ""}`,
    () => {
      it("a 200-step graph adding one message per step stores at most 5x the raw JSON of its final messages", async () => {
        const saver = store.open();
        const graph = loopGraph(saver, 200);
        const out = await graph.invoke({ messages: [new HumanMessage({ content: "hi", id: "h" })] }, config("growth"));
        expect(out.messages).toHaveLength(200);
        const raw = Buffer.byteLength(JSON.stringify(out.messages));
        const stored = await storedBytes(saver, "growth");
        console.log(
          `[langgraph ${store.name}] 200 steps: stored ${stored} bytes, ${(stored / raw).toFixed(2)}x the raw JSON (${raw} bytes) of the final messages`,
        );
        expect(stored).toBeLessThanOrEqual(5 * raw);
        // Every checkpoint reads back as a prefix of the final conversation, of the length of its step.
        const finalIds = out.messages.map((m) => m.id);
        let count = 0;
        for await (const snapshot of graph.getStateHistory(config("growth"))) {
          const ids = (snapshot.values.messages ?? []).map((m: { id?: string }) => m.id);
          expect(ids).toEqual(finalIds.slice(0, ids.length));
          count++;
        }
        expect(count).toBe(201);
        await saver.close();
      });

      it("time travel: a fork from a past checkpoint continues from that checkpoint, and the original branch is intact", async () => {
        const saver = store.open();
        const graph = loopGraph(saver, 40);
        const thread = "fork";
        const out = await graph.invoke({ messages: [new HumanMessage({ content: "hi", id: "h" })] }, config(thread));
        const history = [];
        for await (const s of graph.getStateHistory(config(thread))) history.push(s);
        const past = history.find((s) => s.values.messages?.length === 10);
        expect(past).toBeDefined();
        const pastId = past?.config.configurable?.checkpoint_id as string;
        // Fork: a human message added at the past checkpoint; the graph then runs on to 40 again.
        const forked = await loopGraph(saver, 45).invoke(
          { messages: [new HumanMessage({ content: "branch", id: "b" })] },
          config(thread, pastId),
        );
        expect(forked.messages.map((m) => m.id)).toEqual([
          ...out.messages.slice(0, 10).map((m) => m.id),
          "b",
          ...Array.from({ length: 34 }, (_, i) => `m${11 + i}`),
        ]);
        const original = await graph.getState(config(thread, history[0]?.config.configurable?.checkpoint_id as string));
        expect(original.values.messages.map((m: { id?: string }) => m.id)).toEqual(out.messages.map((m) => m.id));
        await saver.close();
      });

      it("interrupt and Command({ resume }) continue the run where it stopped, with its pending writes", async () => {
        const saver = store.open();
        const graph = new StateGraph(MessagesAnnotation)
          .addNode("ask", () => {
            const answer = interrupt("approve?") as string;
            return { messages: [new AIMessage({ content: `approved: ${answer}`, id: "a" })] };
          })
          .addNode("done", () => ({ messages: [new AIMessage({ content: "done", id: "d" })] }))
          .addEdge(START, "ask")
          .addEdge("ask", "done")
          .addEdge("done", END)
          .compile({ checkpointer: saver });
        await graph.invoke({ messages: [new HumanMessage({ content: "go", id: "h" })] }, config("hitl"));
        const paused = await graph.getState(config("hitl"));
        expect(paused.next).toEqual(["ask"]);
        expect(paused.tasks[0]?.interrupts[0]?.value).toBe("approve?");
        const out = await graph.invoke(new Command({ resume: "yes" }), config("hitl"));
        expect(out.messages.map((m) => m.content)).toEqual(["go", "approved: yes", "done"]);
        await saver.close();
      });

      it("a change that is not an append (a removed message) is stored whole and reads back right", async () => {
        const saver = store.open();
        const graph = loopGraph(saver, 5);
        await graph.invoke({ messages: [new HumanMessage({ content: "hi", id: "h" })] }, config("rm"));
        await graph.updateState(config("rm"), { messages: [new RemoveMessage({ id: "m2" })] });
        const state = await graph.getState(config("rm"));
        expect(state.values.messages.map((m: { id?: string }) => m.id)).toEqual(["h", "m1", "m3", "m4"]);
        const removal = await saver.getTuple(config("rm"));
        const version = String(removal?.checkpoint.channel_versions.messages);
        const rows = await saver.storage.getBlobs("rm", "", [{ channel: "messages", version }]);
        expect(rows.find((r) => r.version === version)?.kind).toBe("full");
        // The removal's version is stored whole; the steps after it are deltas of it again.
        const out = await loopGraph(saver, 6, "x").invoke({ messages: [] }, config("rm"));
        expect(out.messages.map((m) => m.id)).toEqual(["h", "m1", "m3", "m4", "x4", "x5"]);
        const again = await saver.getTuple(config("rm"));
        expect(((again?.checkpoint.channel_values.messages ?? []) as { id?: string }[]).map((m) => m.id)).toEqual([
          "h",
          "m1",
          "m3",
          "m4",
          "x4",
          "x5",
        ]);
        await saver.close();
      });

      it("deleteThread removes the thread and nothing else", async () => {
        const saver = store.open();
        const graph = loopGraph(saver, 3);
        await graph.invoke({ messages: [new HumanMessage({ content: "hi", id: "h" })] }, config("del-1"));
        await graph.invoke({ messages: [new HumanMessage({ content: "hi", id: "h" })] }, config("del-2"));
        await saver.deleteThread("del-1");
        expect(await saver.getTuple(config("del-1"))).toBeUndefined();
        expect(await storedBytes(saver, "del-1")).toBe(0);
        expect((await graph.getState(config("del-2"))).values.messages).toHaveLength(3);
        await saver.close();
      });
    },
  );
}

describe("DumplingsSaver on SQLite across a restart", () => {
  it("a new process (a new saver on the same file) continues the thread as deltas and reads it back whole", async () => {
    const file = path.join(dir, "restart.db");
    const first = new DumplingsSaver({ store: { sqlite: { path: file } } });
    await loopGraph(first, 50).invoke({ messages: [new HumanMessage({ content: "hi", id: "h" })] }, config("r"));
    await first.close();
    const count = (sql: string) => {
      const db = new Database(file, { readonly: true });
      const rows = db.prepare(sql).all() as { kind: string }[];
      db.close();
      return rows.map((r) => r.kind);
    };
    const KINDS = "SELECT kind FROM langgraph_blobs WHERE channel = 'messages' ORDER BY CAST(version AS REAL)";
    const before = count(KINDS).length;
    const second = new DumplingsSaver({ store: { sqlite: { path: file } } });
    const out = await loopGraph(second, 60).invoke({ messages: [] }, config("r"));
    expect(out.messages.map((m) => m.id)).toEqual(["h", ...Array.from({ length: 59 }, (_, i) => `m${i + 1}`)]);
    await second.close();
    // Every write after the restart (the input's, then one per step) extends the value stored before it: no full copy.
    const after = count(KINDS).slice(before);
    expect(after.length).toBeGreaterThanOrEqual(10);
    expect(after.every((k) => k === "delta")).toBe(true);
  });

  it("a file of the previous release (WITHOUT ROWID tables, version 1) is rebuilt as rowid tables on open and the thread goes on", async () => {
    const file = path.join(dir, "v1.db");
    const v1 = {
      component: "langgraph",
      migrations: langgraphMigrations("sqlite").migrations.filter((m) => m.version === 1),
    };
    const old = new DumplingsSaver({
      store: new SqlStorage(new SqliteDriver("sqlite", { path: file }, v1, { incrementalVacuum: true })),
    });
    await loopGraph(old, 20).invoke({ messages: [new HumanMessage({ content: "hi", id: "h" })] }, config("v1"));
    await old.close();
    const tables = () => {
      const db = new Database(file, { readonly: true });
      const rows = db
        .prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name GLOB 'langgraph_*'")
        .all();
      const anchor = db.prepare("SELECT 1 FROM sqlite_master WHERE name = 'langgraph_blobs_anchor'").get();
      db.close();
      return { rows: rows as { name: string; sql: string }[], anchor: anchor !== undefined };
    };
    expect(
      tables()
        .rows.map((r) => r.sql)
        .every((sql) => /WITHOUT ROWID/.test(sql)),
    ).toBe(true);
    const reopened = new DumplingsSaver({ store: { sqlite: { path: file } } });
    try {
      const out = await loopGraph(reopened, 30).invoke({ messages: [] }, config("v1"));
      expect(out.messages.map((m) => m.id)).toEqual(["h", ...Array.from({ length: 29 }, (_, i) => `m${i + 1}`)]);
    } finally {
      await reopened.close();
    }
    const after = tables();
    expect(after.rows.map((r) => r.name).sort()).toEqual([
      "langgraph_blobs",
      "langgraph_checkpoints",
      "langgraph_writes",
    ]);
    for (const r of after.rows) expect(r.sql, r.name).not.toMatch(/WITHOUT ROWID/);
    expect(after.anchor).toBe(true);
  });

  it("stores at least 10x less than LangGraph's SqliteSaver for the same 200-step run", async () => {
    const ours = new DumplingsSaver({ store: { sqlite: { path: path.join(dir, "cmp-ours.db") } } });
    await loopGraph(ours, 200).invoke({ messages: [new HumanMessage({ content: "hi", id: "h" })] }, config("cmp"));
    const oursBytes = await storedBytes(ours, "cmp");
    await ours.close();
    const theirsDb = new Database(path.join(dir, "cmp-theirs.db"));
    const theirs = new SqliteSaver(theirsDb);
    await loopGraph(theirs, 200).invoke({ messages: [new HumanMessage({ content: "hi", id: "h" })] }, config("cmp"));
    const sum = (sql: string) => Number((theirsDb.prepare(sql).get() as { n: number }).n);
    const theirsBytes =
      sum("SELECT SUM(length(checkpoint) + length(metadata)) AS n FROM checkpoints") +
      sum("SELECT SUM(length(value)) AS n FROM writes");
    theirsDb.close();
    console.log(`[langgraph] 200 steps: DumplingsSaver ${oursBytes} bytes, SqliteSaver ${theirsBytes} bytes`);
    expect(oursBytes * 10).toBeLessThan(theirsBytes);
  });
});

describe("DumplingsSaver options", () => {
  it("refuses a missing, unknown or ambiguous store, and unknown options, with InvalidOptionError", () => {
    expect(() => new DumplingsSaver({} as never)).toThrow(InvalidOptionError);
    expect(() => new DumplingsSaver({ store: { mongo: {} } } as never)).toThrow(
      /exactly one of memory, sqlite, postgres/,
    );
    expect(() => new DumplingsSaver({ store: { memory: true, sqlite: {} } } as never)).toThrow(InvalidOptionError);
    expect(() => new DumplingsSaver({ store: { memory: true }, maxDeltaChian: 3 } as never)).toThrow(
      /did you mean maxDeltaChain/,
    );
    expect(() => new DumplingsSaver({ store: { memory: true }, maxDeltaChain: 0 })).toThrow(InvalidOptionError);
    expect(() => new DumplingsSaver({ store: { sqlite: { pth: "x.db" } } } as never)).toThrow(/did you mean path/);
  });

  it("put without a thread_id is refused and stores nothing", async () => {
    const storage = new MemorySaverStorage();
    const saver = new DumplingsSaver({ store: storage });
    const cp = {
      v: 4,
      id: "1",
      ts: new Date().toISOString(),
      channel_values: {},
      channel_versions: {},
      versions_seen: {},
    };
    await expect(saver.put({ configurable: {} }, cp, { source: "input", step: -1, parents: {} }, {})).rejects.toThrow(
      /thread_id/,
    );
    const rows = [];
    for await (const r of storage.listCheckpoints({})) rows.push(r);
    expect(rows).toHaveLength(0);
  });
});
