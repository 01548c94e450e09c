/** Model-based property test of the PostgreSQL backend's append/rewrite logic (plain and compressed). */
import { randomUUID } from "node:crypto";
import fc from "fast-check";
import pg from "pg";
import { afterAll, describe, it } from "vitest";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { check, op } from "../helpers/backend-model.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const skip = await postgresSkipReason();

describe.skipIf(!!skip)(`postgres: append/rewrite logic against a model${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const schema = `duas_model_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
  const plain = new PostgresBackend({ connectionString: DATABASE_URL, schema, maxConnections: 2 });
  const zipped = new PostgresBackend({
    connectionString: DATABASE_URL,
    schema,
    maxConnections: 2,
    compressHistory: true,
    compressMinBytes: 64,
  });
  afterAll(async () => {
    await plain.close();
    await zipped.close();
    const admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });
  let run = 0;
  for (const [name, backend] of [
    ["plain", plain],
    ["compressed", zipped],
  ] as const) {
    it(`${name}: every step stores exactly the model's state`, async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 25 }), async (ops) => {
          await check(backend, `model-${run++}`, ops);
        }),
        { numRuns: 40 },
      );
    });
  }
});
