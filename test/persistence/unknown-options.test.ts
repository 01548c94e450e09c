/**
 * An option nobody reads is an error, not silence: every public function and
 * constructor that takes an options object refuses a key its type does not
 * declare with an InvalidOptionError (code INVALID_OPTION) naming the key and
 * the option it most likely meant — `configure({ base_dir })` → "did you
 * mean baseDir?" — before doing anything. Deprecated aliases stay accepted.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { RedisBackend } from "../../src/backends/redis.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { suggestOption } from "../../src/core/options.js";
import {
  BaseAgent,
  configure,
  configureBuiltinBackends,
  deleteState,
  exportStateString,
  FileBackend,
  forgetStoredState,
  InvalidOptionError,
  iterHistory,
  listStates,
  loadEnvironmentConfig,
  loadState,
  loadStateString,
  MemoryBackend,
  persistenceSettings,
  registerAgentClass,
  registerBackend,
  registerHookFunction,
  saveState,
  trackedRevision,
} from "../../src/index.js";
import { resetBackendRegistry } from "../../src/testing/index.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-unknown-opt-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

beforeEach(() => {
  resetBackendRegistry();
  loadEnvironmentConfig({});
  configure({ backend: "memory" });
});

/** Calls `fn` (sync or async) and returns what it threw or rejected with. */
async function failure(fn: () => unknown): Promise<unknown> {
  try {
    await fn();
  } catch (e) {
    return e;
  }
  throw new Error("expected an InvalidOptionError, nothing was thrown");
}

async function expectUnknown(fn: () => unknown, key: string, meant?: string): Promise<void> {
  const e = await failure(fn);
  expect(e).toBeInstanceOf(InvalidOptionError);
  expect(e).toMatchObject({ code: "INVALID_OPTION", option: key });
  const message = (e as Error).message;
  expect(message).toContain(key);
  if (meant !== undefined) expect(message).toContain(`did you mean ${meant}?`);
}

const agent = () => new BaseAgent({ name: "opts", history: [{ role: "user", content: "hi" }] });
const dir = () => mkdtempSync(path.join(tmp, "d-"));

/**
 * Every public options-taking export of the persistence layer and the backends, called with
 * `options` (an unknown key plus, where the call needs one, a valid one).
 */
const calls: [string, (options: Record<string, unknown>) => unknown, Record<string, unknown>?][] = [
  ["configure", (o) => configure(o)],
  ["saveState", (o) => saveState(agent(), "k", o)],
  ["agent.saveState", (o) => agent().saveState("k", o)],
  ["loadState", (o) => loadState("k", o)],
  ["loadStateString", (o) => loadStateString(exportStateString(agent()), o)],
  ["deleteState", (o) => deleteState("k", o)],
  ["listStates", (o) => listStates(o)],
  ["iterHistory", (o) => iterHistory("k", o).next()],
  ["trackedRevision", (o) => trackedRevision(agent(), "k", o)],
  ["forgetStoredState", (o) => forgetStoredState(agent(), "k", o)],
  ["registerBackend", (o) => registerBackend("opt-test", new MemoryBackend(), o)],
  ["configureBuiltinBackends", (o) => configureBuiltinBackends(o)],
  ["registerAgentClass", (o) => registerAgentClass(class extends BaseAgent {}, import.meta.url, "X", o)],
  ["registerHookFunction", (o) => registerHookFunction(() => undefined, import.meta.url, "h", o)],
  ["FileBackend", (o) => new FileBackend(o as never), { baseDir: "." }],
  ["SQLiteBackend", (o) => new SQLiteBackend(o as never), { dbPath: ":memory:" }],
  ["RedisBackend", (o) => new RedisBackend(o as never)],
  ["PostgresBackend", (o) => new PostgresBackend(o as never)],
];

describe("every public options object refuses an unknown key", () => {
  it.each(calls)("%s", async (_name, call, valid) => {
    await expectUnknown(() => call({ ...valid, no_such_option: 1 }), "no_such_option");
  });
});

describe("configure() and the original design's option names", () => {
  it.each([
    ["base_dir", "baseDir"],
    ["db_path", "dbPath"],
    ["key_strategy", "keyStrategy"],
    ["allow_imports", "allowImports"],
    ["tool_argument_secrets", "toolArgumentSecrets"],
    ["Enabled", "enabled"],
    ["backnd", "backend"],
  ])("configure({ %s }) is an InvalidOptionError: did you mean %s?", async (key, meant) => {
    const before = persistenceSettings();
    await expectUnknown(() => configure({ [key]: "./x" } as never), key, meant);
    expect(persistenceSettings()).toEqual(before); // nothing changed
  });

  it("nothing is applied when one key of several is unknown", async () => {
    await expectUnknown(() => configure({ keyStrategy: "name", base_dir: "./x" } as never), "base_dir", "baseDir");
    expect(persistenceSettings().keyStrategy).toBe("uuid");
  });

  it("names the options of backend constructors too", async () => {
    await expectUnknown(() => new FileBackend({ base_dir: dir() } as never), "base_dir", "baseDir");
    await expectUnknown(() => new SQLiteBackend({ db_path: ":memory:" } as never), "db_path", "dbPath");
    await expectUnknown(() => new RedisBackend({ key_prefix: "x:" } as never), "key_prefix", "keyPrefix");
    await expectUnknown(() => new RedisBackend({ redis_url: "redis://x" } as never), "redis_url");
    await expectUnknown(() => new PostgresBackend({ shema: "x" } as never), "shema", "schema");
    await expectUnknown(() => saveState(agent(), "k", { ifrevision: 1 } as never), "ifrevision", "ifRevision");
  });
});

describe("deprecated aliases stay accepted", () => {
  it("sqlite path/dbPath, postgres connectionString/max", async () => {
    new SQLiteBackend({ path: ":memory:" }).close();
    new SQLiteBackend({ dbPath: ":memory:" }).close();
    const pg = new PostgresBackend({ connectionString: "postgres://u@127.0.0.1:1/x", max: 2 });
    await pg.close();
  });

  it("options whose value is undefined are still checked by name", async () => {
    await expectUnknown(() => configure({ base_dir: undefined } as never), "base_dir", "baseDir");
    configure({ baseDir: undefined, dbPath: undefined });
  });
});

describe("suggestOption", () => {
  it("matches case and separators first, then the nearest name, else nothing", () => {
    const keys = ["baseDir", "dbPath", "keyStrategy", "backend"];
    expect(suggestOption("base_dir", keys)).toBe("baseDir");
    expect(suggestOption("DB-PATH", keys)).toBe("dbPath");
    expect(suggestOption("keyStrategi", keys)).toBe("keyStrategy");
    expect(suggestOption("backedn", keys)).toBe("backend");
    expect(suggestOption("completelyDifferent", keys)).toBeUndefined();
    expect(suggestOption("x", [])).toBeUndefined();
  });
});
