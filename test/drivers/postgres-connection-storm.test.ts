/**
 * Issue 9, the narrow case: connections terminated every 50 ms while four
 * loops call one PostgreSQL component, in a child process
 * (test/fixtures/drivers/storm-child.ts). A termination that arrives as the
 * pool hands a brand-new connection out found no `'error'` listener on it when
 * the driver attached its own after `await pool.connect()`, and the process
 * died. Expected: exit 0, every failed call a DumplingsError, the next call
 * after the storm succeeds.
 */
import { describe, it } from "vitest";
import { postgresSkipReason } from "../helpers/services.js";
import { explain, fixture, startChild, uniqueName } from "./postgres-helpers.js";

const skip = await postgresSkipReason();

describe.skipIf(!!skip)(`PostgreSQL connection storm${skip ? ` (skipped: ${skip})` : ""}`, () => {
  for (const component of ["sessions", "checkpoints", "journal"] as const) {
    it(`${component}: terminations every 50 ms never crash the process; failures are typed`, async ({ expect }) => {
      const schema = uniqueName(`drv_storm_${component}`);
      const child = startChild(fixture("storm-child.ts"), [component, schema, `dumplings-test-${schema}`], {
        killAfterMs: 90_000,
      });
      const r = await child.done;
      expect(r.code, `the child process crashed or hung:\n${explain(r)}`).toBe(0);
      const result = r.result as { ok: number; typed: number; untyped: unknown[]; terminated: number; next: unknown };
      expect(result.terminated, "no connection was terminated").toBeGreaterThan(0);
      expect(result.untyped, "calls failed with untyped errors").toEqual([]);
      expect(result.next).toMatchObject({ ok: true });
    }, 120_000);
  }
});
