/**
 * Session stores written by the previous release keep working: a SQLite session database and a
 * PostgreSQL session schema, committed under test/fixtures/sessions/ (made by
 * scripts/make-session-fixtures.ts with the code of that release), open, load every session as it
 * was written, and keep saving (appends, rewrites, a key re-created above the revision floor).
 */
import { randomUUID } from "node:crypto";
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend } from "../../src/backends/types.js";
import type { Message } from "../../src/core/messages.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const FIXTURES = path.join(import.meta.dirname, "..", "fixtures", "sessions");
const chat = (n: number, tag: string): Message[] =>
  Array.from({ length: n }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `${tag} ${i}` }) as Message);

/** What the fixture script stored, key by key: the history and the revision. */
const STORED: Record<string, { history: Message[]; revision: number }> = {
  plain: { history: chat(3, "plain"), revision: 1 },
  configured: {
    history: [
      { role: "user", content: "weather in Paris?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } }],
      } as Message,
      { role: "tool", tool_call_id: "call_1", content: '{"temp":12}' } as Message,
      { role: "assistant", content: "12 °C, nul: \u0000, emoji: 🥟" },
    ],
    revision: 1,
  },
  empty: { history: [], revision: 1 },
  compressed: { history: [{ role: "user", content: "x".repeat(4000) }, ...chat(2, "after")], revision: 1 },
  "tenant:a.b-1": { history: chat(2, "odd key"), revision: 1 },
  grown: { history: [...chat(2, "grown"), ...chat(2, "turn 0"), ...chat(2, "turn 1")], revision: 3 },
};

/** The checks every fixture passes, on a backend opened on a copy of it. */
async function opensLoadsAndSaves(backend: StateBackend): Promise<void> {
  expect([...(await backend.listKeys())].sort()).toEqual(Object.keys(STORED).sort());
  for (const [key, want] of Object.entries(STORED)) {
    const found = await backend.read!(key);
    expect(found?.revision, key).toBe(want.revision);
    expect(found?.state.history, key).toEqual(want.history);
    expect(found?.state.meta.agentUuid, key).toMatch(/^00000000-0000-4000-8000-00000000000\d$/);
  }
  const configured = (await backend.read!("configured"))!.state;
  expect(configured.meta.agentName).toBe("weather-bot");
  expect(configured.config.prompt).toBe("You are a weather bot.");
  expect(configured.config.modelName).toBe("gpt-4o-mini");
  expect(configured.config.maxTokens).toBe(512);
  expect(configured.state.currentTaskId).toBe("task-7");
  expect(configured.state.fields).toEqual({ city: "Paris", visits: 3 });

  // Appends after the stored prefix, twice (the second one after what this instance wrote).
  const grown = (await backend.read!("grown"))!;
  let revision = grown.revision;
  for (let turn = 2; turn < 4; turn++) {
    const base = grown.state.history.length;
    grown.state.history.push(...chat(2, `turn ${turn}`));
    const r = await backend.write!("grown", grown.state, { expectedRevision: revision, baseLength: base });
    expect(r).toEqual({ revision: revision + 1, written: 2, rewritten: false });
    revision = r.revision;
  }
  expect((await backend.read!("grown"))!.state.history).toEqual(grown.state.history);

  // A rewrite of a compressed history, a save of a changed config, an append to an empty session.
  const compressed = (await backend.read!("compressed"))!;
  compressed.state.history.splice(1, 1);
  await backend.write!("compressed", compressed.state, { expectedRevision: 1, baseLength: 1 });
  expect((await backend.read!("compressed"))!.state.history).toEqual(compressed.state.history);
  configured.config.maxTokens = 1024;
  configured.history.push({ role: "user", content: "and tomorrow?" });
  await backend.write!("configured", configured, { expectedRevision: 1, baseLength: 4 });
  const again = (await backend.read!("configured"))!;
  expect(again.revision).toBe(2);
  expect(again.state.config.maxTokens).toBe(1024);
  expect(again.state.history).toHaveLength(5);
  const empty = (await backend.read!("empty"))!;
  empty.state.history.push(...chat(1, "first"));
  await backend.write!("empty", empty.state, { expectedRevision: 1, baseLength: 0 });
  expect((await backend.read!("empty"))!.state.history).toEqual(chat(1, "first"));

  // "deleted" was deleted at revision 3: created again, it starts above the floor.
  const created = await backend.write!("deleted", (await backend.read!("plain"))!.state, { expectedRevision: null });
  expect(created.revision).toBe(4);
  await backend.delete("plain");
  expect(await backend.read!("plain")).toBeUndefined();
}

describe("a SQLite session database of the previous release", () => {
  const dir = mkdtempSync(path.join(tmpdir(), "dumplings-session-fixtures-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("opens, loads every session and keeps saving", async () => {
    const file = path.join(dir, "sessions.db");
    copyFileSync(path.join(FIXTURES, "sessions-0.1.db"), file);
    const backend = new SQLiteBackend({ path: file });
    try {
      await opensLoadsAndSaves(backend);
    } finally {
      backend.close();
    }
    // Reopened: what the new code saved reads back.
    const reopened = new SQLiteBackend({ path: file });
    try {
      expect((await reopened.read("grown"))?.state.history).toHaveLength(10);
      expect((await reopened.read("deleted"))?.revision).toBe(4);
    } finally {
      reopened.close();
    }
  });
});

const skip = await postgresSkipReason();

describe.skipIf(!!skip)(
  `a PostgreSQL session schema of the previous release${skip ? ` (skipped: ${skip})` : ""}`,
  () => {
    const schema = `sessions_fixture_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
    afterAll(async () => {
      const admin = new pg.Client({ connectionString: DATABASE_URL });
      await admin.connect();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin.end();
    });

    it("opens, loads every session and keeps saving", async () => {
      const dump = readFileSync(path.join(FIXTURES, "sessions-0.1.pg.sql"), "utf8").replaceAll(
        "sessions_fixture.",
        `${schema}.`,
      );
      const admin = new pg.Client({ connectionString: DATABASE_URL });
      await admin.connect();
      try {
        await admin.query(`CREATE SCHEMA ${schema}`);
        await admin.query(dump.replace(/^CREATE SCHEMA sessions_fixture;$/m, ""));
      } finally {
        await admin.end();
      }
      const backend = new PostgresBackend({ url: DATABASE_URL, schema, maxConnections: 2 });
      try {
        await opensLoadsAndSaves(backend);
      } finally {
        await backend.close();
      }
      const reopened = new PostgresBackend({ url: DATABASE_URL, schema, maxConnections: 1 });
      try {
        expect((await reopened.read("grown"))?.state.history).toHaveLength(10);
        expect((await reopened.read("deleted"))?.revision).toBe(4);
      } finally {
        await reopened.close();
      }
    });
  },
);
