/**
 * PostgreSQL-specific behaviour beyond the conformance suite: migrations under
 * an advisory lock from several pools at once, column types (text, not jsonb),
 * pb-07 (NUL, control characters, lone surrogates), appends that insert only
 * new rows, corrupt data, retention (`gc`), racing pools, snapshot streaming,
 * injected pool, a dead server.
 */
import { randomUUID } from "node:crypto";
import net from "node:net";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { type PgLikePool, PostgresBackend } from "../../src/backends/postgres.js";
import { BackendError, ConflictError, FormatError, InvalidOptionError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import { makeState } from "../../src/testing/states.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const skip = await postgresSkipReason();

const msgs = (n: number, tag = "m"): Message[] =>
  Array.from({ length: n }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `${tag} ${i}` }) as Message);

describe("postgres backend options", () => {
  it("refuses a schema name that is not a plain identifier", () => {
    for (const bad of ['bad"name', "1abc", "a;drop", "", "a-b", "x".repeat(64), "sch ema"]) {
      expect(() => new PostgresBackend({ schema: bad }), bad).toThrow(InvalidOptionError);
    }
  });

  it("a dead server gives BackendError within a bound, never a hang", async () => {
    const port = await new Promise<number>((resolve) => {
      const srv = net.createServer().listen(0, "127.0.0.1", () => {
        const { port } = srv.address() as net.AddressInfo;
        srv.close(() => resolve(port));
      });
    });
    const b = new PostgresBackend({
      connectionString: `postgres://postgres@127.0.0.1:${port}/x`,
      connectTimeoutMs: 1000,
    });
    const started = Date.now();
    const e = await b.save("k", makeState([])).catch((x) => x);
    expect(e).toBeInstanceOf(BackendError);
    expect(e.message).toContain('cannot save "k"');
    await expect(b.load("k")).rejects.toBeInstanceOf(BackendError);
    await expect(b.listKeys()).rejects.toBeInstanceOf(BackendError);
    expect(Date.now() - started).toBeLessThan(10_000);
    await b.close();
  });
});

describe.skipIf(!!skip)(`postgres backend${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 3 });
  const schemas: string[] = [];
  const backends: PostgresBackend[] = [];
  const newSchema = () => {
    const s = `duas_pt_${randomUUID().replaceAll("-", "").slice(0, 20)}`;
    schemas.push(s);
    return s;
  };
  const make = (options: ConstructorParameters<typeof PostgresBackend>[0] = {}) => {
    const b = new PostgresBackend({
      connectionString: DATABASE_URL,
      maxConnections: 3,
      ...options,
      schema: options.schema ?? newSchema(),
    });
    backends.push(b);
    return b;
  };
  afterAll(async () => {
    for (const b of backends) await b.close();
    for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await admin.end();
  });

  it("migrates once under an advisory lock when several pools start together", async () => {
    const schema = newSchema();
    const many = Array.from({ length: 5 }, () => make({ schema, maxConnections: 2 }));
    await Promise.all(many.map((b, i) => b.save(`k${i}`, makeState(msgs(i + 1)))));
    const versions = await admin.query(
      `SELECT version FROM "${schema}".dumplings_migrations WHERE component = 'sessions' ORDER BY version`,
    );
    expect(versions.rows).toEqual([{ version: 1 }, { version: 2 }]);
    expect((await many[0]!.listKeys()).sort()).toEqual(["k0", "k1", "k2", "k3", "k4"]);
    // Values are text (never jsonb, which refuses \u0000 and reorders keys).
    const types = await admin.query(
      `SELECT table_name, column_name, data_type FROM information_schema.columns
        WHERE table_schema = $1 AND column_name IN ('meta','config','state','body','body_gz','revision','seq')
        ORDER BY table_name, column_name`,
      [schema],
    );
    expect(types.rows.map((r) => `${r.table_name}.${r.column_name}:${r.data_type}`)).toEqual([
      "messages.body:text",
      "messages.body_gz:bytea",
      "messages.seq:integer",
      "revision_floor.revision:bigint",
      "sessions.config:text",
      "sessions.meta:text",
      "sessions.revision:bigint",
      "sessions.state:text",
    ]);
  });

  it("adopts a schema written by 0.1 (its own schema_migrations ledger) without re-running its DDL", async () => {
    const schema = newSchema();
    const first = make({ schema });
    await first.save("old", makeState(msgs(3)));
    // What 0.1 left: the same tables and a schema_migrations table at version 1, no dumplings_migrations
    // (nor the revision floor of migration 2).
    await admin.query(`DROP TABLE "${schema}".dumplings_migrations`);
    await admin.query(`DROP TABLE "${schema}".revision_floor`);
    await admin.query(
      `CREATE TABLE "${schema}".schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    await admin.query(`INSERT INTO "${schema}".schema_migrations (version, name) VALUES (1, 'sessions and messages')`);
    const again = make({ schema });
    expect((await again.load("old")).history).toEqual(msgs(3));
    const ledger = await admin.query(
      `SELECT component, version, name FROM "${schema}".dumplings_migrations ORDER BY version`,
    );
    expect(ledger.rows).toEqual([
      { component: "sessions", version: 1, name: "sessions and messages (adopted)" },
      { component: "sessions", version: 2, name: "revision floor" },
    ]);
    // The adopted schema gets the floor: a deleted session's writer conflicts with the next one.
    const held = (await again.read("old"))!.revision;
    expect(await again.delete("old")).toBe(true);
    expect((await again.write("old", makeState(msgs(1)), { expectedRevision: null })).revision).toBeGreaterThan(held);
  });

  it("refuses to run on a schema migrated by a newer build", async () => {
    const schema = newSchema();
    await make({ schema }).save("k", makeState([]));
    await admin.query(
      `INSERT INTO "${schema}".dumplings_migrations (component, version, name) VALUES ('sessions', 99, 'future')`,
    );
    const e = await make({ schema })
      .load("k")
      .catch((x) => x);
    expect(e).toBeInstanceOf(FormatError);
    expect(e.version).toBe("99");
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

  it("pb-07: NUL, control characters and lone surrogates round-trip exactly, stored as JSON escapes", async () => {
    const b = make();
    const history: Message[] = [
      { role: "user", content: "what's the \u0000 weather in nyc" },
      { role: "tool", tool_call_id: "call_N1", content: "binary-ish output: \u0000\u0001\u001f end" },
      { role: "user", content: "lone \ud83d and \ude00" },
    ];
    const state = makeState(history, { config: { prompt: "p\u0000q" }, fields: { "k\u0000": "\u0000" } });
    await b.save("conv-7", state);
    const loaded = await b.load("conv-7");
    expect(loaded).toEqual(state);
    expect((loaded.history[0] as { content: string }).content).toBe("what's the \u0000 weather in nyc");
    expect((loaded.history[1] as { content: string }).content).toBe("binary-ish output: \u0000\u0001\u001f end");
    const raw = await admin.query(`SELECT body FROM "${b.schema}".messages WHERE session_key = $1 ORDER BY seq`, [
      "conv-7",
    ]);
    expect(raw.rows[0].body).toContain("\\u0000");
    expect(raw.rows[2].body).toContain("\\ud83d");
  });

  it("keys are parameters, never SQL", async () => {
    const b = make();
    const key = `o'neil"; DROP TABLE messages; --`;
    await b.save(key, makeState(msgs(2)));
    expect(await b.listKeys()).toEqual([key]);
    expect((await b.load(key)).history).toEqual(msgs(2));
  });

  it("an append inserts only the new rows: stored rows keep their row version", async () => {
    const b = make();
    const h = msgs(30);
    const r1 = await b.write("app", makeState(h.slice(0, 20)), { expectedRevision: null });
    const before = await admin.query(`SELECT seq, xmin::text AS x FROM "${b.schema}".messages ORDER BY seq`);
    const r2 = await b.write("app", makeState(h), { expectedRevision: r1.revision, baseLength: 20 });
    expect(r2).toEqual({ revision: 2, written: 10, rewritten: false });
    const after = await admin.query(`SELECT seq, xmin::text AS x FROM "${b.schema}".messages ORDER BY seq`);
    expect(after.rows.slice(0, 20)).toEqual(before.rows);
    expect(after.rows).toHaveLength(30);
    // An edit at the boundary is detected and rewritten, never merged.
    const edited = [...h.slice(0, 29), { role: "user", content: "edited" } as Message, ...msgs(1, "n")];
    const r3 = await b.write("app", makeState(edited), { expectedRevision: r2.revision, baseLength: 30 });
    expect(r3.rewritten).toBe(true);
    expect((await b.load("app")).history).toEqual(edited);
  });

  it("compressHistory stores big messages in body_gz, and any reader decodes them", async () => {
    const writer = make({ compressHistory: true });
    const big = { role: "tool", tool_call_id: "c1", content: "log line\n".repeat(2000) } as Message;
    const history = [{ role: "user", content: "small" } as Message, big];
    await writer.save("z", makeState(history));
    const raw = await admin.query(
      `SELECT body IS NULL AS plain_null, length(body_gz) AS gz FROM "${writer.schema}".messages ORDER BY seq`,
    );
    expect(raw.rows[0]).toEqual({ plain_null: false, gz: null });
    expect(raw.rows[1].plain_null).toBe(true);
    expect(raw.rows[1].gz).toBeLessThan(JSON.stringify(big).length / 10);
    const reader = make({ schema: writer.schema });
    expect((await reader.load("z")).history).toEqual(history);
  });

  it("corrupt stored data gives FormatError naming the key", async () => {
    const b = make();
    const q = (sql: string) => admin.query(sql.replaceAll("{s}", `"${b.schema}"`));
    await b.save("bad", makeState(msgs(3)));
    await q(`UPDATE {s}.messages SET body = '{torn' WHERE seq = 1`);
    const e1 = await b.load("bad").catch((x) => x);
    expect(e1).toBeInstanceOf(FormatError);
    expect(e1.message).toContain('"bad"');
    await b.save("bad", makeState(msgs(3)));
    await q(`DELETE FROM {s}.messages WHERE seq = 2`);
    await expect(b.load("bad")).rejects.toBeInstanceOf(FormatError);
    await b.save("bad", makeState(msgs(3)));
    await q(`UPDATE {s}.sessions SET meta = '{}'`);
    await expect(b.load("bad")).rejects.toBeInstanceOf(FormatError);
  });

  it("reads messages in whatever order the rows come (no server sort) and puts each at its seq", async () => {
    const b = make();
    const q = (sql: string) => admin.query(sql.replaceAll("{s}", `"${b.schema}"`));
    const h = msgs(6);
    await b.save("order", makeState(h));
    // Rewritten rows move to the end of the table: a sequential scan now returns seq 1, 3, 5, 0, 2, 4.
    await q(`UPDATE {s}.messages SET body = body WHERE seq % 2 = 0`);
    const physical = await q(`SELECT seq FROM {s}.messages WHERE session_key = 'order' ORDER BY ctid`);
    expect(physical.rows.map((r) => r.seq)).toEqual([1, 3, 5, 0, 2, 4]);
    expect((await b.load("order")).history).toEqual(h);
    // Right count, wrong places: a seq outside 0..count-1, then one stored where another is missing.
    await q(`UPDATE {s}.messages SET seq = 9 WHERE session_key = 'order' AND seq = 5`);
    const e1 = await b.load("order").catch((x) => x);
    expect(e1).toBeInstanceOf(FormatError);
    expect(e1.message).toContain("message seq 9 is outside 0..5");
  });

  it("gc deletes sessions last saved before the cut-off, with their messages", async () => {
    const b = make();
    await b.save("old", makeState(msgs(5)));
    await b.save("new", makeState(msgs(5)));
    await admin.query(
      `UPDATE "${b.schema}".sessions SET saved_at = now() - interval '40 days' WHERE session_key = 'old'`,
    );
    expect(await b.gc({ olderThanMs: 30 * 24 * 3600_000 })).toEqual({ deleted: 1 });
    expect(await b.listKeys()).toEqual(["new"]);
    const rows = await admin.query(`SELECT count(*)::int AS n FROM "${b.schema}".messages WHERE session_key = 'old'`);
    expect(rows.rows[0].n).toBe(0);
    await expect(b.gc({ olderThanMs: -1 })).rejects.toBeInstanceOf(TypeError);
    // The collected session's revisions are below the floor: a writer still holding one conflicts with a new session.
    const stale = (await b.read("new"))!.revision;
    await admin.query(`UPDATE "${b.schema}".sessions SET saved_at = now() - interval '40 days'`);
    expect(await b.gc({ olderThanMs: 30 * 24 * 3600_000 })).toEqual({ deleted: 1 });
    expect(await b.gc({ olderThanMs: 30 * 24 * 3600_000 })).toEqual({ deleted: 0 });
    const again = await b.write("new", makeState(msgs(1)), { expectedRevision: null });
    expect(again.revision).toBeGreaterThan(stale);
    await expect(b.write("new", makeState(msgs(6)), { expectedRevision: stale })).rejects.toBeInstanceOf(ConflictError);
  });

  it("two pools with the same stale revision: exactly one wins", async () => {
    const one = make();
    const two = make({ schema: one.schema });
    const h = msgs(4);
    const r1 = await one.write("race", makeState(h));
    for (let round = 0; round < 5; round++) {
      const base = (await one.read("race"))!;
      const results = await Promise.allSettled(
        [one, two].map((b, i) =>
          b.write("race", makeState([...base.state.history, { role: "user", content: `w${i}` } as Message]), {
            expectedRevision: base.revision,
            baseLength: base.state.history.length,
          }),
        ),
      );
      expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
      const lost = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
      expect(lost.reason).toBeInstanceOf(ConflictError);
      const now = (await two.read("race"))!;
      expect(now.revision).toBe(base.revision + 1);
      expect(now.state.history).toHaveLength(base.state.history.length + 1);
    }
    expect((await one.read("race"))!.revision).toBe(r1.revision + 5);
  });

  it("concurrent whole-state saves of one new key from several pools all succeed, and one whole state wins", async () => {
    const schema = newSchema();
    const writers = Array.from({ length: 4 }, () => make({ schema, maxConnections: 2 }));
    const states = writers.map((_, i) => makeState(msgs(20 + i, `w${i}`), { name: `w${i}` }));
    await Promise.all(writers.map((b, i) => b.save("shared", states[i]!)));
    const read = (await writers[0]!.read("shared"))!;
    expect(read.revision).toBe(4);
    expect(states).toContainEqual(read.state);
  });

  it("iterHistory streams one snapshot, and releases its connection on break", async () => {
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    const injected: PgLikePool = pool; // a pg.Pool fits the documented shape as is
    const schema = newSchema();
    const b = new PostgresBackend({ pool: injected, schema });
    const h = msgs(2500);
    await b.save("it", makeState(h));
    const seen: Message[] = [];
    let rewrote = false;
    for await (const m of b.iterHistory("it")) {
      seen.push(m);
      if (!rewrote) {
        rewrote = true;
        await b.save("it", makeState(msgs(10, "rewritten")));
      }
    }
    expect(seen).toEqual(h);
    for await (const _ of b.iterHistory("it")) break;
    expect(pool.totalCount - pool.idleCount).toBe(0);
    await b.close();
    // close() leaves an injected pool open.
    expect((await pool.query("SELECT 1 AS one")).rows[0].one).toBe(1);
    await pool.end();
  });
});
