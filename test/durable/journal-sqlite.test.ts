/** The journal conformance suite on the embedded SQLite store (a fresh temp file per test). */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import * as vitest from "vitest";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runJournalConformance } from "../../src/testing/index.js";

const dirs = new Map<SqliteJournal, string>();

runJournalConformance(
  "sqlite",
  () => {
    const dir = mkdtempSync(path.join(tmpdir(), "dumplings-journal-"));
    const journal = new SqliteJournal({ path: path.join(dir, "journal.db") });
    dirs.set(journal, dir);
    return journal;
  },
  {
    test: vitest,
    destroy: async (journal) => {
      await journal.close();
      rmSync(dirs.get(journal) ?? "", { recursive: true, force: true });
      dirs.delete(journal);
    },
  },
);
