/** saveState/loadState through PostgresBackend (see test/fixtures/servers/persistence-scenarios.ts). */
import { randomUUID } from "node:crypto";
import pg from "pg";
import { afterAll, describe } from "vitest";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { persistenceScenarios } from "../fixtures/servers/persistence-scenarios.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const skip = await postgresSkipReason();

describe.skipIf(!!skip)(`postgres through the persistence API${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const schemas: string[] = [];
  afterAll(async () => {
    const admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
    for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await admin.end();
  });
  persistenceScenarios(() => {
    const schema = `duas_persist_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
    schemas.push(schema);
    return new PostgresBackend({ connectionString: DATABASE_URL, schema, maxConnections: 2 });
  });
});
