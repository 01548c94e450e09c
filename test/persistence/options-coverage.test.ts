/**
 * Keeps the unknown-option check from drifting: every `…Options` interface
 * of the library must have its key list (`optionKeys<ThatType>`) somewhere
 * in src — which the type system then keeps equal to the interface — or be
 * listed below with the reason it needs none. A new options interface without
 * a check fails here, naming it.
 */
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

const SRC = path.resolve(import.meta.dirname, "../../src");

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(path.join(dir, e.name)) : e.name.endsWith(".ts") ? [path.join(dir, e.name)] : [],
  );
}

/** Options interfaces that need no check of their own, and why. */
const EXEMPT: Record<string, string> = {
  KnownOptions: "the helper's own result type, not an options object",
  SqliteConnectionOptions: "shared part: checked as part of each SQLite component's options that extend it",
  PostgresConnectionOptions: "shared part: checked as part of each PostgreSQL component's options that extend it",
  RedisConnectionOptions: "shared part: checked as part of each Redis component's options that extend it",
  RedisSourceOfTruthOptions:
    "shared part: checked as part of the options of each Redis store that is the source of truth (backend, journal, run stream, LangGraph store), which extend it",
  RunToolCallsOptions: "internal: built by the conversation loop, never by a user",
  ConformanceSuiteOptions: "shared part: checked as part of each conformance suite's options that extend it",
  JournalColdStoreOptions: "internal: the base of SqliteColdStore and PostgresColdStore, never built by a user",
  RunLeaseOptions: "internal: built by runDurable and the graph runner from their own checked options, never by a user",
  PragmaOptions: "better-sqlite3's own pragma() options, described structurally: not an options object of ours",
};

/**
 * Directories whose options objects are internal: the command line's parsed flags, the operations
 * the command and the web inspector share (`ops`), the demos, and the web inspector (not a package
 * entry: only the `dumplings ui` command builds its options).
 */
const SKIPPED_DIRS = ["cli", "ops", "demo", "ui"];

describe("every options interface has an unknown-key check", () => {
  const all = files(SRC).filter((f) => !SKIPPED_DIRS.includes(path.relative(SRC, f).split(path.sep)[0] as string));
  const text = new Map(all.map((f) => [f, readFileSync(f, "utf8")]));
  const everything = [...text.values()].join("\n");
  const declared = new Map<string, string>();
  for (const [file, source] of text) {
    for (const m of source.matchAll(/export interface (\w+Options)\b/g)) {
      declared.set(m[1] as string, path.relative(SRC, file));
    }
  }

  it("finds the options interfaces", () => {
    expect(declared.size).toBeGreaterThan(30);
  });

  it.each([...declared].sort())("%s (%s)", (name) => {
    if (EXEMPT[name] !== undefined) return;
    const checked = new RegExp(`optionKeys<(?:Omit<)?${name}\\b`).test(everything);
    expect(checked, `${name} has no optionKeys<${name}> list: add one and call checkOptions where it is taken`).toBe(
      true,
    );
  });
});
