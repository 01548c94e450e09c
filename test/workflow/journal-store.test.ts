/**
 * The cold store conformance suite on the workflow store over a durable-run journal
 * (`JournalColdStore`): SQLite (a fresh file per test), PostgreSQL (a schema per test) and
 * Redis (a key prefix per test). The hooks reach the journal's step table below the contract.
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import * as vitest from "vitest";
import { JournalColdStore } from "../../src/durable/checkpoints/journal-store.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { RedisJournal } from "../../src/durable/journal-redis.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { runColdStoreConformance } from "./cold-store-suite.js";
import { tempDir } from "./helpers.js";

runColdStoreConformance(
  "journal: sqlite",
  () => {
    const tmp = tempDir("journal-conformance");
    const file = path.join(tmp.dir, "journal.db");
    const cold = new JournalColdStore({ journal: new SqliteJournal({ path: file }), location: file });
    let connection: Database.Database | undefined;
    const db = () => {
      connection ??= new Database(file);
      connection.pragma("busy_timeout = 5000");
      return connection;
    };
    return {
      cold,
      async destroy() {
        connection?.close();
        await cold.close();
        tmp.cleanup();
      },
      async ageSnapshots(workflowId, createdAt) {
        db()
          .prepare(
            "UPDATE durable_steps SET started_at = ?, finished_at = ? WHERE run_id = ? AND (name GLOB 'checkpoint:*' OR name GLOB 'effect:*')",
          )
          .run(createdAt, createdAt, workflowId);
      },
      async countIdempotencyRecords(workflowId) {
        const row = db()
          .prepare("SELECT COUNT(*) AS n FROM durable_steps WHERE run_id = ? AND name LIKE 'effect:%'")
          .get(workflowId);
        return (row as { n: number }).n;
      },
    };
  },
  { test: vitest },
);

runColdStoreConformance(
  "journal: postgres",
  () => {
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
    const schema = `wf_jconf_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
    const cold = new JournalColdStore({ journal: new PostgresJournal({ pool, schema }) });
    return {
      cold,
      async destroy() {
        try {
          await cold.close();
          await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        } finally {
          await pool.end();
        }
      },
      async ageSnapshots(workflowId, createdAt) {
        await pool.query(
          `UPDATE "${schema}".durable_steps SET started_at = $1, finished_at = $1
           WHERE run_id = $2 AND (name LIKE 'checkpoint:%' OR name LIKE 'effect:%')`,
          [createdAt, workflowId],
        );
      },
      async countIdempotencyRecords(workflowId) {
        const r = await pool.query(
          `SELECT COUNT(*)::int AS n FROM "${schema}".durable_steps WHERE run_id = $1 AND name LIKE 'effect:%'`,
          [workflowId],
        );
        return r.rows[0].n as number;
      },
    };
  },
  { test: vitest, skip: await postgresSkipReason() },
);

runColdStoreConformance(
  "journal: redis",
  () => {
    const journal = new RedisJournal({ url: REDIS_URL, prefix: `test:wfj:${randomUUID()}:` });
    const cold = new JournalColdStore({ journal });
    return {
      cold,
      async destroy() {
        await journal.clear();
        await cold.close();
      },
    };
  },
  { test: vitest, skip: await redisSkipReason() },
);
