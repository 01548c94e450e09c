/**
 * A long thread reads back in time on the SQL stores: 3,000 checkpoints, each
 * appending one message, then the latest checkpoint is read. Found by
 * `npm run bench` (N = 10,000 on PostgreSQL hit the 30 s statement timeout):
 * the read's correlated `IN` let PostgreSQL, without statistics on a fresh
 * table, re-scan the thread's rows for each of its rows (quadratic). Here a
 * 500 ms statement timeout turns that back into a failure (the quadratic read
 * took about 0.9 s at this length; the fixed one a few ms).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { emptyCheckpoint, uuid6 } from "@langchain/langgraph-checkpoint";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { DumplingsSaver } from "../../src/langgraph/index.js";
import { DATABASE_URL, postgresSkipReason, SERVICES_REQUIRED } from "../helpers/services.js";

const STEPS = 3000;
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-langgraph-long-"));
const schema = `lg_long_${process.pid}_${Date.now().toString(36)}`;
const postgresSkip = SERVICES_REQUIRED ? undefined : await postgresSkipReason();

afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  if (postgresSkip !== undefined) return;
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await client.end();
});

/** Appends one message per checkpoint, as a graph's messages channel does; returns the messages. */
async function grow(saver: DumplingsSaver, threadId: string): Promise<{ messages: unknown[]; ids: string[] }> {
  const messages: unknown[] = [];
  const ids: string[] = [];
  let parent: string | undefined;
  for (let step = 0; step < STEPS; step++) {
    messages.push({ role: step % 2 ? "assistant" : "user", content: `message ${step}` });
    const checkpoint = emptyCheckpoint();
    checkpoint.id = uuid6(step);
    checkpoint.channel_values = { messages: messages.slice() };
    checkpoint.channel_versions = { messages: step + 1 };
    const config = { configurable: { thread_id: threadId, checkpoint_ns: "", checkpoint_id: parent } };
    const next = await saver.put(config, checkpoint, { source: "loop", step, parents: {} }, { messages: step + 1 });
    parent = next.configurable?.checkpoint_id as string;
    ids.push(parent);
  }
  return { messages, ids };
}

const stores = [
  {
    name: "postgres",
    skip: postgresSkip,
    open: () =>
      new DumplingsSaver({
        store: { postgres: { url: DATABASE_URL, schema, maxConnections: 2, statementTimeoutMs: 500 } },
      }),
  },
  {
    name: "sqlite",
    skip: undefined,
    open: () => new DumplingsSaver({ store: { sqlite: { path: path.join(dir, "long.db") } } }),
  },
];

for (const store of stores) {
  describe.skipIf(store.skip !== undefined)(`DumplingsSaver on ${store.name}: a ${STEPS}-step thread`, () => {
    it("reads its latest and an early checkpoint back whole, within the statement timeout", async () => {
      const saver = store.open();
      try {
        const { messages, ids } = await grow(saver, "long");
        // a new saver: no cached values, every read goes to the store
        const reader = store.open();
        try {
          const latest = await reader.getTuple({ configurable: { thread_id: "long", checkpoint_ns: "" } });
          expect(latest?.checkpoint.channel_values.messages).toEqual(messages);
          const early = await reader.getTuple({
            configurable: { thread_id: "long", checkpoint_ns: "", checkpoint_id: ids[9] },
          });
          expect(early?.checkpoint.channel_values.messages).toEqual(messages.slice(0, 10));
        } finally {
          await reader.close();
        }
      } finally {
        await saver.close();
      }
    }, 120_000);
  });
}
