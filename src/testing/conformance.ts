/**
 * The backend conformance suite: one call registers the vitest tests every
 * {@link StateBackend} must pass — the built-in ones and a user's own.
 *
 * Idea after keyv's `@keyv/test-suite` (an adapter's test file is a few lines
 * calling the shared suite) and LangGraph.js `checkpoint-validation` (an
 * initializer with create/destroy). Every test gets a fresh backend from the
 * factory and uses random keys, so nothing depends on cleanup or test order.
 *
 * Covered: exact round trip of real recorded conversations (both protocols),
 * missing keys, delete twice, listKeys after saves and deletes, invalid keys,
 * unicode/control characters/lone surrogates, a 100,000-message history,
 * 20 concurrent saves, overwrite, deep copies; and, when the backend has the
 * optional capabilities, revisions and compare-and-set (`write`/`read`),
 * delete-then-late-write (no resurrection), O(new messages) appends with
 * `baseLength`, `force`, and streaming reads (`iterHistory`: the history as
 * the stream started while saves append, never a mix when one replaces it).
 *
 * The suite imports no test runner: the caller passes its test functions as
 * `options.test` (see `ConformanceTestApi`; vitest's namespace fits).
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import type { StateBackend } from "../backends/types.js";
import {
  ConflictError,
  InvalidKeyError,
  InvalidOptionError,
  NonJsonValueError,
  StateNotFoundError,
} from "../core/errors.js";
import type { Message, Protocol } from "../core/messages.js";
import { checkOptions, optionKeys } from "../core/options.js";
import type { AgentState } from "../core/state.js";
import { loadSampleConversations } from "./samples.js";
import { makeState } from "./states.js";
import { type ConformanceSuiteOptions, failsWith as failsWithIn, suiteGroup } from "./test-api.js";

/** The keys of {@link BackendConformanceOptions}: any other is an `InvalidOptionError`. */
const SUITE_OPTIONS = optionKeys<BackendConformanceOptions>({
  test: true,
  skip: true,
  destroy: true,
  largeHistory: true,
  validatesKeys: true,
  validatesValues: true,
  samples: true,
});

/**
 * Options of {@link runBackendConformance}: the caller's `test` functions and a `skip` reason
 * ({@link ConformanceSuiteOptions}), and what to expect of the backend.
 */
export interface BackendConformanceOptions<B extends StateBackend = StateBackend> extends ConformanceSuiteOptions {
  /** Called after each test with the backend the factory made (drop a schema, remove a temp dir…). @default calls `backend.close()` when present */
  destroy?: (backend: B) => unknown;
  /** Number of messages of the large-history test. @default 100_000 */
  largeHistory?: number;
  /**
   * Whether the backend itself refuses invalid keys (`InvalidKeyError`, nothing written). Built-in
   * backends do; a custom backend may leave it to the persistence layer, which validates every key
   * before calling any backend. @default true
   */
  validatesKeys?: boolean;
  /**
   * Whether the backend itself refuses values JSON cannot carry (`NonJsonValueError` naming the
   * message index). Built-in backends do; the persistence layer checks too. @default true
   */
  validatesValues?: boolean;
  /** Which recorded conversations to round-trip. @default "all" */
  samples?: "bundled" | "shared" | "all";
}

/** Loads `key` on the raw contract: a missing key may throw `StateNotFoundError` or return `undefined`. */
async function loadOrUndefined(backend: StateBackend, key: string): Promise<AgentState | undefined> {
  try {
    return (await backend.load(key)) ?? undefined;
  } catch (e) {
    if (e instanceof StateNotFoundError) return undefined;
    throw e;
  }
}

const NO_REVISIONS = "the backend has no write/read (revisions)";

function sortedKeys(keys: string[]): string[] {
  return [...keys].sort();
}

function textMessage(protocol: Protocol, i: number, text: string): Message {
  if (protocol === "anthropic") {
    return { role: i % 2 === 0 ? "user" : "assistant", content: [{ type: "text", text }] };
  }
  return { role: i % 2 === 0 ? "user" : "assistant", content: text };
}

/** A synthetic history of `n` messages, deterministic in `seed`. */
function syntheticHistory(n: number, seed = "m"): Message[] {
  const out: Message[] = new Array(n);
  for (let i = 0; i < n; i++) {
    if (i % 7 === 3) {
      out[i] = {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: `call_${seed}_${i}`, type: "function", function: { name: "lookup", arguments: `{"i":${i}}` } },
        ],
      };
    } else if (i % 7 === 4) {
      out[i] = { role: "tool", tool_call_id: `call_${seed}_${i - 1}`, content: `result ${seed} ${i}` };
    } else out[i] = textMessage("openai", i, `${seed} message ${i}`);
  }
  return out;
}

/** Strings that every backend must store byte for byte. */
export const HARD_STRINGS: readonly string[] = [
  "multi\nline\r\nwith CRLF\rand CR",
  "nul \u0000 and bell \u0007 and escape \u001b[31m and DEL \u007f and C1 \u0085",
  "lone high \ud83d end",
  "lone low \ude00 end",
  "reversed pair \ude00\ud83d",
  "emoji 🥟🧑‍🍳👩🏽‍💻 flags 🇯🇵",
  "right-to-left: مرحبا بالعالم עברית \u202e override \u202c",
  "line separators \u2028 \u2029 and BOM \ufeff and zero width \u200b",
  "  leading and trailing spaces\t\t",
  "= # ; [x] [HISTORY] \\n not a newline \\u0000 not a nul",
  "\"quotes\" and \\backslashes\\ and 'single'",
  "",
];

/**
 * Registers the conformance tests of a state backend ({@link StateBackend}), the built-in ones'
 * and a user's own, through the caller's test functions (`options.test`).
 *
 * Call it at the top level of a test file. Each test creates its own backend
 * through `factory` and uses random keys; `options.destroy` (default:
 * `backend.close()`) runs after each test. Tests of an optional capability the
 * backend lacks (`write`/`read`, `iterHistory`) are skipped with that reason.
 *
 * @param name - label of the suite, shown in its title: `backend conformance: <name>`
 * @param factory - returns a fresh, empty backend (sync or async)
 * @param options - `test` (the test functions, required), `skip` reason, `destroy`,
 *   `largeHistory` size (@default 100_000), `validatesKeys` (@default true),
 *   `validatesValues` (@default true), `samples` (@default "all")
 * @example
 * // test/my-backend.test.ts
 * import * as vitest from "vitest";
 * import { runBackendConformance } from "dumplings-ai/testing";
 * import { MyBackend } from "../src/my-backend.js";
 *
 * runBackendConformance("my-backend", () => new MyBackend({ prefix: crypto.randomUUID() }), {
 *   test: vitest,
 *   validatesKeys: false, // the persistence layer validates keys before calling it
 * });
 */
export function runBackendConformance<B extends StateBackend>(
  name: string,
  factory: () => B | Promise<B>,
  options: BackendConformanceOptions<B>,
): void {
  checkOptions("runBackendConformance", options, SUITE_OPTIONS);
  const { describe, it, expect, beforeEach, afterEach } = options.test;
  const failsWith = <E extends Error>(fn: () => unknown, cls: new (...args: never[]) => E) =>
    failsWithIn(expect, fn, cls);
  const largeHistory = options.largeHistory ?? 100_000;
  const validatesKeys = options.validatesKeys ?? true;
  const validatesValues = options.validatesValues ?? true;

  suiteGroup(options, `backend conformance: ${name}`, () => {
    let backend: B;
    const key = (label = "k") => `${label}-${randomUUID()}`;

    beforeEach(async () => {
      backend = await factory();
    });
    afterEach(async () => {
      if (!backend) return;
      if (options.destroy) await options.destroy(backend);
      else await backend.close?.();
    });

    describe("round trip of recorded conversations", () => {
      const conversations = options.skip ? [] : loadSampleConversations({ source: options.samples ?? "all" });
      it("has recorded conversations of both protocols to test with", () => {
        expect(conversations.some((c) => c.protocol === "openai")).toBe(true);
        expect(conversations.some((c) => c.protocol === "anthropic")).toBe(true);
      });
      for (const conv of conversations) {
        it(`${conv.id} (${conv.protocol}, ${conv.messages.length} messages)`, async () => {
          const state = makeState(conv.messages, {
            protocol: conv.protocol,
            name: conv.id,
            currentTaskId: "task-1",
            hooks: ["./hooks.js:audit"],
            fields: { notes: ["a", { b: 1 }], counter: 3 },
            config: { prompt: "You are helpful.\nLine two = #x", modelName: "m" },
          });
          const expected = structuredClone(state);
          const k = key(conv.id.slice(0, 60));
          await backend.save(k, state);
          expect(state).toEqual(expected); // saving does not change the caller's object
          expect(await backend.load(k)).toEqual(expected);
          if (backend.read) expect((await backend.read(k))?.state).toEqual(expected);
          if (backend.iterHistory) {
            const got: Message[] = [];
            for await (const m of backend.iterHistory(k)) got.push(m);
            expect(got).toEqual(expected.history);
          }
        });
      }
    });

    describe("the four-method contract", () => {
      it("a missing key throws StateNotFoundError or returns undefined", async () => {
        const k = key("missing");
        let result: unknown;
        try {
          result = await backend.load(k);
        } catch (e) {
          expect(e).toBeInstanceOf(StateNotFoundError);
          expect((e as StateNotFoundError).key).toBe(k);
          return;
        }
        expect(result).toBeUndefined();
      });

      it("deleting twice returns true then false, and the key is gone", async () => {
        const k = key("del");
        await backend.save(k, makeState(syntheticHistory(5)));
        expect(await backend.delete(k)).toBe(true);
        expect(await backend.delete(k)).toBe(false);
        expect(await loadOrUndefined(backend, k)).toBeUndefined();
        expect(await backend.listKeys()).not.toContain(k);
      });

      it("deleting a key that never existed returns false", async () => {
        expect(await backend.delete(key("never"))).toBe(false);
      });

      it("listKeys reflects saves and deletes", async () => {
        const keys = [key("a"), key("b"), key("c"), key("d")];
        for (const k of keys) await backend.save(k, makeState(syntheticHistory(2, k)));
        expect(sortedKeys(await backend.listKeys())).toEqual(sortedKeys(keys));
        await backend.delete(keys[1] as string);
        await backend.delete(keys[3] as string);
        expect(sortedKeys(await backend.listKeys())).toEqual(sortedKeys([keys[0] as string, keys[2] as string]));
        await backend.save(keys[1] as string, makeState([]));
        expect(sortedKeys(await backend.listKeys())).toEqual(sortedKeys([keys[0], keys[1], keys[2]] as string[]));
      });

      it("listKeys of an empty store is empty", async () => {
        expect(await backend.listKeys()).toEqual([]);
      });

      it("overwrite replaces the whole state, also with a shorter history", async () => {
        const k = key("over");
        await backend.save(k, makeState(syntheticHistory(50, "first"), { name: "first" }));
        const second = makeState(syntheticHistory(3, "second"), { name: "second", fields: { x: 1 } });
        await backend.save(k, second);
        expect(await backend.load(k)).toEqual(second);
        const empty = makeState([], { name: "third" });
        await backend.save(k, empty);
        expect(await backend.load(k)).toEqual(empty);
        expect(await backend.listKeys()).toEqual([k]);
      });

      it("returns deep copies: mutating a saved or loaded state changes nothing stored", async () => {
        const k = key("copy");
        const state = makeState(syntheticHistory(4), { fields: { list: [1, 2] } });
        const expected = structuredClone(state);
        await backend.save(k, state);
        (state.history[0] as { content: string }).content = "mutated after save";
        state.state.fields.list = [];
        const loaded = (await backend.load(k)) as AgentState;
        expect(loaded).toEqual(expected);
        (loaded.history[1] as { content: string }).content = "mutated after load";
        loaded.history.push({ role: "user", content: "pushed" });
        loaded.meta.agentName = "changed";
        expect(await backend.load(k)).toEqual(expected);
      });

      it("stores unicode, control characters, lone surrogates, emoji and RTL text exactly", async () => {
        const k = key("unicode-🥟");
        const history: Message[] = HARD_STRINGS.map((s, i) => textMessage("openai", i, s));
        history.push({
          role: "assistant",
          content: null,
          tool_calls: [{ id: "c\u0000", type: "function", function: { name: "f", arguments: HARD_STRINGS.join("|") } }],
        });
        history.push({
          role: "tool",
          tool_call_id: "c\u0000",
          content: "\ud800",
          [`extra \u0001 field ${"\ud83d"}`]: 1,
        });
        const state = makeState(history, {
          name: HARD_STRINGS[5] as string,
          currentTaskId: HARD_STRINGS[1] as string,
          hooks: [...HARD_STRINGS],
          fields: Object.fromEntries(HARD_STRINGS.map((s, i) => [`${s}#${i}`, s])),
          config: { prompt: HARD_STRINGS.join("\n"), modelName: HARD_STRINGS[6] as string },
        });
        const expected = structuredClone(state);
        await backend.save(k, state);
        const loaded = await backend.load(k);
        expect(loaded).toEqual(expected);
        // toEqual compares strings with ===, so every code unit (lone surrogates included) matched.
        expect((loaded as AgentState).history[2]).toEqual({ role: "user", content: "lone high \ud83d end" });
      });

      it('keeps keys named "__proto__", "constructor" and "prototype" as data, in fields and messages, at any depth', async () => {
        const k = key("proto");
        // JSON.parse makes "__proto__" an own data property (an object literal would set the prototype).
        const value = () =>
          JSON.parse('{"__proto__":{"polluted":true},"constructor":1,"prototype":[{"__proto__":null}],"a":2}');
        const message = {
          ...JSON.parse('{"role":"user","content":"hi","__proto__":{"y":1}}'),
          meta: value(),
        } as Message;
        const call = JSON.parse(
          '{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","__proto__":0,"function":{"name":"f","arguments":"{}","__proto__":[]}}]}',
        ) as Message;
        const state = makeState([message, call], { fields: { notes: value() } });
        (state.state.fields as Record<string, unknown>) = Object.assign(value(), state.state.fields);
        const text = JSON.stringify({ fields: state.state.fields, history: state.history });
        await backend.save(k, state);
        const loaded = (await backend.load(k)) as AgentState;
        expect(JSON.stringify({ fields: loaded.state.fields, history: loaded.history })).toBe(text);
        expect(Object.getPrototypeOf(loaded.state.fields)).toBe(Object.prototype);
        expect(({} as Record<string, unknown>).polluted).toBeUndefined();
        if (backend.iterHistory) {
          const streamed: Message[] = [];
          for await (const m of backend.iterHistory(k)) streamed.push(m);
          expect(JSON.stringify(streamed)).toBe(JSON.stringify(state.history));
        }
        if (backend.readHeader) {
          const header = await backend.readHeader(k);
          expect(JSON.stringify(header?.header.state.fields)).toBe(JSON.stringify(state.state.fields));
        }
      });

      it(`round-trips a ${largeHistory}-message history`, async () => {
        const k = key("large");
        const state = makeState(syntheticHistory(largeHistory, "big"));
        await backend.save(k, state);
        const loaded = (await backend.load(k)) as AgentState;
        expect(loaded.history.length).toBe(largeHistory);
        expect(loaded.meta).toEqual(state.meta);
        expect(loaded.history).toEqual(state.history);
        if (backend.iterHistory) {
          let i = 0;
          for await (const m of backend.iterHistory(k)) {
            if (i % 997 === 0 || i === largeHistory - 1) expect(m).toEqual(state.history[i]);
            i++;
          }
          expect(i).toBe(largeHistory);
        }
      });

      it("20 concurrent saves of distinct keys all land", async () => {
        const keys = Array.from({ length: 20 }, (_, i) => key(`conc${i}`));
        const states = keys.map((k, i) => makeState(syntheticHistory(20 + i, k), { name: `agent-${i}` }));
        await Promise.all(keys.map(async (k, i) => backend.save(k, states[i] as AgentState)));
        expect(sortedKeys(await backend.listKeys())).toEqual(sortedKeys(keys));
        const loaded = await Promise.all(keys.map(async (k) => backend.load(k)));
        expect(loaded).toEqual(states);
      });

      it("refuses invalid keys with InvalidKeyError and writes nothing", async (ctx) => {
        if (!validatesKeys)
          return ctx.skip("validatesKeys: false (the backend leaves key checks to the persistence layer)");
        const bad = [
          "",
          ".",
          "..",
          ".hidden",
          "a/b",
          "../escape",
          "a\\b",
          "nul\u0000",
          "line\nbreak",
          "tab\t",
          "x".repeat(201),
          "lone \ud800",
        ];
        const good = key("good");
        await backend.save(good, makeState([]));
        for (const k of bad) {
          await failsWith(() => backend.save(k, makeState(syntheticHistory(2))), InvalidKeyError);
          await failsWith(() => backend.load(k), InvalidKeyError);
          await failsWith(() => backend.delete(k), InvalidKeyError);
          if (backend.write) await failsWith(() => backend.write?.(k, makeState([])), InvalidKeyError);
          if (backend.read) await failsWith(() => backend.read?.(k), InvalidKeyError);
        }
        expect(await backend.listKeys()).toEqual([good]);
      });

      it("refuses a history value JSON cannot carry, naming the message, and writes nothing", async (ctx) => {
        if (!validatesValues) {
          return ctx.skip("validatesValues: false (the backend leaves value checks to the persistence layer)");
        }
        const k = key("nonjson");
        const before = makeState(syntheticHistory(3));
        await backend.save(k, before);
        const bad = makeState(syntheticHistory(5));
        (bad.history[4] as unknown as Record<string, unknown>).extra = { n: 10n };
        const e = await failsWith(() => backend.save(k, bad), NonJsonValueError);
        expect(e.messageIndex).toBe(4);
        expect(e.path).toContain("history[4]");
        const nan = makeState(syntheticHistory(2));
        nan.state.fields.x = Number.NaN;
        await failsWith(() => backend.save(key("nan"), nan), NonJsonValueError);
        expect(await backend.load(k)).toEqual(before);
        expect(await backend.listKeys()).toEqual([k]);
      });
    });

    describe("revisions and compare-and-set (write/read)", () => {
      const need = (): NonNullable<StateBackend["write"]> & object => {
        if (!backend.write || !backend.read) throw new Error("unreachable");
        return backend.write.bind(backend);
      };
      let capable = true;
      beforeEach(() => {
        capable = typeof backend.write === "function" && typeof backend.read === "function";
      });

      it("read of a missing key is undefined", async (ctx) => {
        if (!capable) return ctx.skip(NO_REVISIONS);
        expect(await backend.read?.(key("missing"))).toBeUndefined();
      });

      it("revisions start at a positive integer and increase by one per write and save", async (ctx) => {
        if (!capable) return ctx.skip(NO_REVISIONS);
        const write = need();
        const k = key("rev");
        const r1 = await write(k, makeState(syntheticHistory(2)), { expectedRevision: null });
        expect(Number.isInteger(r1.revision) && r1.revision >= 1).toBe(true);
        expect(r1).toMatchObject({ written: 2 });
        const r2 = await write(k, makeState(syntheticHistory(3)), { expectedRevision: r1.revision });
        expect(r2.revision).toBe(r1.revision + 1);
        await backend.save(k, makeState(syntheticHistory(4)));
        const read = await backend.read?.(k);
        expect(read?.revision).toBe(r1.revision + 2);
        expect(read?.state.history).toEqual(syntheticHistory(4));
      });

      it("a first write in a fresh store gets revision 1", async (ctx) => {
        if (!capable) return ctx.skip(NO_REVISIONS);
        const r = await need()(key("first"), makeState([]));
        expect(r.revision).toBe(1);
      });

      it("a stale expectedRevision is a ConflictError with both revisions, and nothing is written", async (ctx) => {
        if (!capable) return ctx.skip(NO_REVISIONS);
        const write = need();
        const k = key("cas");
        const first = makeState(syntheticHistory(3));
        const r1 = await write(k, first);
        await write(k, makeState(syntheticHistory(4)), { expectedRevision: r1.revision });
        const stored = await backend.read?.(k);
        const e = await failsWith(
          () => write(k, makeState(syntheticHistory(9, "loser")), { expectedRevision: r1.revision, baseLength: 3 }),
          ConflictError,
        );
        expect(e.expectedRevision).toBe(r1.revision);
        expect(e.actualRevision).toBe(r1.revision + 1);
        expect(e.key).toBe(k);
        expect(e.message).toContain(String(r1.revision + 1));
        expect(await backend.read?.(k)).toEqual(stored);
      });

      it("expectedRevision null on an existing key conflicts", async (ctx) => {
        if (!capable) return ctx.skip(NO_REVISIONS);
        const write = need();
        const k = key("null");
        const r1 = await write(k, makeState(syntheticHistory(1)));
        const e = await failsWith(() => write(k, makeState([]), { expectedRevision: null }), ConflictError);
        expect(e.expectedRevision).toBeNull();
        expect(e.actualRevision).toBe(r1.revision);
        expect((await backend.read?.(k))?.state.history.length).toBe(1);
      });

      it("an expected revision on a missing key conflicts and creates nothing", async (ctx) => {
        if (!capable) return ctx.skip(NO_REVISIONS);
        const k = key("ghost");
        const e = await failsWith(() => need()(k, makeState([]), { expectedRevision: 3 }), ConflictError);
        expect(e.actualRevision).toBeNull();
        expect(await backend.listKeys()).not.toContain(k);
      });

      it("delete then a late write with a stale revision does not resurrect the key (pb-26)", async (ctx) => {
        if (!capable) return ctx.skip(NO_REVISIONS);
        const write = need();
        const k = key("t26");
        const r1 = await write(k, makeState([{ role: "user", content: "delete me later" }]), {
          expectedRevision: null,
        });
        expect(await backend.delete(k)).toBe(true);
        const late = makeState([
          { role: "user", content: "delete me later" },
          { role: "assistant", content: "late" },
        ]);
        const e1 = await failsWith(
          () => write(k, late, { expectedRevision: r1.revision, baseLength: 1 }),
          ConflictError,
        );
        expect(e1.actualRevision).toBeNull();
        await failsWith(() => write(k, late, { expectedRevision: r1.revision }), ConflictError);
        expect(await loadOrUndefined(backend, k)).toBeUndefined();
        expect(await backend.read?.(k)).toBeUndefined();
        expect(await backend.listKeys()).not.toContain(k);
        expect(await backend.delete(k)).toBe(false);
        // Re-creating on purpose works, and the stale writer still cannot overwrite the new session: the
        // new session starts above every revision the deleted one had (else the stale revision matches it).
        const again = await write(k, makeState([{ role: "user", content: "new" }]), { expectedRevision: null });
        expect(again.revision).toBeGreaterThan(r1.revision);
        await failsWith(() => write(k, late, { expectedRevision: r1.revision }), ConflictError);
        await failsWith(() => write(k, late, { expectedRevision: r1.revision, baseLength: 1 }), ConflictError);
        expect((await backend.read?.(k))?.state.history).toEqual([{ role: "user", content: "new" }]);
      });

      it("a session deleted after several saves restarts above all of them, through delete, force and a plain write", async (ctx) => {
        if (!capable) return ctx.skip(NO_REVISIONS);
        const write = need();
        const k = key("aba");
        let rev = (await write(k, makeState([{ role: "user", content: "v1" }]), { expectedRevision: null })).revision;
        const held: number[] = [rev];
        for (let i = 2; i <= 4; i++) {
          rev = (await write(k, makeState([{ role: "user", content: `v${i}` }]), { expectedRevision: rev })).revision;
          held.push(rev);
        }
        expect(await backend.delete(k)).toBe(true);
        // Each way of creating the key again starts above the deleted session's last revision.
        const created = await write(k, makeState([{ role: "user", content: "new" }]), { force: true });
        expect(created.revision).toBeGreaterThan(rev);
        for (const stale of held) {
          await failsWith(
            () => write(k, makeState([{ role: "user", content: "stale" }]), { expectedRevision: stale }),
            ConflictError,
          );
        }
        expect(await backend.delete(k)).toBe(true);
        const plain = await write(k, makeState([{ role: "user", content: "plain" }]));
        expect(plain.revision).toBeGreaterThan(created.revision);
        expect((await backend.read?.(k))?.state.history).toEqual([{ role: "user", content: "plain" }]);
      });

      it("an append with baseLength equals a full write and writes only the new messages", async (ctx) => {
        if (!capable) return ctx.skip(NO_REVISIONS);
        const write = need();
        const full = syntheticHistory(40, "app");
        const k = key("append");
        let r = await write(k, makeState(full.slice(0, 10), { name: "a" }), { expectedRevision: null });
        for (const [from, to] of [
          [10, 11],
          [11, 25],
          [25, 25],
          [25, 40],
        ] as const) {
          const state = makeState(full.slice(0, to), { name: `a${to}`, fields: { at: to } });
          const res = await write(k, state, { expectedRevision: r.revision, baseLength: from });
          expect(res.revision).toBe(r.revision + 1);
          if (!res.rewritten) expect(res.written).toBe(to - from);
          r = res;
          const read = await backend.read?.(k);
          expect(read?.state).toEqual(state);
          expect(read?.revision).toBe(res.revision);
        }
        const other = key("fullwrite");
        await write(other, makeState(full));
        expect((await backend.read?.(k))?.state.history).toEqual((await backend.read?.(other))?.state.history);
        expect((await backend.load(k))?.history).toEqual(full);
      });

      it("a history edited in the middle is stored exactly (truncate after the common prefix)", async (ctx) => {
        if (!capable) return ctx.skip(NO_REVISIONS);
        const write = need();
        const k = key("edit");
        const h = syntheticHistory(6, "e");
        const r1 = await write(k, makeState(h));
        const edited = [
          h[0],
          { role: "user", content: "edited" },
          ...h.slice(2),
          { role: "user", content: "new" },
        ] as Message[];
        const r2 = await write(k, makeState(edited), { expectedRevision: r1.revision, baseLength: 1 });
        expect((await backend.read?.(k))?.state.history).toEqual(edited);
        const shorter = edited.slice(0, 2);
        await write(k, makeState(shorter), { expectedRevision: r2.revision, baseLength: 2 });
        expect((await backend.read?.(k))?.state.history).toEqual(shorter);
      });

      it("a mismatching baseLength never yields a merged history (full rewrite or conflict)", async (ctx) => {
        if (!capable) return ctx.skip(NO_REVISIONS);
        const write = need();
        const k = key("mismatch");
        const h = syntheticHistory(5, "s");
        let rev = (await write(k, makeState(h))).revision;
        const cases: [Message[], number][] = [
          [[{ role: "user", content: "other" }, ...syntheticHistory(9, "t").slice(1)], 5], // boundary message differs
          [syntheticHistory(8, "s"), 12], // claims more is stored than there is
          [syntheticHistory(3, "s"), 6], // baseLength beyond the new history
        ];
        for (const [history, baseLength] of cases) {
          const before = await backend.read?.(k);
          const state = makeState(history);
          try {
            rev = (await write(k, state, { expectedRevision: rev, baseLength })).revision;
            expect((await backend.read?.(k))?.state.history).toEqual(history);
          } catch (e) {
            expect(e).toBeInstanceOf(ConflictError);
            expect(await backend.read?.(k)).toEqual(before);
          }
        }
      });

      it("force overwrites whatever revision is stored", async (ctx) => {
        if (!capable) return ctx.skip(NO_REVISIONS);
        const write = need();
        const k = key("force");
        const r1 = await write(k, makeState(syntheticHistory(3)));
        await write(k, makeState(syntheticHistory(4)), { expectedRevision: r1.revision });
        const forced = makeState(syntheticHistory(2, "forced"));
        const r3 = await write(k, forced, { expectedRevision: r1.revision, baseLength: 3, force: true });
        expect(r3.revision).toBe(r1.revision + 2);
        expect((await backend.read?.(k))?.state).toEqual(forced);
      });

      it("concurrent writers with the same expected revision: exactly one wins, the others conflict", async (ctx) => {
        if (!capable) return ctx.skip(NO_REVISIONS);
        const write = need();
        const k = key("race");
        const base = syntheticHistory(2, "r");
        const r1 = await write(k, makeState(base));
        const outcomes = await Promise.allSettled(
          Array.from({ length: 8 }, (_, i) =>
            write(k, makeState([...base, { role: "user", content: `writer ${i}` }]), {
              expectedRevision: r1.revision,
              baseLength: 2,
            }),
          ),
        );
        const won = outcomes.filter((o) => o.status === "fulfilled");
        expect(won).toHaveLength(1);
        for (const o of outcomes) if (o.status === "rejected") expect(o.reason).toBeInstanceOf(ConflictError);
        const winner = outcomes.findIndex((o) => o.status === "fulfilled");
        expect((await backend.read?.(k))?.state.history).toEqual([
          ...base,
          { role: "user", content: `writer ${winner}` },
        ]);
      });
    });

    describe("streaming reads (iterHistory)", () => {
      it("yields exactly the stored history, in order", async (ctx) => {
        if (!backend.iterHistory) return ctx.skip("the backend has no iterHistory");
        const k = key("iter");
        const h = syntheticHistory(1234, "it");
        await backend.save(k, makeState(h));
        const got: Message[] = [];
        for await (const m of backend.iterHistory(k)) got.push(m);
        expect(got).toEqual(h);
        const empty = key("iter-empty");
        await backend.save(empty, makeState([]));
        for await (const _ of backend.iterHistory(empty)) throw new Error("an empty history yielded a message");
      });

      it("with { revision } streams that revision, and refuses another one before any message", async (ctx) => {
        if (!backend.iterHistory || !backend.write || !backend.readHeader) {
          return ctx.skip("the backend has no iterHistory, write or readHeader");
        }
        const iterHistory = backend.iterHistory.bind(backend);
        const k = key("iter-rev");
        const h = syntheticHistory(700, "rv");
        const first = await backend.write(k, makeState(h.slice(0, 600)), { expectedRevision: null });
        const header = await backend.readHeader(k);
        expect(header?.revision).toBe(first.revision);
        const pinned: Message[] = [];
        for await (const m of iterHistory(k, { revision: first.revision })) pinned.push(m);
        expect(pinned).toEqual(h.slice(0, 600));
        // A save lands between the header and the history: the pinned stream refuses to start.
        const second = await backend.write(k, makeState(h), {
          expectedRevision: first.revision,
          baseLength: 600,
        });
        let yielded = 0;
        const e = await failsWith(async () => {
          for await (const _ of iterHistory(k, { revision: first.revision })) yielded++;
        }, ConflictError);
        expect(yielded).toBe(0);
        expect(e).toMatchObject({ expectedRevision: first.revision, actualRevision: second.revision });
        const now: Message[] = [];
        for await (const m of iterHistory(k, { revision: second.revision })) now.push(m);
        expect(now).toEqual(h);
        // A misspelt or meaningless option is refused, never ignored (an unpinned read would be silently wrong).
        for (const bad of [{ revison: second.revision }, { revision: 0 }, { revision: 1.5 }]) {
          await failsWith(async () => {
            for await (const _ of iterHistory(k, bad as never)) {
              // nothing
            }
          }, InvalidOptionError);
        }
      });

      it("a stream is the history as it started: saves appending meanwhile change nothing", async (ctx) => {
        if (!backend.iterHistory || !backend.write) return ctx.skip("the backend has no iterHistory or write");
        const write = backend.write.bind(backend);
        const k = key("iter-live");
        // Longer than one page of every built-in paged store (500, 512 and 1000 messages).
        const h = syntheticHistory(2550, "lv");
        let stored = 2400;
        let revision = (await write(k, makeState(h.slice(0, stored)), { expectedRevision: null })).revision;
        const got: Message[] = [];
        // A live agent saves (appends) before the second message, and again past the first and second pages.
        for await (const m of backend.iterHistory(k)) {
          got.push(m);
          if (got.length === 1 || got.length === 1100 || got.length === 2100) {
            const written = await write(k, makeState(h.slice(0, stored + 50)), {
              expectedRevision: revision,
              baseLength: stored,
            });
            revision = written.revision;
            stored += 50;
          }
        }
        expect(got.length).toBe(2400);
        expect(got).toEqual(h.slice(0, 2400));
        const now: Message[] = [];
        for await (const m of backend.iterHistory(k)) now.push(m);
        expect(now).toEqual(h);
      });

      it("a save that replaces the history mid-stream, or a delete, is not seen or refused, never mixed in", async (ctx) => {
        if (!backend.iterHistory || !backend.write) return ctx.skip("the backend has no iterHistory or write");
        const write = backend.write.bind(backend);
        const old = syntheticHistory(2400, "old");
        const other = syntheticHistory(2500, "new");
        const changes: [string, (k: string, revision: number) => Promise<unknown>][] = [
          ["a rewrite", (k, revision) => write(k, makeState(other), { expectedRevision: revision })],
          [
            "a truncation and appends",
            (k, revision) =>
              write(k, makeState([...old.slice(0, 10), ...other.slice(10)]), {
                expectedRevision: revision,
                baseLength: 10,
              }),
          ],
          ["a delete", (k) => Promise.resolve(backend.delete(k))],
          [
            "a delete and a new save under the same key",
            async (k) => {
              await backend.delete(k);
              await write(k, makeState(other), { expectedRevision: null });
            },
          ],
        ];
        for (const [label, change] of changes) {
          const k = key("iter-replaced");
          const { revision } = await write(k, makeState(old), { expectedRevision: null });
          const got: Message[] = [];
          let error: unknown;
          try {
            for await (const m of backend.iterHistory(k)) {
              got.push(m);
              if (got.length === 1) await change(k, revision);
            }
          } catch (e) {
            error = e;
          }
          // Either the whole history as the stream started, or a ConflictError after a part of it.
          if (error === undefined) expect(got, label).toEqual(old);
          else {
            expect(error, label).toBeInstanceOf(ConflictError);
            expect(got, label).toEqual(old.slice(0, got.length));
          }
        }
      });

      it("readHeader with { clipAt } returns each long value whole or clipped and listed, never other data", async (ctx) => {
        if (!backend.readHeader) return ctx.skip("the backend has no readHeader");
        const readHeader = backend.readHeader.bind(backend);
        const k = key("clip");
        // Long enough to be read in pieces by a streaming store (> 64 KB on one line), with escapes and non-ASCII.
        const prompt = `${'Réponds brièvement "cite" l\'ordre\n😀 '.repeat(4000)}end`;
        const fields = { notes: { text: "x".repeat(70_000), n: 1 }, small: [1, 2] };
        const state = makeState(syntheticHistory(3, "clip"), {
          config: { prompt, modelName: "m".repeat(100) },
          currentTaskId: `task-${"t".repeat(80_000)}`,
          fields,
        });
        await backend.save(k, state);
        const whole = await readHeader(k);
        expect(whole?.clipped ?? []).toEqual([]);
        expect(whole?.header.config.prompt).toBe(prompt);
        const clipAt = 50;
        const r = await readHeader(k, { clipAt });
        expect(r?.revision).toBe(whole?.revision);
        expect(r?.header.meta).toEqual(whole?.header.meta);
        const values: Record<string, unknown> = {
          "config.prompt": prompt,
          "config.modelName": state.config.modelName,
          "state.currentTaskId": state.state.currentTaskId,
          "state.fields.notes": fields.notes,
        };
        const at = (path: string): unknown => {
          const [part, name, field] = path.split(".") as [string, string, string | undefined];
          const section = ((r?.header ?? {}) as unknown as Record<string, Record<string, unknown>>)[part] ?? {};
          return field === undefined ? section[name] : (section[name] as Record<string, unknown>)[field];
        };
        const clipped = new Map((r?.clipped ?? []).map((c) => [c.path, c]));
        for (const [path, value] of Object.entries(values)) {
          const c = clipped.get(path);
          if (c === undefined) {
            expect(at(path), path).toEqual(value);
            continue;
          }
          const text = typeof value === "string" ? value : JSON.stringify(value);
          expect(c, path).toEqual({
            path,
            kind: typeof value === "string" ? "string" : "json",
            preview: text.slice(0, clipAt),
            length: text.length,
          });
          expect(at(path), path).toEqual(typeof value === "string" ? text.slice(0, clipAt) : null);
        }
        for (const c of clipped.keys()) expect(Object.keys(values), `clipped ${c}`).toContain(c);
        expect(r?.header.state.fields.small).toEqual([1, 2]);
        for (const bad of [{ clipAt: -1 }, { clipAt: 1.5 }, { clipat: 10 }]) {
          await failsWith(() => readHeader(k, bad as never), InvalidOptionError);
        }
      });

      it("throws StateNotFoundError for a missing key", async (ctx) => {
        if (!backend.iterHistory) return ctx.skip("the backend has no iterHistory");
        const iterHistory = backend.iterHistory.bind(backend);
        await failsWith(async () => {
          for await (const _ of iterHistory(key("nothing"))) {
            // nothing
          }
        }, StateNotFoundError);
      });
    });
  });
}
