/**
 * A new session's first revision is read from the revision floor under a
 * share lock, so a delete of the same key committing at that instant is seen:
 * the new session starts above every revision the deleted one had. Read
 * without the lock, the insert used the floor of its statement's start and
 * could restart at a revision a stale writer of the deleted session still
 * held (ABA: its compare-and-set would then match the new session). Made
 * deterministic with a second connection holding the delete uncommitted.
 */
import { randomUUID } from "node:crypto";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { makeState } from "../../src/testing/states.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const skip = await postgresSkipReason();
const schema = `floor_race_${randomUUID().slice(0, 8)}`;
const cleanup: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanup.reverse()) await c();
});

describe.skipIf(skip)("PostgreSQL: a new session racing the delete of its key", () => {
  it("starts above every revision of the deleted session", async () => {
    const backend = new PostgresBackend({ url: DATABASE_URL, schema });
    const admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
    cleanup.push(async () => {
      await backend.close();
      await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await admin.end();
    });
    const state = makeState([{ role: "user", content: "hi" }]);
    let revision = (await backend.write("k", state, { expectedRevision: null })).revision;
    for (let i = 0; i < 4; i++) revision = (await backend.write("k", state, { expectedRevision: revision })).revision;
    expect(revision).toBe(5);
    // Another process deletes the session, as deleteState does (the row and the floor in one statement),
    // and has not committed yet when this one creates the key anew.
    await admin.query("BEGIN");
    await admin.query(
      `WITH d AS (DELETE FROM ${schema}.sessions WHERE session_key = 'k' RETURNING revision)
       UPDATE ${schema}.revision_floor SET revision = GREATEST(revision, (SELECT max(revision) FROM d))`,
    );
    const created = backend.write("k", makeState([{ role: "user", content: "new" }]), { expectedRevision: null });
    await new Promise((r) => setTimeout(r, 300)); // the insert is waiting on the deleting transaction
    await admin.query("COMMIT");
    const fresh = await created;
    expect(fresh.revision, "the new session starts above the deleted one's revisions").toBeGreaterThan(5);
    // so a stale writer still holding revision 5 of the deleted session cannot overwrite it
    await expect(backend.write("k", state, { expectedRevision: 5 })).rejects.toMatchObject({ code: "CONFLICT" });
  });
});
