/**
 * The SQLite cold store of the previous release, for tests only: the SQL cold store (kept for
 * PostgreSQL until it switches too) on the SQLite driver with the previous release's migrations
 * (`workflow` 1, `workflow-lease` 1–2, `workflow-blobs`), so a test writes a file in the layout
 * that release wrote (`workflows`, month tables, `workflow_idempotency`, `workflow_leases`,
 * `workflow_lease_floor`, `workflow_blobs`) and then opens it with today's `SqliteColdStore`,
 * which moves it into the journal.
 */
import { SqliteDriver } from "../../src/drivers/sqlite.js";
import { workflowBlobMigrations } from "../../src/workflow/cold-blobs.js";
import { SqlColdStore, workflowMigrations } from "../../src/workflow/cold-sql.js";
import { workflowLeaseMigrations } from "../../src/workflow/lease-sql.js";

/** A cold store writing the previous release's tables into the SQLite file at `file`. */
export class PreviousSqliteColdStore extends SqlColdStore<SqliteDriver> {
  constructor(file: string) {
    super(
      new SqliteDriver(
        "sqlite",
        { path: file },
        [workflowMigrations("sqlite"), workflowLeaseMigrations("sqlite"), workflowBlobMigrations("sqlite")],
        { synchronous: "FULL", incrementalVacuum: true },
      ),
    );
  }
}
