/**
 * The library's logger (issue 28, item 1): `configure({ logger })` takes console, pino and winston as
 * they are; every line the library writes on its own goes there; a `persistError` a listener handles
 * is not also printed; a bad logger is a typed error; a logger that throws never fails an operation.
 */
import { Writable } from "node:stream";
import pino from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import winston from "winston";
import { MemoryBackend } from "../../src/backends/memory.js";
import { InvalidOptionError } from "../../src/core/errors.js";
import { log } from "../../src/core/logger.js";
import { BaseAgent, configure, InvalidConfigError, loadState } from "../../src/index.js";
import { autoSave } from "../../src/persistence/api.js";
import { CheckpointStore, createWorkflowState, RedisHotTier, SqliteColdStore } from "../../src/workflow/index.js";

afterEach(() => {
  configure({ logger: null });
  vi.restoreAllMocks();
});

/** Lines a stream receives. */
function sink(): { stream: Writable; lines: string[] } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      lines.push(...String(chunk).split("\n").filter(Boolean));
      done();
    },
  });
  return { stream, lines };
}

/** Two agents of one key, the second's auto-save refused (a conflict): a failure nobody may handle. */
async function conflicting(): Promise<BaseAgent> {
  const backend = new MemoryBackend();
  await new BaseAgent({ name: "logged", history: [{ role: "user", content: "start" }] }).saveState("logged", {
    backend,
  });
  const a = await loadState("logged", { backend });
  const b = await loadState("logged", { backend });
  a.history.push({ role: "assistant", content: "A" });
  b.history.push({ role: "assistant", content: "B" });
  expect(await autoSave(a)).toBe(true);
  return b;
}

describe("configure({ logger })", () => {
  it("pino, as it is: a failed auto-save nobody handles is one error line with its fields", async () => {
    const { stream, lines } = sink();
    configure({ logger: pino({ level: "debug" }, stream) });
    const b = await conflicting();
    expect(await autoSave(b)).toBe(false);
    expect(await autoSave(b)).toBe(false); // the same failure again: not logged twice
    expect(lines).toHaveLength(1);
    const line = JSON.parse(lines[0]!);
    expect(line.level).toBe(50);
    expect(line.msg).toMatch(/auto-save of agent "logged" failed/);
    expect(line.agent).toBe("logged");
    expect(line.code).toBe("CONFLICT");
  });

  it("winston, as it is: the message and the fields of the line", async () => {
    const { stream, lines } = sink();
    configure({
      logger: winston.createLogger({
        level: "debug",
        format: winston.format.json(),
        transports: [new winston.transports.Stream({ stream })],
      }),
    });
    const b = await conflicting();
    expect(await autoSave(b)).toBe(false);
    await new Promise((r) => setImmediate(r));
    expect(lines).toHaveLength(1);
    const line = JSON.parse(lines[0]!);
    expect(line.level).toBe("error");
    expect(line.message).toMatch(/auto-save of agent "logged" failed/);
    expect(line.agent).toBe("logged");
  });

  it("a persistError a listener handles is not also printed", async () => {
    const calls: unknown[][] = [];
    configure({ logger: { warn: (...a: unknown[]) => calls.push(a), error: (...a: unknown[]) => calls.push(a) } });
    const b = await conflicting();
    const seen: unknown[] = [];
    b.on("persistError", (e) => seen.push(e));
    expect(await autoSave(b)).toBe(false);
    expect(seen).toHaveLength(1);
    expect(calls).toEqual([]);
  });

  it("the default is the console, one [dumplings] line; null restores it", async () => {
    const lines: string[] = [];
    configure({ logger: { warn: () => undefined, error: () => undefined } });
    configure({ logger: null });
    vi.spyOn(console, "error").mockImplementation((...a: unknown[]) => {
      lines.push(a.map(String).join(" "));
    });
    const b = await conflicting();
    expect(await autoSave(b)).toBe(false);
    expect(lines).toEqual([expect.stringMatching(/^\[dumplings\] auto-save of agent "logged" failed: /)]);
  });

  it("a warning at load goes to the logger at warn, with its code", async () => {
    const calls: [string, unknown][] = [];
    configure({
      logger: { warn: (m: string, f: unknown) => calls.push([m, f]), error: () => undefined },
    });
    const backend = new MemoryBackend();
    const agent = new BaseAgent({
      name: "bad-history",
      history: [
        { role: "user", content: "hi" },
        { role: "tool", tool_call_id: "nope", content: "orphan result" },
      ],
    });
    await agent.saveState("bad-history", { backend });
    await loadState("bad-history", { backend });
    expect(calls).toEqual([
      [
        expect.stringMatching(/^the history of agent "bad-history" would be rejected/),
        { code: "HISTORY_INVALID", name: "bad-history" },
      ],
    ]);
  });

  it("a persistWarning a listener handles is not also printed; without one it is logged", async () => {
    const calls: unknown[][] = [];
    configure({ logger: { warn: (...a: unknown[]) => calls.push(a), error: () => undefined } });
    const backend = new MemoryBackend();
    const history = [
      { role: "user" as const, content: "hi" },
      { role: "tool" as const, tool_call_id: "nope", content: "orphan result" },
    ];
    await new BaseAgent({ name: "warned", history }).saveState("warned", { backend });
    const seen: unknown[] = [];
    const listened = await loadState("warned", { backend });
    expect(calls).toHaveLength(1);
    listened.on("persistWarning", (w) => seen.push(w));
    (listened as unknown as { warn(w: unknown): void }).warn({ code: "HOOK_NOT_REGISTERED", name: "h", message: "m" });
    expect(seen).toHaveLength(1);
    expect(calls).toHaveLength(1);
  });

  it("a workflow store's own logger gets the hot tier's failure once, with the workflow id", async () => {
    const calls: [string, unknown][] = [];
    const store = await CheckpointStore.open({
      cold: new SqliteColdStore({ path: ":memory:" }),
      // nothing listens on this port: every hot-tier call fails
      hot: new RedisHotTier({ url: "redis://127.0.0.1:1", connectTimeoutMs: 200 }),
      logger: { warn: (m: string, f: unknown) => calls.push([m, f]), error: () => undefined },
    });
    try {
      let s = createWorkflowState({ workflowId: "wf-log" });
      s = await store.save(s, { expectedStep: null });
      await store.save({ ...s, stepIndex: 1 }, { expectedStep: 0 });
      expect(calls).toHaveLength(1);
      expect(calls[0]?.[0]).toMatch(/hot tier \(redis\) put failed for workflow "wf-log"/);
      expect(calls[0]?.[1]).toEqual({ workflowId: "wf-log", op: "put" });
    } finally {
      await store.close();
    }
  });

  it("a logger that is not one is a typed error; one that throws never fails an operation", async () => {
    expect(() => configure({ logger: {} as never })).toThrow(InvalidConfigError);
    expect(() => configure({ logger: { warn: () => undefined } as never })).toThrow(/missing error/);
    expect(() => configure({ logger: { warn() {}, error() {}, debug: 3 } as never })).toThrow(/debug must be/);
    await expect(
      CheckpointStore.open({ cold: new SqliteColdStore({ path: ":memory:" }), logger: console.log as never }),
    ).rejects.toThrow(InvalidOptionError);
    const boom = () => {
      throw new Error("logger down");
    };
    configure({ logger: { warn: boom, error: boom } });
    expect(() => log("error", "x", { a: 1 })).not.toThrow();
    const b = await conflicting();
    expect(await autoSave(b)).toBe(false);
  });
});
