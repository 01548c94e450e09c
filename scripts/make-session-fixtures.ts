/**
 * Writes the session-store fixtures of test/fixtures/sessions/ with the code of this checkout:
 * a SQLite session database (`sessions-0.1.db`) and a PostgreSQL session schema as SQL text
 * (`sessions-0.1.pg.sql`, schema name `sessions_fixture`, loaded into a fresh schema by
 * test/backends/session-fixtures.test.ts). Run once per release whose layout must keep opening:
 *
 *   npx tsx scripts/make-session-fixtures.ts [postgres-url]
 *
 * The PostgreSQL dump needs `pg_dump` on PATH and a server at the URL (default the tests' one).
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { PostgresBackend } from "../src/backends/postgres.js";
import { SQLiteBackend } from "../src/backends/sqlite.js";
import type { Message } from "../src/core/messages.js";
import type { AgentState } from "../src/core/state.js";
import { makeState } from "../src/testing/states.js";

const OUT = path.join(import.meta.dirname, "..", "test", "fixtures", "sessions");
const SCHEMA = "sessions_fixture";
const url = process.argv[2] ?? "postgres://postgres@127.0.0.1:5432/test";

const at = "2026-12-01T10:00:00.000+00:00";
const uuid = (n: number) => `00000000-0000-4000-8000-00000000000${n}`;
const chat = (n: number, tag: string): Message[] =>
  Array.from({ length: n }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `${tag} ${i}` }) as Message);

/** The sessions every fixture holds, in the order they are written. */
function sessions(): { key: string; state: AgentState; compressed?: boolean }[] {
  const tools: Message[] = [
    { role: "user", content: "weather in Paris?" },
    {
      role: "assistant",
      content: "",
      tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } }],
    } as Message,
    { role: "tool", tool_call_id: "call_1", content: '{"temp":12}' } as Message,
    { role: "assistant", content: "12 °C, nul: \u0000, emoji: 🥟" },
  ];
  return [
    { key: "plain", state: makeState(chat(3, "plain"), { uuid: uuid(1), savedAt: at }) },
    {
      key: "configured",
      state: makeState(tools, {
        uuid: uuid(2),
        savedAt: at,
        name: "weather-bot",
        config: { prompt: "You are a weather bot.", modelName: "gpt-4o-mini", maxTokens: 512 },
        currentTaskId: "task-7",
        fields: { city: "Paris", visits: 3 },
      }),
    },
    { key: "empty", state: makeState([], { uuid: uuid(3), savedAt: at }) },
    {
      key: "compressed",
      state: makeState([{ role: "user", content: "x".repeat(4000) }, ...chat(2, "after")], {
        uuid: uuid(4),
        savedAt: at,
      }),
      compressed: true,
    },
    { key: "tenant:a.b-1", state: makeState(chat(2, "odd key"), { uuid: uuid(5), savedAt: at }) },
  ];
}

interface Store {
  write(
    key: string,
    state: AgentState,
    o?: { expectedRevision?: number | null; baseLength?: number },
  ): Promise<{ revision: number }>;
  delete(key: string): boolean | Promise<boolean>;
}

/** Writes the sessions, appends to one (an append path row), and deletes one (the revision floor). */
async function fill(store: Store, compressing: Store): Promise<void> {
  for (const { key, state, compressed } of sessions()) {
    await (compressed ? compressing : store).write(key, state, { expectedRevision: null });
  }
  const grown = makeState(chat(2, "grown"), { uuid: uuid(6), savedAt: at });
  let { revision } = await store.write("grown", grown, { expectedRevision: null });
  for (let i = 0; i < 2; i++) {
    const base = grown.history.length;
    grown.history.push(...chat(2, `turn ${i}`));
    ({ revision } = await store.write("grown", grown, { expectedRevision: revision, baseLength: base }));
  }
  const gone = makeState(chat(1, "gone"), { uuid: uuid(7), savedAt: at });
  ({ revision } = await store.write("deleted", gone, { expectedRevision: null }));
  await store.write("deleted", gone, { expectedRevision: revision, baseLength: 1 });
  await store.write("deleted", gone, { expectedRevision: revision + 1, baseLength: 1 });
  await store.delete("deleted"); // at revision 3: the floor is 3
}

async function sqlite(): Promise<void> {
  const file = path.join(OUT, "sessions-0.1.db");
  rmSync(file, { force: true });
  const plain = new SQLiteBackend({ path: file });
  const gz = new SQLiteBackend({ path: file, compressHistory: true });
  await fill(plain, gz);
  gz.close();
  plain.close();
  for (const tail of ["-wal", "-shm"]) rmSync(file + tail, { force: true });
}

async function postgres(): Promise<void> {
  const plain = new PostgresBackend({ url, schema: SCHEMA });
  const gz = new PostgresBackend({ url, schema: SCHEMA, compressHistory: true });
  const drop = new PostgresBackend({ url, schema: "public" });
  await (drop as unknown as { driver: { pool: { query(t: string): Promise<unknown> } } }).driver.pool.query(
    `DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`,
  );
  await drop.close();
  await fill(plain, gz);
  await gz.close();
  await plain.close();
  const dump = execFileSync(
    "pg_dump",
    ["--schema", SCHEMA, "--inserts", "--no-owner", "--no-privileges", "--no-comments", url],
    { encoding: "utf8" },
  );
  // Only the statements a client sends (no SET of the dumping server, no psql meta-commands).
  const kept = dump
    .split(/;\n/)
    .map((s) => s.replace(/^(--[^\n]*\n|\s*\n)*/g, "").trim())
    .filter((s) => s !== "" && !/^(SET|SELECT pg_catalog\.set_config|\\)/.test(s));
  writeFileSync(
    path.join(OUT, "sessions-0.1.pg.sql"),
    `-- A PostgreSQL session schema as dumplings-ai 0.1 writes it (scripts/make-session-fixtures.ts).\n${kept.join(";\n\n")};\n`,
  );
}

mkdirSync(OUT, { recursive: true });
await sqlite();
await postgres();
