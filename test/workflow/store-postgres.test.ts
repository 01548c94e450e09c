/**
 * The cold store conformance suite on a real PostgreSQL server: a schema of its own per test,
 * dropped after it. The hooks reach the tables through the test's own pool.
 */
import { randomUUID } from "node:crypto";
import pg from "pg";
import * as vitest from "vitest";
import { PostgresColdStore } from "../../src/workflow/cold-postgres.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { runColdStoreConformance } from "./cold-store-suite.js";

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
      async ageSnapshots(workflowId, createdAt) {
        await pool.query(`UPDATE ${t("workflow_snapshots")} SET created_at = $1 WHERE workflow_id = $2`, [
          createdAt,
          workflowId,
        ]);
        await pool.query(`UPDATE ${t("workflow_idempotency")} SET started_at = $1 WHERE workflow_id = $2`, [
          createdAt,
          workflowId,
        ]);
      },
      async countIdempotencyRecords(workflowId) {
        const r = await pool.query(
          `SELECT COUNT(*)::int AS n FROM ${t("workflow_idempotency")} WHERE workflow_id = $1`,
          [workflowId],
        );
        return r.rows[0].n as number;
      },
      async bulkInsertSummaries(count) {
        await pool.query(
          `INSERT INTO ${t("workflows")} (workflow_id, session_id, status, latest_step, current_node, active_step, parent_workflow_id, created_at, updated_at)
           SELECT 'bulk-' || i, 's-' || i, (ARRAY['running','waiting','finished','failed'])[1 + i % 4], 0, 'n', 0, NULL,
                  1700000000000 + (i % 9973) * 1000, 1700000000000 + (i % 9973) * 1000
           FROM generate_series(0, $1 - 1) AS i`,
          [count],
        );
        await pool.query(`ANALYZE ${t("workflows")}`);
      },
      listPlan: { mustMatch: /Index Scan using workflows_(status_)?updated/, mustNotMatch: /Seq Scan|Sort\b/ },
    };
  },
  { test: vitest, skip: await postgresSkipReason() },
);
