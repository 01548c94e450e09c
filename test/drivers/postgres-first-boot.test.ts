/**
 * Issue 9, case pb-29 (../shared/cases/pb-29.json): replicas booting together
 * on an empty database. Six real processes (test/fixtures/drivers/boot-child.ts)
 * start at the same instant, each opening the session store, the durable
 * journal and the workflow cold store with DEFAULT options (DATABASE_URL points
 * to a database created for the test, no schema option: the session store and
 * the journal share their default schema) and writing once. All six must
 * succeed (no unique violation, no "already exists"); a seventh boot then
 * reads every write back; the migration ledger holds each version once.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import {
  adminPool,
  type ChildResult,
  databaseUrl,
  explain,
  fixture,
  startChild,
  uniqueName,
} from "./postgres-helpers.js";

const skip = await postgresSkipReason();
const PROCESSES = 6;

describe.skipIf(!!skip)(
  `PostgreSQL: ${PROCESSES} processes booting at once on an empty database (pb-29)${skip ? ` (skipped: ${skip})` : ""}`,
  () => {
    const database = uniqueName("boot");
    const url = databaseUrl(database);
    let boots: ChildResult[] = [];

    beforeAll(async () => {
      const admin = adminPool(DATABASE_URL);
      try {
        await admin.query(`CREATE DATABASE "${database}"`);
      } finally {
        await admin.end();
      }
      const children = Array.from({ length: PROCESSES }, (_, i) =>
        startChild(fixture("boot-child.ts"), ["boot", String(i)], { env: { DATABASE_URL: url }, killAfterMs: 150_000 }),
      );
      // Every child has loaded the library before any of them starts: they all start at the same instant.
      const ready = await Promise.allSettled(children.map((c) => c.waitForLine("ready", 90_000)));
      for (const c of children) c.send("go");
      boots = await Promise.all(children.map((c) => c.done));
      const failed = ready.find((r) => r.status === "rejected");
      if (failed) throw (failed as PromiseRejectedResult).reason;
    }, 150_000);

    afterAll(async () => {
      const admin = adminPool(DATABASE_URL);
      try {
        await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
      } finally {
        await admin.end();
      }
    });

    it("every one of the concurrent first boots succeeds (no unique violation, no 'already exists')", () => {
      expect(boots).toHaveLength(PROCESSES);
      const failures = boots
        .map((r, i) => ({ i, r }))
        .filter(({ r }) => r.code !== 0)
        .map(({ i, r }) => `process ${i}: ${r.result ? JSON.stringify(r.result) : explain(r)}`);
      expect(failures, failures.join("\n\n")).toEqual([]);
      for (const r of boots) expect(r.stdout + r.stderr).not.toMatch(/already exists|duplicate key|unique constraint/);
    });

    it("a 7th boot afterwards succeeds and reads back the 6 sessions, runs and checkpoints", async () => {
      const seventh = startChild(fixture("boot-child.ts"), ["verify", String(PROCESSES)], {
        env: { DATABASE_URL: url },
        killAfterMs: 60_000,
      });
      const r = await seventh.done;
      expect(r.code, r.result ? JSON.stringify(r.result, null, 1) : explain(r)).toBe(0);
    }, 70_000);

    it("the migration ledger dumplings.dumplings_migrations holds each (component, version) exactly once", async () => {
      const client = new pg.Client({ connectionString: url });
      client.on("error", () => {});
      await client.connect();
      try {
        const exists = await client.query("SELECT to_regclass('dumplings.dumplings_migrations') IS NOT NULL AS yes");
        if (!exists.rows[0].yes) {
          throw new Error(
            "pending on the fix of issue 9: there is no migration ledger dumplings.dumplings_migrations(component, version, name, applied_at) in the booted database",
          );
        }
        const rows = await client.query(
          `SELECT component, version, count(*)::int AS n FROM dumplings.dumplings_migrations
            GROUP BY component, version ORDER BY component, version`,
        );
        expect(rows.rows.length, "the ledger is empty").toBeGreaterThan(0);
        expect(rows.rows.filter((row) => row.n !== 1)).toEqual([]);
        // Versions of each component are 1..n, no gap.
        const byComponent = new Map<string, number[]>();
        for (const row of rows.rows) {
          byComponent.set(row.component, [...(byComponent.get(row.component) ?? []), Number(row.version)]);
        }
        for (const [component, versions] of byComponent) {
          expect(versions, component).toEqual(versions.map((_, k) => k + 1));
        }
      } finally {
        await client.end();
      }
    });
  },
);
