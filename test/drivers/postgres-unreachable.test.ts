/**
 * Issue 9: a PostgreSQL server that is unreachable when a component is first
 * used gives a typed error quickly, and the SAME instance works once the
 * server is reachable, without a restart (a failed setup is not cached).
 *
 * The server is reached through a TCP proxy on 127.0.0.1 (test/drivers/postgres-helpers.ts):
 * stopped, nothing listens on its port (connection refused); started, it
 * forwards to the real server.
 */
import { randomUUID } from "node:crypto";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { DumplingsError } from "../../src/core/errors.js";
import { PostgresColdStore } from "../../src/durable/checkpoints/postgres.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { makeState } from "../../src/testing/states.js";
import { createWorkflowState } from "../../src/workflow/state.js";
import { CheckpointStore } from "../../src/workflow/store.js";
import { postgresSkipReason } from "../helpers/services.js";
import { adminPool, TcpProxy, uniqueName } from "./postgres-helpers.js";

const skip = await postgresSkipReason();

/** How long the first call may take to fail with the server unreachable. */
const FAIL_WITHIN_MS = 5000;

/**
 * Awaits `call`, expecting a typed BACKEND_ERROR within {@link FAIL_WITHIN_MS}.
 * Soft assertions: the test goes on to check the recovery, so that both
 * faults are reported when both are there.
 */
async function expectTypedFailure(what: string, call: () => Promise<unknown>): Promise<void> {
  const started = Date.now();
  let error: unknown;
  try {
    await call();
  } catch (e) {
    error = e;
  }
  const elapsed = Date.now() - started;
  expect(error, `${what} succeeded with the server unreachable`).toBeDefined();
  if (error === undefined) return;
  const described = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  expect.soft(error, `${what} rejected with an untyped error (${described})`).toBeInstanceOf(DumplingsError);
  expect.soft((error as { code?: unknown }).code, described).toBe("BACKEND_ERROR");
  expect.soft(elapsed, `${what} took ${elapsed} ms to fail`).toBeLessThan(FAIL_WITHIN_MS);
}

describe.skipIf(!!skip)(`PostgreSQL unreachable at first use${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const cleanups: Array<() => Promise<void>> = [];

  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  });

  /** A stopped proxy and a unique schema, both removed after the test. */
  async function setup(label: string): Promise<{ proxy: TcpProxy; schema: string }> {
    const proxy = await TcpProxy.create();
    const schema = uniqueName(`drv_down_${label}`);
    cleanups.push(async () => {
      await proxy.stop();
      const admin = adminPool();
      try {
        await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await admin.end();
      }
    });
    return { proxy, schema };
  }

  it("sessions (PostgresBackend): typed error first, then the same instance succeeds", async () => {
    const { proxy, schema } = await setup("sessions");
    const backend = new PostgresBackend({ connectionString: proxy.url(), schema, connectTimeoutMs: 2000 });
    cleanups.push(() => backend.close());
    const key = `down-${randomUUID()}`;
    const state = makeState([{ role: "user", content: "hello after the outage" }], { name: key });

    await expectTypedFailure("the first save", () => backend.save(key, state));
    await proxy.start();
    await backend.save(key, state);
    expect((await backend.load(key)).history).toEqual(state.history);
  });

  it("workflow checkpoints (CheckpointStore over PostgresColdStore): typed error first, then the same cold store succeeds", async () => {
    const { proxy, schema } = await setup("checkpoints");
    const cold = new PostgresColdStore({ url: proxy.url(), schema, connectTimeoutMs: 2000 });
    const blobDir = path.join(os.tmpdir(), `dumplings-drivers-${process.pid}`, "blobs");
    const workflowId = `down-${randomUUID()}`;
    let store: CheckpointStore | undefined;
    cleanups.push(async () => {
      if (store) await store.close();
      else await cold.close();
    });

    // The store may set up its tables at open() or at its first call: whichever meets the outage must fail typed.
    await expectTypedFailure("opening the store and saving step 0", async () => {
      store = await CheckpointStore.open({ cold, blobDir });
      await store.save(createWorkflowState({ workflowId }), { expectedStep: null });
    });
    await proxy.start();
    store ??= await CheckpointStore.open({ cold, blobDir });
    await store.save(createWorkflowState({ workflowId }), { expectedStep: null });
    expect((await store.loadLatest(workflowId))?.stepIndex).toBe(0);
  });

  it("durable journal (PostgresJournal): typed error first, then the same instance succeeds", async () => {
    const { proxy, schema } = await setup("journal");
    const journal = new PostgresJournal({ url: proxy.url(), schema });
    cleanups.push(() => journal.close());
    const runId = `down-${randomUUID()}`;

    await expectTypedFailure("the first createRun", () => journal.createRun({ runId, workflow: "down", input: null }));
    await proxy.start();
    const created = await journal.createRun({ runId, workflow: "down", input: null }).catch((e: unknown) => {
      throw new Error(`the call after the server came back failed (a failed setup cached?): ${String(e)}`, {
        cause: e,
      });
    });
    expect(created.created).toBe(true);
    const lease = await journal.acquireLease(runId, "test", 60_000);
    if (!lease.acquired) throw new Error("lease not acquired");
    const now = Date.now();
    await journal.writeStep(lease.fencingToken, {
      runId,
      seq: 0,
      name: "noop",
      inputHash: "0".repeat(64),
      status: "completed",
      output: { ok: true },
      attempt: 1,
      startedAt: now,
      finishedAt: now,
      fencingToken: lease.fencingToken,
    });
    expect((await journal.readSteps(runId)).map((s) => s.output)).toEqual([{ ok: true }]);
  });
});
