/** The journal conformance suite on PostgreSQL (a fresh schema per test, dropped afterwards). */
import { randomUUID } from "node:crypto";
import * as vitest from "vitest";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { runJournalConformance } from "../../src/testing/index.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

runJournalConformance(
  "postgres",
  () => new PostgresJournal({ url: DATABASE_URL, schema: `dj_${randomUUID().replaceAll("-", "").slice(0, 16)}` }),
  {
    test: vitest,
    skip: await postgresSkipReason(),
    destroy: async (journal) => {
      await journal.dropSchema();
      await journal.close();
    },
  },
);
