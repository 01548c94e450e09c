/** Journal conformance on the embedded SQLite store (a fresh temp file per test). */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { journalConformance } from "./journal-conformance.js";

journalConformance("sqlite", async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "dumplings-journal-"));
  const journal = new SqliteJournal({ path: path.join(dir, "journal.db") });
  return {
    journal,
    cleanup: async () => {
      await journal.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});
