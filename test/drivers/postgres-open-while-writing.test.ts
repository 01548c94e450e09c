/**
 * Issue 9: opening a `CheckpointStore` over `PostgresColdStore` while other
 * processes write checkpoints must not deadlock (nor wait on the writers).
 * Before the fix, `open()` re-ran the whole DDL script; `CREATE INDEX IF NOT
 * EXISTS` takes a ShareLock on live tables even when the index exists, and
 * `deadlock detected` followed in a few of 8 rolling opens, or in a writer.
 *
 * 3 writer processes write continuously as runners do (two lanes each: a
 * checkpoint per step with compare-and-set on the previous step, a recorded
 * node failure every 5 steps, finished workflows deleted) while 8 processes
 * open a store one after another on the same schema, each doing one read or
 * one write and closing (test/fixtures/drivers/open-child.ts). Every process
 * must exit 0 and none may report `deadlock detected`. (Before the fix the
 * re-run DDL's ShareLocks, taken table after table, met the reverse lock
 * order of `recordError` and `delete`: deadlocks in opens and in writers.)
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresColdStore } from "../../src/durable/checkpoints/postgres.js";
import { CheckpointStore } from "../../src/workflow/store.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { adminPool, type ChildResult, explain, fixture, startChild, uniqueName } from "./postgres-helpers.js";

const skip = await postgresSkipReason();
const WRITERS = 3;
const OPENERS = 8;

describe.skipIf(!!skip)(
  `PostgreSQL: CheckpointStore.open while others write${skip ? ` (skipped: ${skip})` : ""}`,
  () => {
    const schema = uniqueName("drv_open");

    beforeAll(async () => {
      // The tables exist before the run: this test is about opening an initialised schema.
      const store = await CheckpointStore.open({ cold: new PostgresColdStore({ url: DATABASE_URL, schema }) });
      await store.close();
    });

    afterAll(async () => {
      const admin = adminPool();
      try {
        await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await admin.end();
      }
    });

    it(`${OPENERS} rolling opens while ${WRITERS} processes checkpoint: no deadlock, every process exits 0`, async () => {
      const spawnRole = (role: string, k: number) =>
        startChild(fixture("open-child.ts"), [role, String(k), schema], {
          env: { DATABASE_URL },
          killAfterMs: 150_000,
        });
      // All are started (and load the library) together, so the opens later follow each other with no start-up
      // gap; loading is slow on a busy machine (tsx), so only the run after "go" is bounded tightly (in the children).
      const writers = Array.from({ length: WRITERS }, (_, k) => spawnRole("writer", k));
      const openers = Array.from({ length: OPENERS }, (_, k) => spawnRole("opener", k));
      const all = [...writers, ...openers];
      try {
        await Promise.all(all.map((c) => c.waitForLine("ready", 90_000)));
        for (const w of writers) w.send("go");
        await Promise.all(writers.map((w) => w.waitForLine("warm", 30_000)));

        const opened: ChildResult[] = [];
        for (const opener of openers) {
          opener.send("go");
          opened.push(await opener.done);
        }
        for (const w of writers) w.send("stop");
        const written = await Promise.all(writers.map((w) => w.done));

        const results = [
          ...written.map((r, k) => ({ who: `writer ${k}`, r })),
          ...opened.map((r, k) => ({ who: `opener ${k}`, r })),
        ];
        const deadlocks = results
          .filter(({ r }) => /deadlock detected/.test(r.stdout + r.stderr))
          .map(({ who }) => who);
        const failed = results
          .filter(({ r }) => r.code !== 0)
          .map(({ who, r }) => `${who}: ${r.result ? JSON.stringify(r.result) : explain(r)}`);
        expect(deadlocks, `deadlock detected in: ${deadlocks.join(", ")}\n${failed.join("\n")}`).toEqual([]);
        expect(failed, failed.join("\n\n")).toEqual([]);
        for (const r of written) expect((r.result as { saves: number }).saves).toBeGreaterThan(0);
      } finally {
        for (const c of all) c.process.kill("SIGKILL");
      }
    }, 180_000);
  },
);
