/** The CheckpointStore suite on a real PostgreSQL server, in a schema of its own. */
import pg from "pg";
import { PostgresColdStore } from "../../src/workflow/cold-postgres.js";
import type { ColdStore } from "../../src/workflow/index.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { checkpointStoreSuite } from "./store-suite.js";

const skip = await postgresSkipReason();
const prefix = `wf_suite_${process.pid}_${Date.now().toString(36)}`;

checkpointStoreSuite(
  "PostgreSQL",
  () => {
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 6 });
    const schemas: string[] = [];
    const schemaOf = (cold: ColdStore) => `"${(cold as unknown as { s: string }).s.replaceAll('"', "")}"`;
    return {
      async make() {
        const schema = `${prefix}_${schemas.length}`;
        schemas.push(schema);
        return new PostgresColdStore({ pool, schema });
      },
      async bulkInsertSummaries(cold, count) {
        const s = schemaOf(cold);
        await pool.query(
          `INSERT INTO ${s}.workflows (workflow_id, session_id, status, latest_step, current_node, active_step, parent_workflow_id, created_at, updated_at)
           SELECT 'bulk-' || i, 's-' || i, (ARRAY['running','waiting','finished','failed'])[1 + i % 4], 0, 'n', 0, NULL,
                  1700000000000 + (i % 9973) * 1000, 1700000000000 + (i % 9973) * 1000
           FROM generate_series(0, $1 - 1) AS i`,
          [count],
        );
        await pool.query(`ANALYZE ${s}.workflows`);
      },
      async ageSnapshots(cold, workflowId, createdAt) {
        const s = schemaOf(cold);
        await pool.query(`UPDATE ${s}.workflow_snapshots SET created_at = $1 WHERE workflow_id = $2`, [
          createdAt,
          workflowId,
        ]);
        await pool.query(`UPDATE ${s}.workflow_idempotency SET started_at = $1 WHERE workflow_id = $2`, [
          createdAt,
          workflowId,
        ]);
      },
      async overwriteJson(cold, workflowId, stepIndex, json) {
        await pool.query(
          `UPDATE ${schemaOf(cold)}.workflow_snapshots SET state_json = $1 WHERE workflow_id = $2 AND step_index = $3`,
          [json, workflowId, stepIndex],
        );
      },
      async countIdempotency(cold, workflowId) {
        const r = await pool.query(
          `SELECT COUNT(*)::int AS n FROM ${schemaOf(cold)}.workflow_idempotency WHERE workflow_id = $1`,
          [workflowId],
        );
        return r.rows[0].n as number;
      },
      planMustMatch: /Index Scan using workflows_(status_)?updated/,
      planMustNotMatch: /Seq Scan|Sort\b/,
      async cleanup() {
        for (const s of schemas) await pool.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
        await pool.end();
      },
    };
  },
  skip,
);
