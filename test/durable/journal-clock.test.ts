/**
 * Case pb-32 with real processes, on the SQLite, PostgreSQL and Redis
 * journals: a lease is judged by the store's clock, never by the clock of the
 * worker asking for it.
 *
 * Worker A (correct clock) runs a 6 s step under a 3 s lease it renews every
 * second. One second into the step, worker B — a process whose `Date.now()`
 * runs two minutes ahead (preload `clock-shift.mjs`) — tries to take the run
 * without waiting: by its own clock A's lease expired long ago, by the
 * store's it is live, so B gets `LeaseHeldError`. Worker C, as skewed, waits
 * for the lease instead: it gets the run only after A finished it and finds it
 * completed. The step body runs once (its side effects are counted in a file)
 * and A completes without being fenced off.
 *
 * SQLite runs the case too: a SQLite journal is single-machine, so a skewed
 * machine cannot share its file, but its clock is the host's as SQLite reads
 * it, and a process that fakes `Date.now()` must not take over a live lease
 * either.
 */
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import type { Journal } from "../../src/durable/journal.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { RedisJournal } from "../../src/durable/journal-redis.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { type ChildResult, fixture, startChild } from "../fixtures/durable/spawn.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";

const SKEW_MS = 120_000;
const STEP_MS = 6000;
const LEASE_TTL_MS = 3000;

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-clock-"));
const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanups) await c();
  rmSync(dir, { recursive: true, force: true });
});

/** One store under test: the child's STORE/TARGET/SCOPE and the test's own journal on the same data. */
interface Store {
  name: "sqlite" | "postgres" | "redis";
  skip: string | undefined;
  open(): { env: { STORE: string; TARGET: string; SCOPE: string }; journal: Journal; drop(): Promise<void> };
}

const stores: Store[] = [
  {
    name: "sqlite",
    skip: undefined,
    open: () => {
      const file = path.join(dir, `${randomUUID()}.db`);
      const journal = new SqliteJournal({ path: file });
      return { env: { STORE: "sqlite", TARGET: file, SCOPE: "" }, journal, drop: async () => undefined };
    },
  },
  {
    name: "postgres",
    skip: await postgresSkipReason(),
    open: () => {
      const schema = `clock_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
      const journal = new PostgresJournal({ url: DATABASE_URL, schema });
      return {
        env: { STORE: "postgres", TARGET: DATABASE_URL, SCOPE: schema },
        journal,
        drop: () => journal.dropSchema(),
      };
    },
  },
  {
    name: "redis",
    skip: await redisSkipReason(),
    open: () => {
      const prefix = `test:clock:${randomUUID()}:`;
      const journal = new RedisJournal({ url: REDIS_URL, keyPrefix: prefix });
      return { env: { STORE: "redis", TARGET: REDIS_URL, SCOPE: prefix }, journal, drop: () => journal.clear() };
    },
  },
];

/** Starts the clock child with this process's clock shifted by `shiftMs` (through the preload). */
function worker(env: Record<string, string>, shiftMs: number) {
  const preload = `--import=${pathToFileURL(fixture("clock-shift.mjs")).href}`;
  return startChild(fixture("clock-child.ts"), {
    ...env,
    CLOCK_SHIFT_MS: String(shiftMs),
    NODE_OPTIONS: [process.env.NODE_OPTIONS, preload].filter(Boolean).join(" "),
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

for (const store of stores) {
  describe.skipIf(!!store.skip)(`pb-32 on ${store.name}${store.skip ? ` (skipped: ${store.skip})` : ""}`, () => {
    it("a worker whose clock is 2 minutes ahead neither takes a live lease nor runs the step again", async () => {
      const { env, journal, drop } = store.open();
      cleanups.push(async () => {
        await drop();
        await journal.close();
      });
      const runId = `pb32-${randomUUID()}`;
      const effectsFile = path.join(dir, `${runId}.effects`);
      const effects = () =>
        existsSync(effectsFile) ? readFileSync(effectsFile, "utf8").split("\n").filter(Boolean) : [];
      const base = {
        ...env,
        RUN_ID: runId,
        EFFECTS: effectsFile,
        STEP_MS: String(STEP_MS),
        LEASE_TTL_MS: String(LEASE_TTL_MS),
      };

      const a = worker({ ...base, OWNER: "A", LEASE_WAIT_MS: "0" }, 0);
      let aExited: ChildResult | undefined;
      void a.done.then((r) => {
        aExited = r;
      });
      // wait until A's step body has started (the side effect is in the file and the journal says started)
      for (;;) {
        if (aExited) throw new Error(`worker A ended before its step started: ${aExited.stdout}${aExited.stderr}`);
        const steps = await journal.readSteps(runId).catch(() => []);
        if (steps[0]?.name === "slow" && steps[0].status === "started" && effects().length === 1) break;
        await sleep(25);
      }
      await sleep(1000);

      // B: clock 2 minutes ahead, does not wait
      const b = await worker({ ...base, OWNER: "B", LEASE_WAIT_MS: "0" }, SKEW_MS).done;
      expect(b.json, b.stderr).toMatchObject({ code: "LEASE_HELD" });
      expect(Number(b.json?.clock) - Date.now(), "B's Date.now() really ran ahead").toBeGreaterThan(SKEW_MS - 10_000);
      expect(String(b.json?.error)).toContain('held by "A"');
      const during = await journal.getRun(runId);
      expect(during).toMatchObject({ status: "running", leaseOwner: "A", fencingToken: 1 });
      expect(during?.leaseExpiresAt).toBeGreaterThan(await journal.now());
      expect(aExited, "A still runs its step").toBeUndefined();

      // C: as skewed, waits for the lease: it gets the run only once A has finished it
      const c = worker({ ...base, OWNER: "C", LEASE_WAIT_MS: "30000" }, SKEW_MS);
      const [ra, rc] = await Promise.all([a.done, c.done]);
      const completed = { runId, status: "completed", output: { slow: { done: true } } };
      expect(ra.json, ra.stderr).toMatchObject(completed);
      expect(rc.json, rc.stderr).toMatchObject(completed);
      expect(Number(rc.json?.clock) - Date.now()).toBeGreaterThan(SKEW_MS - 10_000);

      expect(effects(), "the step body ran once").toEqual(["slow"]);
      const steps = await journal.readSteps(runId);
      expect(steps.map((s) => [s.seq, s.name, s.status, s.attempt, s.fencingToken])).toEqual([
        [0, "slow", "completed", 1, 1],
      ]);
      const events = await journal.readEvents(runId);
      expect(events.filter((e) => e.type === "step_started")).toHaveLength(1);
      const leases = events.filter((e) => e.type === "lease_acquired").map((e) => [e.name, e.fencingToken]);
      expect(leases[0]).toEqual(["A", 1]);
      expect(leases.map(([owner]) => owner)).not.toContain("B");
      // every stamp is the store's: none is two minutes in the future
      const now = await journal.now();
      for (const e of events) expect(e.at, e.type).toBeLessThan(now + 1000);
      expect((await journal.getRun(runId))?.status).toBe("completed");
    }, 60_000);
  });
}
