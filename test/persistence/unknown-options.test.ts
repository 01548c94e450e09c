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
import { configureBuiltinBackends } from "../../src/backends/registry.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { decodeStateBytes } from "../../src/core/codec/bytes.js";
import { encodeStateBytes } from "../../src/core/codec/encode.js";
import { suggestOption } from "../../src/core/options.js";
import { DurableAgent, durableTool } from "../../src/durable/agent.js";
import { RedisHotTier } from "../../src/durable/checkpoints/hot-redis.js";
import { PostgresColdStore } from "../../src/durable/checkpoints/postgres.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { defineStep, step } from "../../src/durable/context.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { RedisJournal } from "../../src/durable/journal-redis.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { durableModel } from "../../src/durable/model.js";
import { cancel, runDurable } from "../../src/durable/run.js";
import { approve, reject, signal } from "../../src/durable/signals.js";
import { MemoryRunStream, RedisRunStream, readText, rebuildText } from "../../src/durable/stream.js";
import { DurableQueue, DurableWorker } from "../../src/durable/worker.js";
import {
  AnthropicAgent,
  activateTemplate,
  agentList,
  BaseAgent,
  configure,
  decodeState,
  defineTemplate,
  deleteState,
  exportStateString,
  FileBackend,
  forgetStoredState,
  InvalidOptionError,
  iterHistory,
  listStates,
  loadState,
  loadStateString,
  MemoryBackend,
  registerAgentClass,
  registerBackend,
  registerHookFunction,
  saveState,
  trackedRevision,
} from "../../src/index.js";
import { loadEnvironmentConfig, persistenceSettings } from "../../src/persistence/config.js";
import {
  loadSampleConversations,
  makeState,
  resetBackendRegistry,
  runBackendConformance,
  runJournalConformance,
  startModelServer,
} from "../../src/testing/index.js";
import { IdempotencyGuard } from "../../src/workflow/idempotency.js";
import { ResumableGraphRunner } from "../../src/workflow/runner.js";
import { CheckpointStore } from "../../src/workflow/store.js";

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

/** A journal the calls never reach: the options are refused first. */
const journal = {} as never;
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
  // Workflow stores, the runner and the idempotency guard.
  ["SqliteColdStore", (o) => new SqliteColdStore(o as never), { path: ":memory:" }],
  ["PostgresColdStore", (o) => new PostgresColdStore(o as never)],
  ["RedisHotTier", (o) => new RedisHotTier(o as never)],
  ["CheckpointStore.open", (o) => CheckpointStore.open({ cold: coldStore(), ...o } as never)],
  ["CheckpointStore.save", async (o) => (await CheckpointStore.open({ cold: coldStore() })).save({} as never, o)],
  ["ResumableGraphRunner", (o) => new ResumableGraphRunner({ store: {} as never, nodes: {}, ...o } as never)],
  ["SqliteColdStore.dropMonth", (o) => coldStore().dropMonth("2026-01", { keepLast: 1, ...o })],
  [
    "CheckpointStore.dropMonth",
    async (o) => (await CheckpointStore.open({ cold: coldStore() })).dropMonth("2026-01", o),
  ],
  ["runner.resume", async (o) => (await runner()).resume("w", 1, o as never)],
  ["runner.resumeFrom", async (o) => (await runner()).resumeFrom("w", 0, o as never)],
  ["IdempotencyGuard", (o) => new IdempotencyGuard({ store: coldStore(), ...o } as never)],
  ["IdempotencyGuard.run", (o) => new IdempotencyGuard({ store: coldStore() }).run("k", () => 1, o as never)],
  // Journals.
  ["SqliteJournal", (o) => new SqliteJournal(o as never), { path: ":memory:" }],
  ["PostgresJournal", (o) => new PostgresJournal(o as never)],
  ["RedisJournal", (o) => new RedisJournal(o as never)],
  // Durable execution.
  ["DurableAgent", (o) => new DurableAgent({ model: {} as never, ...o })],
  ["DurableAgent settings", (o) => new DurableAgent({ model: {} as never, settings: o as never })],
  ["durableModel", (o) => durableModel({} as never, o as never)],
  ["cancel", (o) => cancel(journal, "r", o as never)],
  ["DurableQueue.enqueue", (o) => new DurableQueue({ journal }).enqueue({ runId: "r", workflow: "w" }, o as never)],
  ["DurableQueue.enqueue run", (o) => new DurableQueue({ journal }).enqueue({ runId: "r", workflow: "w", ...o })],
  ["runDurable", (o) => runDurable("r", async () => 1, { journal: journal, ...o })],
  ["step", (o) => step("s", () => 1, o as never)],
  ["defineStep", (o) => defineStep("s", () => 1, o as never)],
  ["step retry policy", (o) => step("s", () => 1, { retry: o as never })],
  ["durableTool", (o) => durableTool({ execute: () => 1 } as never, { name: "t", ...o })],
  ["signal", (o) => signal("r", "n", 1, { journal: journal, ...o })],
  ["approve", (o) => approve("r", "c", { journal: journal, ...o })],
  ["reject", (o) => reject("r", "c", { journal: journal, ...o })],
  ["RedisRunStream", (o) => new RedisRunStream(o as never)],
  [
    "MemoryRunStream.subscribe",
    (o) =>
      new MemoryRunStream()
        .subscribe("r", o as never)
        [Symbol.asyncIterator]()
        .next(),
  ],
  ["rebuildText", (o) => rebuildText([], o as never)],
  ["readText", (o) => readText(new MemoryRunStream(), "r", o as never)],
  ["DurableQueue", (o) => new DurableQueue({ journal: journal, ...o })],
  ["DurableWorker", (o) => new DurableWorker({ journal: journal, workflows: {}, ...o })],
  // Backend methods and the codec.
  ["MemoryBackend.write", (o) => new MemoryBackend().write("k", agent().toState(), o as never)],
  ["FileBackend.write", (o) => new FileBackend({ baseDir: dir() }).write("k", agent().toState(), o as never)],
  ["SQLiteBackend.write", (o) => new SQLiteBackend({ dbPath: ":memory:" }).write("k", agent().toState(), o as never)],
  ["RedisBackend.write", (o) => closing(new RedisBackend(), (b) => b.write("k", agent().toState(), o as never))],
  ["PostgresBackend.write", (o) => closing(new PostgresBackend(), (b) => b.write("k", agent().toState(), o as never))],
  ["SQLiteBackend.gc", (o) => new SQLiteBackend({ dbPath: ":memory:" }).gc({ olderThanMs: 1, ...o })],
  ["PostgresBackend.gc", (o) => closing(new PostgresBackend(), (b) => b.gc({ olderThanMs: 1, ...o }))],
  ["BaseAgent.fromState", (o) => BaseAgent.fromState(agent().toState(), o as never)],
  ["decodeState", (o) => decodeState(exportStateString(agent()), o as never)],
  ["decodeStateBytes", (o) => decodeStateBytes(Buffer.from(exportStateString(agent())), o as never)],
  ["encodeStateBytes", (o) => encodeStateBytes(agent().toState(), o as never)],
  // dumplings-ai/testing.
  ["runBackendConformance", (o) => runBackendConformance("x", () => new MemoryBackend(), { test: {} as never, ...o })],
  ["runJournalConformance", (o) => runJournalConformance("x", () => ({}) as never, { test: {} as never, ...o })],
  ["startModelServer", (o) => startModelServer(o as never)],
  ["makeState", (o) => makeState([], o as never)],
  ["loadSampleConversations", (o) => loadSampleConversations(o as never)],
  // Agents.
  ["BaseAgent", (o) => new BaseAgent(o as never)],
  ["AnthropicAgent", (o) => new AnthropicAgent(o as never)],
  ["agent.conversationWithTool", (o) => agent().conversationWithTool("hi", o as never)],
  ["defineTemplate", (o) => defineTemplate("opt-template", () => agent(), o as never)],
  ["agentList.add", (o) => agentList.add(agent(), o as never)],
  ["activateTemplate", (o) => activateTemplate("no-such-template", o as never)],
];

/** Runs `fn` on a backend and closes it whatever happens. */
async function closing<B extends { close(): unknown }>(b: B, fn: (b: B) => unknown): Promise<unknown> {
  try {
    return await fn(b);
  } finally {
    await b.close();
  }
}

const colds: SqliteColdStore[] = [];
afterAll(async () => {
  for (const c of colds) await c.close();
});
async function runner(): Promise<ResumableGraphRunner> {
  return new ResumableGraphRunner({
    store: await CheckpointStore.open({ cold: coldStore() }),
    nodes: { a: () => ({}) as never },
  });
}
function coldStore(): SqliteColdStore {
  const c = new SqliteColdStore({ path: ":memory:" });
  colds.push(c);
  return c;
}

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
    await expectUnknown(() => new BaseAgent({ model_name: "gpt" } as never), "model_name", "modelName");
    await expectUnknown(() => new BaseAgent({ api_key_env: "K" } as never), "api_key_env", "apiKeyEnv");
    await expectUnknown(() => new SqliteJournal({ table_prefix: "x_" } as never), "table_prefix", "tablePrefix");
    await expectUnknown(() => new RedisHotTier({ ttl: 5 } as never), "ttl", "ttlMs");
  });

  it("a user's agent subclass may take options of its own and pass them on to super", () => {
    class NotesAgent extends BaseAgent {
      notes: string[];
      constructor(options: ConstructorParameters<typeof BaseAgent>[0] & { notes?: string[] } = {}) {
        super(options);
        this.notes = options.notes ?? [];
      }
    }
    expect(new NotesAgent({ name: "n", notes: ["a"] }).notes).toEqual(["a"]);
  });
});

describe("deprecated aliases stay accepted", () => {
  it("sqlite path/dbPath, postgres connectionString/max", async () => {
    new SQLiteBackend({ path: ":memory:" }).close();
    new SQLiteBackend({ dbPath: ":memory:" }).close();
    const pg = new PostgresBackend({ connectionString: "postgres://u@127.0.0.1:1/x", max: 2 });
    await pg.close();
    await new SqliteColdStore({ db: undefined, path: ":memory:" }).close();
    await new RedisJournal({ prefix: "x:", url: "redis://127.0.0.1:1" }).close();
  });

  it("options whose value is undefined are still checked by name", async () => {
    await expectUnknown(() => configure({ base_dir: undefined } as never), "base_dir", "baseDir");
    configure({ baseDir: undefined, dbPath: undefined });
  });
});

describe("option values of the wrong kind are refused, not read as a default", () => {
  it("FileBackend: a missing baseDir, gzip that is not a boolean, a non-positive timeout", () => {
    for (const [options, option] of [
      [{}, "baseDir"],
      [{ baseDir: "" }, "baseDir"],
      [{ baseDir: dir(), gzip: "yes" }, "gzip"],
      [{ baseDir: dir(), gzip: 1 }, "gzip"],
      [{ baseDir: dir(), lockTimeoutMs: 0 }, "lockTimeoutMs"],
      [{ baseDir: dir(), staleLockMs: -1 }, "staleLockMs"],
      [{ baseDir: dir(), headerSlack: 1.5 }, "headerSlack"],
    ] as const) {
      let error: unknown;
      try {
        new FileBackend(options as never);
      } catch (e) {
        error = e;
      }
      expect(error, JSON.stringify(options)).toBeInstanceOf(InvalidOptionError);
      expect(error, JSON.stringify(options)).toMatchObject({ code: "INVALID_OPTION", option });
    }
    expect(() => new FileBackend({ baseDir: dir(), gzip: true, lockTimeoutMs: 5, headerSlack: 0 })).not.toThrow();
  });
});

describe("suggestOption", () => {
  it("matches case and separators first, then the nearest name, else nothing", () => {
    const keys = ["baseDir", "dbPath", "keyStrategy", "backend"];
    expect(suggestOption("base_dir", keys)).toBe("baseDir");
    expect(suggestOption("DB-PATH", keys)).toBe("dbPath");
    expect(suggestOption("keyStrategi", keys)).toBe("keyStrategy");
    expect(suggestOption("backedn", keys)).toBe("backend");
    expect(suggestOption("ttl", ["url", "ttlMs"])).toBe("ttlMs");
    expect(suggestOption("dbPathName", keys)).toBe("dbPath");
    expect(suggestOption("completelyDifferent", keys)).toBeUndefined();
    expect(suggestOption("x", [])).toBeUndefined();
  });
});
