/**
 * The PostgreSQL driver's own promises, through the components users create:
 * `close()` never waits on a connection an abandoned `iterHistory` holds;
 * an injected pool gets its listeners back at `close()`; long schema names
 * keep their prepared statements apart; a URL's password never appears in an
 * error, its message or its cause.
 */
import { inspect } from "node:util";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { BackendError, InvalidOptionError } from "../../src/core/errors.js";
import { PostgresColdStore } from "../../src/durable/checkpoints/postgres.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { makeState } from "../../src/testing/states.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { uniqueName } from "./postgres-helpers.js";

const skip = await postgresSkipReason();
const msgs = (n: number) => Array.from({ length: n }, (_, i) => ({ role: "user" as const, content: `m${i}` }));

describe("URL passwords never leak into errors", () => {
  const secret = "hunter2SECRET";
  const bad = [`postgres://u:ab/${secret}@h/db`, `postgresql://u:${secret}@[bad-host/db`, `mysql://u:${secret}@h/db`];
  for (const url of bad) {
    it(`${url.split(":")[0]}: … is refused without the password`, () => {
      for (const make of [
        () => new PostgresBackend({ url }),
        () => new PostgresColdStore({ url }),
        () => new PostgresJournal({ url }),
      ]) {
        let error: unknown;
        try {
          make();
        } catch (e) {
          error = e;
        }
        expect(error).toBeInstanceOf(InvalidOptionError);
        expect(inspect(error, { depth: 10 })).not.toContain(secret);
        expect(String((error as Error).message)).not.toContain(secret);
      }
    });
  }
});

describe.skipIf(!!skip)(`PostgreSQL driver lifecycle${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  const schemas: string[] = [];
  afterAll(async () => {
    for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await admin.end();
  });

  it("close() resolves at once while an abandoned iterHistory holds a connection; the iterator then fails typed", async () => {
    const schema = uniqueName("drv_iterclose");
    schemas.push(schema);
    const b = new PostgresBackend({ url: DATABASE_URL, schema });
    await b.write("big", makeState(msgs(3000)));
    const it = b.iterHistory("big")[Symbol.asyncIterator]();
    expect((await it.next()).value).toEqual({ role: "user", content: "m0" });
    const started = Date.now();
    await b.close();
    expect(Date.now() - started).toBeLessThan(2000);
    // Its page is in memory: reading on is fine until the next page, which needs the closed store.
    let error: unknown;
    try {
      for (let r = await it.next(); !r.done; r = await it.next()) {
        // drain
      }
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(BackendError);
    expect((error as Error).message).toContain("closed");
    // The REPEATABLE READ snapshot is gone: nothing blocks dropping the schema.
    await admin.query("SET lock_timeout = '2s'");
    await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
  });

  it("an injected pool gets its listeners back at close(), and stays open", async () => {
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    const counts = () => ["error", "connect", "acquire"].map((e) => pool.listenerCount(e));
    const before = counts();
    const schema = uniqueName("drv_injected");
    schemas.push(schema);
    const stores = Array.from({ length: 12 }, () => new PostgresBackend({ pool, schema }));
    await stores[0]!.write("k", makeState(msgs(1)));
    for (const s of stores) await s.close();
    expect(counts()).toEqual(before);
    expect((await pool.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
    await pool.end();
  });

  it("two long schema names on one pool keep their prepared appends apart", async () => {
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
    const stem = uniqueName("drv_long").padEnd(56, "x");
    const a = `${stem}_a`;
    const b = `${stem}_b`;
    schemas.push(a, b);
    const sa = new PostgresBackend({ pool, schema: a });
    const sb = new PostgresBackend({ pool, schema: b });
    for (const [store, key] of [
      [sa, "ka"],
      [sb, "kb"],
    ] as const) {
      const r1 = await store.write(key, makeState(msgs(1)), { expectedRevision: null });
      const r2 = await store.write(key, makeState(msgs(2)), { expectedRevision: r1.revision, baseLength: 1 });
      expect(r2).toMatchObject({ written: 1, rewritten: false });
    }
    expect((await sb.load("kb")).history).toEqual(msgs(2));
    await sa.close();
    await sb.close();
    await pool.end();
  });
});
