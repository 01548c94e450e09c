/**
 * Issue 9: a PostgreSQL restart, a failover or `pg_terminate_backend` of the
 * application's connections must never crash the process. For each PostgreSQL
 * component — sessions (`PostgresBackend`), workflow checkpoints
 * (`CheckpointStore` over `PostgresColdStore`) and the durable journal
 * (`PostgresJournal`) — a real child process (test/fixtures/drivers/loss-child.ts)
 * gives the component a URL with its own `application_name`, and has that
 * application's backends terminated:
 * - while idle: after a successful call, with the pool's connections idle;
 * - while a call is in flight: the call is blocked on ACCESS EXCLUSIVE locks
 *   the test holds on the schema's tables (a `write` with `force: true`, a
 *   checkpoint save, a `writeStep`), or is an `iterHistory` over a
 *   5,000-message session paused after its first message.
 *
 * Expected: the child exits 0 with its RESULT line (an unhandled pg `'error'`
 * event kills it otherwise); at least one connection was terminated; the
 * in-flight call either succeeded or rejected with a `DumplingsError` of code
 * `BACKEND_ERROR` (never a raw pg error); the next call succeeds.
 */
import { afterAll, describe, it } from "vitest";
import { postgresSkipReason } from "../helpers/services.js";
import { adminPool, explain, fixture, startChild, uniqueName } from "./postgres-helpers.js";

const skip = await postgresSkipReason();

const SCENARIOS = [
  { component: "sessions", mode: "idle", what: "PostgresBackend: idle pool connections are terminated" },
  {
    component: "sessions",
    mode: "inflight",
    what: "PostgresBackend: a write with force: true (a transaction) is in flight",
  },
  {
    component: "sessions",
    mode: "iter",
    what: "PostgresBackend: an iterHistory over 5,000 messages is paused mid-iteration",
  },
  {
    component: "checkpoints",
    mode: "idle",
    what: "CheckpointStore over PostgresColdStore: idle pool connections are terminated",
  },
  { component: "checkpoints", mode: "inflight", what: "CheckpointStore over PostgresColdStore: a save is in flight" },
  { component: "journal", mode: "idle", what: "PostgresJournal: idle pool connections are terminated" },
  { component: "journal", mode: "inflight", what: "PostgresJournal: a writeStep is in flight" },
] as const;

interface ErrorInfo {
  dumplings: boolean;
  name: string;
  code?: string;
  message: string;
}
type Outcome = { ok: true; value?: unknown } | { ok: false; error: ErrorInfo };

describe.skipIf(!!skip)(`PostgreSQL connection loss (pg_terminate_backend)${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const schemas: string[] = [];

  afterAll(async () => {
    const admin = adminPool();
    try {
      for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    } finally {
      await admin.end();
    }
  });

  for (const { component, mode, what } of SCENARIOS) {
    it.concurrent(`${what}: the process does not crash, the call fails typed or succeeds, the next call succeeds`, async ({
      expect,
    }) => {
      const schema = uniqueName(`drv_loss_${component}_${mode}`);
      schemas.push(schema);
      const app = `dumplings-test-${schema}`;
      const child = startChild(fixture("loss-child.ts"), [component, mode, schema, app], { killAfterMs: 120_000 });
      const r = await child.done;
      expect(r.code, `the child process crashed or hung:\n${explain(r)}`).toBe(0);
      expect(r.result, `no RESULT line:\n${explain(r)}`).toBeDefined();
      const result = r.result as { terminated: number; inflight?: Outcome; next: Outcome };
      expect(result.terminated, "no connection of the component was terminated").toBeGreaterThan(0);
      if (mode !== "idle") {
        const inflight = result.inflight!;
        if (!inflight.ok) {
          expect(
            inflight.error,
            `the in-flight call rejected with an untyped error: ${JSON.stringify(inflight.error)}`,
          ).toMatchObject({ dumplings: true, code: "BACKEND_ERROR" });
        }
      }
      expect(result.next, `the call after the termination failed: ${JSON.stringify(result.next)}`).toMatchObject({
        ok: true,
      });
    }, 150_000);
  }
});
