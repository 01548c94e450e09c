/**
 * The shared backend conformance suite against a real PostgreSQL
 * (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test), once plain
 * and once with compressed history. Every test gets its own schema, dropped
 * after it.
 */
import { randomUUID } from "node:crypto";
import pg from "pg";
import * as vitest from "vitest";
import { PostgresBackend } from "../../src/backends/postgres.js";
import type { StateBackend } from "../../src/backends/types.js";
import { runBackendConformance } from "../../src/testing/index.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const skip = await postgresSkipReason();
const admin = skip ? undefined : new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
vitest.afterAll(async () => {
  await admin?.end();
});

const schemaName = () => `duas_test_${randomUUID().replaceAll("-", "").slice(0, 20)}`;

async function destroy(backend: StateBackend): Promise<void> {
  await backend.close?.();
  await admin!.query(`DROP SCHEMA IF EXISTS "${(backend as PostgresBackend).schema}" CASCADE`);
}

runBackendConformance(
  "postgres",
  () => new PostgresBackend({ connectionString: DATABASE_URL, schema: schemaName(), maxConnections: 4 }),
  { test: vitest, skip, destroy },
);

runBackendConformance(
  "postgres (compressHistory)",
  () =>
    new PostgresBackend({
      connectionString: DATABASE_URL,
      schema: schemaName(),
      maxConnections: 4,
      compressHistory: true,
      compressMinBytes: 16,
    }),
  { test: vitest, skip, destroy, largeHistory: 20_000, samples: "bundled" },
);
