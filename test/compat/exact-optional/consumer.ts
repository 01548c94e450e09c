/**
 * A program compiled with `exactOptionalPropertyTypes: true` (and `noUncheckedIndexedAccess`), against the
 * library's emitted declarations: the forms a user writes must compile under that flag. Typechecked by
 * test/compat/exact-optional.test.ts; never run.
 */

import { BaseAgent, FileBackend, MemoryBackend, type StateBackend, saveState } from "dumplings-ai";
import { createChatStore } from "dumplings-ai/ai-sdk";
import { PostgresBackend } from "dumplings-ai/postgres";
import { RedisBackend } from "dumplings-ai/redis";
import { SQLiteBackend } from "dumplings-ai/sqlite";
import { CheckpointStore, END, RedisHotTier, ResumableGraphRunner, SqliteColdStore } from "dumplings-ai/workflow";

// Every built-in session backend is a StateBackend.
const backends: StateBackend[] = [
  new FileBackend({ baseDir: "/tmp/x" }),
  new MemoryBackend(),
  new SQLiteBackend({ dbPath: "/tmp/x.db" }),
  new RedisBackend({}),
  new PostgresBackend({}),
];
await saveState(new BaseAgent({ name: "a" }), "k", { backend: new SQLiteBackend({ dbPath: "/tmp/x.db" }) });
const chats = createChatStore({ store: new SQLiteBackend({ dbPath: "/tmp/chats.db" }) });

// An optional hot tier chosen at run time.
const store = await CheckpointStore.open({
  cold: new SqliteColdStore({ path: "/tmp/workflows.db" }),
  hot: process.env.REDIS_URL ? new RedisHotTier({ url: process.env.REDIS_URL, ttlMs: 86_400_000 }) : undefined,
});
const runner = new ResumableGraphRunner({
  store,
  nodes: {
    plan: async () => ({ next: "approve", updates: { plan: ["refund order 42"] } }),
    approve: async (s, ctx) => {
      // sharedMemory.plan is `JsonValue | undefined` (an index signature under noUncheckedIndexedAccess)
      const ok = await ctx.interrupt({ reason: "approve the plan?", payload: s.sharedMemory.plan });
      return { next: END, updates: { ok } };
    },
  },
});

export { backends, chats, runner };
