/** Journal conformance on PostgreSQL (a fresh schema per test, dropped afterwards). */
import { randomUUID } from "node:crypto";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { journalConformance } from "./journal-conformance.js";

const skip = await postgresSkipReason();

journalConformance(
  "postgres",
  async () => {
    const journal = new PostgresJournal({
      url: DATABASE_URL,
      schema: `dj_${randomUUID().replaceAll("-", "").slice(0, 16)}`,
    });
    return {
      journal,
      cleanup: async () => {
        await journal.dropSchema();
        await journal.close();
      },
    };
  },
  skip,
);
