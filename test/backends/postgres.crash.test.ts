/**
 * kill -9 in the middle of saves to PostgreSQL: a real child process saves
 * three sessions in a loop (one-statement appends, and a full-rewrite
 * transaction every 10th save) and is SIGKILLed; afterwards each session is
 * exactly its last acknowledged save or the one in flight, never a mix.
 */
import { randomUUID } from "node:crypto";
import pg from "pg";
import { afterAll, describe, it } from "vitest";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { expectWholeAfterKill, runAndKill } from "../fixtures/servers/kill-harness.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const skip = await postgresSkipReason();

describe.skipIf(!!skip)(`postgres: kill -9 mid-save${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const schema = `duas_crash_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
  afterAll(async () => {
    const admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  for (const round of [1, 2]) {
    it(`each session loads as a complete save after SIGKILL (round ${round})`, async () => {
      const keys = [`a${round}`, `b${round}`, `c${round}`];
      const acks = await runAndKill("postgres", DATABASE_URL, schema, keys, 12 + round * 5);
      const backend = new PostgresBackend({ connectionString: DATABASE_URL, schema });
      try {
        await expectWholeAfterKill(backend, keys, acks);
      } finally {
        await backend.close();
      }
    });
  }
});
