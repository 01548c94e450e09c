/**
 * The original design's Redis backend (dumplingsAI 0.4.0) kept one STRING per session at
 * `duas:{key}`: the whole state as JSON (snake_case meta/config/state, the history array). The
 * Redis backend reads such entries on every read path (they failed with WRONGTYPE), lists them,
 * and converts one to its hash + list layout on the next save, atomically and under compare-and-set
 * (issue 25, item 8). On the real Redis server.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { RedisBackend } from "../../src/backends/redis.js";
import { decodeState } from "../../src/core/codec/bytes.js";
import { ConflictError, FormatError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import type { AgentState } from "../../src/core/state.js";
import { type BaseAgent, loadState, saveState } from "../../src/index.js";
import { makeState } from "../../src/testing/states.js";
import { runCli } from "../cli/run-cli.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const skip = await redisSkipReason();

/** The original design's example session (test/fixtures/original/example-0.4.duas), as the state it loads to. */
const EXAMPLE: AgentState = decodeState(
  readFileSync(new URL("../fixtures/original/example-0.4.duas", import.meta.url), "utf8"),
);
// A class this package resolves, so loadState can restore it.
EXAMPLE.meta.class = "dumplings-ai:BaseAgent";
EXAMPLE.state.hooks = [];

/** The same state as the original's Redis backend stored it: snake_case JSON, non-ASCII as is. */
function originalEntry(state: AgentState): string {
  const m = state.meta;
  const c = state.config;
  return JSON.stringify({
    meta: {
      format_version: "1.0",
      schema_version: m.schemaVersion,
      agent_uuid: m.agentUuid,
      agent_name: m.agentName,
      protocol: m.protocol,
      class: m.class,
      saved_at: m.savedAt,
      message_count: state.history.length,
    },
    config: {
      prompt: c.prompt,
      api_provider: c.apiProvider,
      api_key_env: c.apiKeyEnv,
      model_name: c.modelName,
      max_tokens: c.maxTokens,
      stream: c.stream,
      fc_model: c.fcModel,
      tool_timeout: c.toolTimeout,
      tool_max_workers: c.toolMaxWorkers,
    },
    state: { current_task_id: state.state.currentTaskId, hooks: state.state.hooks },
    history: state.history,
  });
}

describe.skipIf(!!skip)(`the original design's duas:{key} strings${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const admin = new Redis(REDIS_URL, { lazyConnect: true });
  const prefixes: string[] = [];
  const backends: RedisBackend[] = [];
  const make = (keyPrefix: string) => {
    const b = new RedisBackend({ url: REDIS_URL, keyPrefix });
    backends.push(b);
    return b;
  };
  const newPrefix = () => {
    const p = `duas-orig:${randomUUID()}:`;
    prefixes.push(p);
    return p;
  };
  afterAll(async () => {
    for (const b of backends) await b.close();
    for (const prefix of prefixes) {
      const keys = await admin.keys(`${prefix}*`);
      if (keys.length > 0) await admin.del(...keys);
    }
    admin.disconnect();
  });

  it("every read path reads the entry (revision 1), listKeys lists it beside a current session", async () => {
    const prefix = newPrefix();
    await admin.set(`${prefix}weather`, originalEntry(EXAMPLE));
    const b = make(prefix);
    await b.write("current", makeState([{ role: "user", content: "hi" }]));
    expect(await b.load("weather")).toEqual(EXAMPLE);
    expect(await b.read("weather")).toEqual({ state: EXAMPLE, revision: 1 });
    const head = await b.readHeader("weather");
    expect(head?.revision).toBe(1);
    expect(head?.header.config.apiKeyEnv).toBe("API_KEY");
    expect(head?.header.meta.messageCount).toBe(4);
    const streamed: Message[] = [];
    for await (const m of b.iterHistory("weather", { revision: 1 })) streamed.push(m);
    expect(streamed).toEqual(EXAMPLE.history);
    expect((await b.listKeys()).sort()).toEqual(["current", "weather"]);
    // the same state written in the current (camelCase) shape reads too
    await admin.set(`${prefix}camel`, JSON.stringify(EXAMPLE));
    expect(await b.load("camel")).toEqual(EXAMPLE);
    // not a state: a FormatError naming the key, not WRONGTYPE
    await admin.set(`${prefix}junk`, "not json");
    await expect(b.load("junk")).rejects.toThrow(FormatError);
    // the CLI reads it too
    const url = `${REDIS_URL}?prefix=${encodeURIComponent(prefix)}`;
    const shown = runCli(["show", "weather", "--backend", url, "--json"]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain("API_KEY");
    // deleting removes it
    expect(await b.delete("camel")).toBe(true);
    expect(await b.read("camel")).toBeUndefined();
    expect(await admin.exists(`${prefix}camel`)).toBe(0);
  });

  it("loadState, a new message, saveState: converted to the current layout, nothing lost", async () => {
    const prefix = newPrefix();
    await admin.set(`${prefix}weather`, originalEntry(EXAMPLE));
    const backend = make(prefix);
    const agent = await loadState<BaseAgent>("weather", { backend });
    expect(agent.history).toEqual(EXAMPLE.history);
    agent.history.push({ role: "user", content: "and tomorrow?" });
    await saveState(agent, "weather", { backend });
    expect(await admin.type(`${prefix}weather`)).toBe("hash");
    const r = await backend.read("weather");
    expect(r?.revision).toBeGreaterThan(1);
    expect(r?.state.history).toEqual([...EXAMPLE.history, { role: "user", content: "and tomorrow?" }]);
    expect(r?.state.config.apiKeyEnv).toBe("API_KEY");
    // and the next append is an append
    agent.history.push({ role: "assistant", content: "rain" });
    const second = await saveState(agent, "weather", { backend });
    expect(second.rewritten).toBe(false);
    expect(await admin.llen(`${prefix}weather/history`)).toBe(6);
  });

  it("two writers that read the entry: one converts it, the other gets a ConflictError", async () => {
    const prefix = newPrefix();
    await admin.set(`${prefix}weather`, originalEntry(EXAMPLE));
    const a = make(prefix);
    const b = make(prefix);
    const seenA = await a.read("weather");
    const seenB = await b.read("weather");
    expect([seenA?.revision, seenB?.revision]).toEqual([1, 1]);
    const one = { ...EXAMPLE, history: [...EXAMPLE.history, { role: "user", content: "A" } as Message] };
    const two = { ...EXAMPLE, history: [...EXAMPLE.history, { role: "user", content: "B" } as Message] };
    const results = await Promise.allSettled([
      a.write("weather", one, { expectedRevision: 1, baseLength: 4 }),
      b.write("weather", two, { expectedRevision: 1, baseLength: 4 }),
    ]);
    const ok = results.filter((r) => r.status === "fulfilled");
    const failed = results.filter((r) => r.status === "rejected") as PromiseRejectedResult[];
    expect(ok).toHaveLength(1);
    expect(failed).toHaveLength(1);
    expect(failed[0]?.reason).toBeInstanceOf(ConflictError);
    const stored = (await a.read("weather"))?.state.history.at(-1);
    expect([one.history.at(-1), two.history.at(-1)]).toContainEqual(stored);
    // create-only on an entry that exists is a conflict too
    await admin.set(`${prefix}other`, originalEntry(EXAMPLE));
    await expect(a.write("other", EXAMPLE, { expectedRevision: null })).rejects.toThrow(ConflictError);
    expect(await admin.type(`${prefix}other`)).toBe("string");
  });
});
