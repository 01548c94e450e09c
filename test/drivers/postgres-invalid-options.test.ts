/**
 * Issue 9: an invalid schema name is the same typed error from every
 * PostgreSQL component — `InvalidOptionError` (code `INVALID_OPTION`, option
 * `schema`), thrown by the constructor before any connection is made. Before
 * the fix it was a `TypeError` (sessions), a `RangeError` (cold store) or a
 * plain coded `DumplingsError` (journal).
 *
 * No server is needed: nothing connects.
 */
import { describe, expect, it } from "vitest";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { DumplingsError, InvalidOptionError } from "../../src/core/errors.js";
import { PostgresColdStore } from "../../src/durable/checkpoints/postgres.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { DATABASE_URL } from "../helpers/services.js";

const COMPONENTS: Record<string, (schema: string) => { close(): Promise<void> }> = {
  "sessions (PostgresBackend)": (schema) => new PostgresBackend({ connectionString: DATABASE_URL, schema }),
  "workflow cold store (PostgresColdStore)": (schema) => new PostgresColdStore({ url: DATABASE_URL, schema }),
  "durable journal (PostgresJournal)": (schema) => new PostgresJournal({ url: DATABASE_URL, schema }),
};

/** What `make` throws (synchronously); a component it built anyway is closed. */
async function thrownBy(make: () => { close(): Promise<void> }): Promise<unknown> {
  try {
    const made = make();
    await made.close();
  } catch (e) {
    return e;
  }
  return undefined;
}

/** The facts the test compares, so that one diff shows every component's error side by side. */
function describeError(error: unknown) {
  if (error === undefined) return { thrown: false };
  return {
    thrown: true,
    class: (error as object).constructor?.name,
    invalidOptionError: error instanceof InvalidOptionError,
    dumplingsError: error instanceof DumplingsError,
    code: (error as { code?: unknown }).code,
    option: (error as { option?: unknown }).option,
  };
}

describe("PostgreSQL components: an invalid schema name", () => {
  for (const schema of ["bad-name", "1abc"]) {
    it(`${JSON.stringify(schema)} is the same InvalidOptionError (INVALID_OPTION, option "schema") from every component's constructor`, async () => {
      const got: Record<string, ReturnType<typeof describeError>> = {};
      const messages: string[] = [];
      for (const [component, make] of Object.entries(COMPONENTS)) {
        const error = await thrownBy(() => make(schema));
        got[component] = describeError(error);
        messages.push(`${component}: ${error instanceof Error ? error.message : String(error)}`);
      }
      const expected = {
        thrown: true,
        class: "InvalidOptionError",
        invalidOptionError: true,
        dumplingsError: true,
        code: "INVALID_OPTION",
        option: "schema",
      };
      expect(got, messages.join("\n")).toEqual(Object.fromEntries(Object.keys(COMPONENTS).map((c) => [c, expected])));
    });
  }
});
