/**
 * The cold store conformance suite on a real PostgreSQL server: a schema of its own per test,
 * dropped after it. The hooks reach the journal's tables through the test's own pool. The store
 * keeps no summary table of its own (a workflow is a journal run): the 100,000-workflow test inserts
 * runs straight into the journal's tables and checks the plan of the journal's listing query.
 */
import { randomUUID } from "node:crypto";
import pg from "pg";
import * as vitest from "vitest";
import { PostgresColdStore } from "../../src/durable/checkpoints/postgres.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { runColdStoreConformance } from "./cold-store-suite.js";
import { bulkInsertJournalWorkflows } from "./helpers.js";

runColdStoreConformance(
  "postgres",
  () => {
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
    const schema = `wf_conf_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
    const cold = new PostgresColdStore({ pool, schema });
    const t = (table: string) => `"${schema}".${table}`;
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
      // The workflows live in the journal's tables: a checkpoint is a step `checkpoint:<k>:<node>`, a side
      // effect a step `effect:<s>:<i>:<name>` of the run its key names.
      async ageSnapshots(workflowId, createdAt) {
        await pool.query(
          `UPDATE ${t("durable_steps")} SET started_at = $1, finished_at = $1
           WHERE run_id = $2 AND (name LIKE 'checkpoint:%' OR name LIKE 'effect:%')`,
          [createdAt, workflowId],
        );
      },
      async countIdempotencyRecords(workflowId) {
        const r = await pool.query(
          `SELECT COUNT(*)::int AS n FROM ${t("durable_steps")} WHERE run_id = $1 AND name LIKE 'effect:%'`,
          [workflowId],
        );
        return r.rows[0].n as number;
      },
      // the journal's keyset query (explainList returns its plan): an index scan in order, no sort, no full scan
      listPlan: {
        mustMatch: /Index Scan Backward using durable_runs_workflow_(status_)?created\b/,
        mustNotMatch: /Seq Scan|Sort/,
      },
      async bulkInsertSummaries(count) {
        const client = await pool.connect();
        try {
          await bulkInsertJournalWorkflows(
            count,
            async (statements) => {
              await client.query("BEGIN");
              try {
                await statements(async (sql, values) => {
                  let n = 0;
                  await client.query(
                    sql.replace(/\?/g, () => `$${++n}`),
                    values,
                  );
                });
                await client.query("COMMIT");
              } catch (e) {
                await client.query("ROLLBACK");
                throw e;
              }
              await client.query(`ANALYZE ${t("durable_runs")}`);
            },
            t,
          );
        } finally {
          client.release();
        }
      },
    };
  },
  { test: vitest, skip: await postgresSkipReason() },
);
