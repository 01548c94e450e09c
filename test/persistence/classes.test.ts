/**
 * Class identity (`module:export`), resolution order (registry → allowed
 * import → agentList → AgentNotFoundError), subclass persistent fields, and
 * hook re-binding. Includes case pb-10 (a missing class is a typed error,
 * never a null or partial agent).
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { encodeState } from "../../src/core/codec/encode.js";
import {
  AgentNotFoundError,
  AnthropicAgent,
  activateTemplate,
  agentList,
  BaseAgent,
  configure,
  defineTemplate,
  exportStateString,
  loadState,
  loadStateString,
  MemoryBackend,
  type PersistenceWarning,
  RegistrationError,
  registerAgentClass,
  registerHookFunction,
  saveState,
} from "../../src/index.js";
import { makeState } from "../../src/testing/states.js";
import { auditHook, calls } from "../fixtures/classes/hooks.js";
import { CartAgent, DeepNotesAgent, NotesAgent } from "../fixtures/classes/notes-agent.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-classes-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
afterEach(() => {
  agentList.clear();
  configure({ allowImports: [] });
});

const FIXTURES = "./test/fixtures/classes";
const backend = new MemoryBackend();

describe("class identity", () => {
  it("built-in classes save as dumplings-ai:BaseAgent and dumplings-ai:AnthropicAgent", () => {
    expect(new BaseAgent().toState().meta.class).toBe("dumplings-ai:BaseAgent");
    expect(new AnthropicAgent().toState().meta.class).toBe("dumplings-ai:AnthropicAgent");
    expect(new AnthropicAgent().toState().meta.protocol).toBe("anthropic");
  });

  it("a registered subclass saves as its path relative to its package root", () => {
    expect(new NotesAgent().toState().meta.class).toBe(`${FIXTURES}/notes-agent.ts:NotesAgent`);
  });

  it("names a class and a hook the same from any working directory, and loads a session saved from elsewhere", async () => {
    // One script, run by processes started from three directories (a service manager's "/", a temp dir, the project).
    const root = path.resolve(import.meta.dirname, "..", "..");
    const dir = mkdtempSync(path.join(tmp, "cwd-"));
    const script = path.join(dir, "worker.mts");
    writeFileSync(
      script,
      `import { FileBackend, loadState } from ${JSON.stringify(pathToFileURL(path.join(root, "src/index.ts")).href)};
import { NotesAgent } from ${JSON.stringify(pathToFileURL(path.join(root, "test/fixtures/classes/notes-agent.ts")).href)};
import { auditHook } from ${JSON.stringify(pathToFileURL(path.join(root, "test/fixtures/classes/hooks.ts")).href)};
const backend = new FileBackend({ baseDir: ${JSON.stringify(dir)} });
const [mode, key] = process.argv.slice(2);
if (mode === "save") {
  const a = new NotesAgent({ name: key });
  a.notes.push(process.cwd());
  a.registerToolHook(auditHook);
  const r = await a.saveState(key, { backend });
  const s = a.toState();
  console.log(JSON.stringify({ cls: s.meta.class, hooks: s.state.hooks, revision: r.revision }));
} else {
  const warnings = [];
  const b = await loadState(key, { backend, onWarning: (w) => warnings.push(w.code) });
  console.log(JSON.stringify({ cls: b.constructor.name, notes: b.notes, hooks: b.toState().state.hooks, warnings }));
}
`,
    );
    const run = (cwd: string, ...args: string[]) =>
      JSON.parse(
        execFileSync(process.execPath, ["--import", import.meta.resolve("tsx"), script, ...args], {
          cwd,
          encoding: "utf8",
          env: { ...process.env, DUMPLINGS_PERSISTENCE_BACKEND: "" },
        }),
      );
    const dirs = ["/", tmpdir(), root];
    const saved = dirs.map((cwd, i) => run(cwd, "save", `s${i}`));
    for (const s of saved) {
      expect(s.cls).toBe(`${FIXTURES}/notes-agent.ts:NotesAgent`);
      expect(s.hooks).toEqual([`${FIXTURES}/hooks.ts:auditHook`]);
    }
    // Each session loads, with its hook, in a process started from another directory.
    for (let i = 0; i < dirs.length; i++) {
      const loaded = run(dirs[(i + 1) % dirs.length]!, "load", `s${i}`);
      expect(loaded).toEqual({
        cls: "NotesAgent",
        notes: [dirs[i]],
        hooks: [`${FIXTURES}/hooks.ts:auditHook`],
        warnings: [],
      });
    }
  }, 60_000);

  it("a session saved by an earlier build (its class and hook named relative to the working directory) still loads from that directory", async () => {
    // What an earlier build wrote when run from test/: paths relative to that working directory.
    const state = new NotesAgent({ name: "legacy" }).toState();
    state.meta.class = "./fixtures/classes/notes-agent.ts:NotesAgent";
    state.state.hooks = ["./fixtures/classes/hooks.ts:auditHook"];
    const root = path.resolve(import.meta.dirname, "..", "..");
    const dir = mkdtempSync(path.join(tmp, "legacy-"));
    writeFileSync(path.join(dir, "legacy.duas"), encodeState(state));
    const script = path.join(dir, "load.mts");
    writeFileSync(
      script,
      `import { FileBackend, loadState } from ${JSON.stringify(pathToFileURL(path.join(root, "src/index.ts")).href)};
import ${JSON.stringify(pathToFileURL(path.join(root, "test/fixtures/classes/notes-agent.ts")).href)};
import ${JSON.stringify(pathToFileURL(path.join(root, "test/fixtures/classes/hooks.ts")).href)};
const warnings = [];
const b = await loadState("legacy", { backend: new FileBackend({ baseDir: ${JSON.stringify(dir)} }), onWarning: (w) => warnings.push(w.code) });
const s = b.toState();
console.log(JSON.stringify({ cls: b.constructor.name, saved: s.meta.class, hooks: s.state.hooks, warnings }));
`,
    );
    const out = JSON.parse(
      execFileSync(process.execPath, ["--import", import.meta.resolve("tsx"), script], {
        cwd: path.join(root, "test"),
        encoding: "utf8",
        env: { ...process.env, DUMPLINGS_PERSISTENCE_BACKEND: "" },
      }),
    );
    // It loads under the name it was saved with; its next save names it by the package root.
    expect(out).toEqual({
      cls: "NotesAgent",
      saved: `${FIXTURES}/notes-agent.ts:NotesAgent`,
      hooks: [`${FIXTURES}/hooks.ts:auditHook`],
      warnings: [],
    });
  }, 60_000);

  it("saving an unregistered subclass is refused up front (it could never be loaded back)", async () => {
    class Unregistered extends BaseAgent {}
    const e = await saveState(new Unregistered(), "u", { backend }).catch((x) => x);
    expect(e).toBeInstanceOf(RegistrationError);
    expect(e.message).toContain("registerAgentClass(Unregistered, import.meta.url)");
    expect(await backend.listKeys()).not.toContain("u");
  });

  it("refuses a name taken by another class unless replace is given, and bad export names", () => {
    class A extends BaseAgent {}
    class B extends BaseAgent {}
    registerAgentClass(A, "my-pkg", "Thing");
    expect(registerAgentClass(A, "my-pkg", "Thing")).toBe("my-pkg:Thing"); // idempotent
    expect(() => registerAgentClass(B, "my-pkg", "Thing")).toThrow(RegistrationError);
    expect(registerAgentClass(B, "my-pkg", "Thing", { replace: true })).toBe("my-pkg:Thing");
    expect(() => registerAgentClass(A, "my-pkg", "not an identifier")).toThrow(RegistrationError);
    expect(() => registerAgentClass(A, "no spaces allowed here")).toThrow(RegistrationError);
    expect(() => registerAgentClass({} as never, "my-pkg")).toThrow(RegistrationError);
  });
});

describe("subclass persistent fields", () => {
  it("declared fields are saved in [STATE] and restored; other properties take their defaults", async () => {
    const a = new NotesAgent({ name: "notes" });
    a.notes.push("buy milk", "multi\nline = # [x]");
    a.counter = 3;
    a.scratch = "changed";
    await a.saveState("notes", { backend });
    expect(exportStateString(a)).toContain('field.notes = ["buy milk","multi\\nline = # [x]"]');
    const b = await NotesAgent.loadState("notes", { backend });
    expect(b).toBeInstanceOf(NotesAgent);
    expect(b.notes).toEqual(["buy milk", "multi\nline = # [x]"]);
    expect(b.counter).toBe(3);
    expect(b.scratch).toBe("default");
  });

  it("a subclass of a subclass persists its own and its ancestors' fields", async () => {
    const a = new DeepNotesAgent();
    a.notes = ["n"];
    a.level = 9;
    const b = await loadStateString(exportStateString(a));
    expect(b).toBeInstanceOf(DeepNotesAgent);
    expect((b as DeepNotesAgent).notes).toEqual(["n"]);
    expect((b as DeepNotesAgent).level).toBe(9);
  });

  it("a zod persistentSchema encodes on save and decodes on load: a Date comes back as a Date (pb-10)", async () => {
    const a = new CartAgent();
    a.cart = { items: [{ sku: "A-1", qty: 2 }] };
    a.createdAt = new Date("2025-01-31T23:59:59.999Z");
    await a.saveState("t10", { backend });
    const b = (await loadState("t10", { backend })) as CartAgent;
    expect(b.cart).toEqual({ items: [{ sku: "A-1", qty: 2 }] });
    expect(b.createdAt).toBeInstanceOf(Date);
    expect(b.createdAt.getTime()).toBe(Date.parse("2025-01-31T23:59:59.999Z"));
  });

  it("a stored field that fails the schema fails the load with its path, never a null field (pb-10)", async () => {
    const state = makeState([], {
      className: `${FIXTURES}/notes-agent.ts:CartAgent`,
      fields: { cart: null, createdAt: "2025-01-31T23:59:59.999Z" },
    });
    const e = await loadStateString(encodeState(state)).catch((x) => x);
    expect(e).toMatchObject({ code: "INVALID_STATE" });
    expect(e.path).toContain("state.fields.cart");
  });

  it("a non-JSON field value is refused at save time, naming the field", async () => {
    const a = new NotesAgent();
    a.notes = [1n as unknown as string];
    await expect(a.saveState("bad-field", { backend })).rejects.toMatchObject({
      code: "NON_JSON_VALUE",
      path: "state.fields.notes[0]",
    });
  });

  it("saved fields the class does not declare are kept and saved again, never dropped (pb-04 kind)", async () => {
    const state = makeState([], {
      className: `${FIXTURES}/notes-agent.ts:NotesAgent`,
      fields: { notes: ["x"], fromNewerVersion: { providerData: { "x-vendor-extra": [1, 2, 3] } } },
    });
    const a = (await loadStateString(encodeState(state))) as NotesAgent;
    expect(a.notes).toEqual(["x"]);
    expect(a.toState().state.fields.fromNewerVersion).toEqual({ providerData: { "x-vendor-extra": [1, 2, 3] } });
  });

  it("a field missing from an older record keeps the class default (pb-11 kind)", async () => {
    const state = makeState([], { className: `${FIXTURES}/notes-agent.ts:NotesAgent`, fields: { notes: ["old"] } });
    const a = (await loadStateString(encodeState(state))) as NotesAgent;
    expect(a.notes).toEqual(["old"]);
    expect(a.counter).toBe(0);
  });
});

describe("class resolution on load", () => {
  it("imports a module allowImports lists that registers itself", async () => {
    configure({ allowImports: [FIXTURES] });
    const state = makeState([{ role: "user", content: "hi" }], {
      className: `${FIXTURES}/self-registering-agent.ts:SelfRegisteringAgent`,
      fields: { topic: "tides" },
    });
    const a = await loadStateString(encodeState(state));
    expect(a.constructor.name).toBe("SelfRegisteringAgent");
    expect((a as unknown as { topic: string }).topic).toBe("tides");
    expect(a).toBeInstanceOf(BaseAgent);
  });

  it("imports a module allowImports lists that only exports the class", async () => {
    configure({ allowImports: [`${FIXTURES}/plain-export-agent.ts`] });
    const state = makeState([{ role: "user", content: [{ type: "text", text: "hi" }] }], {
      protocol: "anthropic",
      className: `${FIXTURES}/plain-export-agent.ts:PlainExportAgent`,
    });
    const a = await loadStateString(encodeState(state));
    expect(a.constructor.name).toBe("PlainExportAgent");
    expect(a).toBeInstanceOf(AnthropicAgent);
    // Resolved once, it is registered: saving it again names the same class.
    expect(a.toState().meta.class).toBe(`${FIXTURES}/plain-export-agent.ts:PlainExportAgent`);
  });

  it("an export that is not an agent class is AgentNotFoundError", async () => {
    configure({ allowImports: [FIXTURES] });
    const state = makeState([], { className: `${FIXTURES}/plain-export-agent.ts:notAClass` });
    const e = await loadStateString(encodeState(state)).catch((x) => x);
    expect(e).toBeInstanceOf(AgentNotFoundError);
    expect(e.message).toContain("not an agent class");
  });

  it("a missing class is AgentNotFoundError naming the class and the fix, never a null or partial agent (pb-10)", async () => {
    const state = makeState([{ role: "user", content: "hi" }], {
      name: "cart-bot",
      className: "./src/models/cart.ts:CartV1",
    });
    await backend.save("t10-missing", state);
    const e = await loadState("t10-missing", { backend }).catch((x) => x);
    expect(e).toBeInstanceOf(AgentNotFoundError);
    expect(e.className).toBe("./src/models/cart.ts:CartV1");
    expect(e.message).toContain("CartV1");
    expect(e.message).toContain('key "t10-missing"');
    expect(e.message).toContain("registerAgentClass(CartV1, import.meta.url)");
    expect(e.message).toContain("allowImports");
    expect(e.message).toContain('activateTemplate("cart-bot")');
  });

  it("never imports a module outside the working directory unless allowImports lists it", async () => {
    const dir = mkdtempSync(path.join(tmp, "outside-"));
    const marker = path.join(dir, "imported.marker");
    const baseAgentUrl = pathToFileURL(path.resolve("src/agent/base-agent.ts")).href;
    writeFileSync(
      path.join(dir, "evil-agent.ts"),
      `import { writeFileSync } from "node:fs";\nimport { BaseAgent } from ${JSON.stringify(baseAgentUrl)};\n` +
        `writeFileSync(${JSON.stringify(marker)}, "ran");\nexport class EvilAgent extends BaseAgent {}\n`,
    );
    const className = `${path.join(dir, "evil-agent.ts")}:EvilAgent`;
    const text = encodeState(makeState([], { className }));
    const e = await loadStateString(text).catch((x) => x);
    expect(e).toBeInstanceOf(AgentNotFoundError);
    expect(e.message).toContain("not listed in configure({ allowImports })");
    expect(existsSync(marker)).toBe(false); // no code ran
    configure({ allowImports: [dir] });
    const a = await loadStateString(text);
    expect(a.constructor.name).toBe("EvilAgent");
    expect(existsSync(marker)).toBe(true);
  });

  it("a package not in allowImports is never imported", async () => {
    const e = await loadStateString(encodeState(makeState([], { className: "vitest:Agent" }))).catch((x) => x);
    expect(e).toBeInstanceOf(AgentNotFoundError);
    expect(e.message).toContain("package vitest is not listed in configure({ allowImports })");
  });

  it("falls back to agentList after activateTemplate(name)", async () => {
    const state = makeState([{ role: "user", content: "hi" }], {
      name: "support",
      className: "./gone/legacy-agent.ts:LegacySupportAgent",
      fields: { notes: ["from the template's class"] },
    });
    const text = encodeState(state);
    await expect(loadStateString(text)).rejects.toBeInstanceOf(AgentNotFoundError);
    defineTemplate("support", () => new NotesAgent({ prompt: "You help." }), { replace: true });
    const live = activateTemplate("support");
    const a = await loadStateString(text);
    expect(a).toBeInstanceOf(NotesAgent);
    expect(a).not.toBe(live);
    expect(a.uuid).toBe(state.meta.agentUuid);
    expect((a as NotesAgent).notes).toEqual(["from the template's class"]);
  });
});

describe("hooks", () => {
  it("registered hooks are saved by module:export name and re-bound on load", async () => {
    const a = new BaseAgent({ name: "hooked" });
    a.registerToolHook(auditHook);
    const state = a.toState();
    expect(state.state.hooks).toEqual([`${FIXTURES}/hooks.ts:auditHook`]);
    await a.saveState("hooked", { backend });
    const b = await loadState("hooked", { backend });
    expect(b.hooks).toEqual([auditHook]);
    calls.length = 0;
    await b.hooks[0]!({ type: "before", toolName: "t", toolCallId: "c1", args: {}, taskId: "x", durationMs: 0 });
    expect(calls).toEqual(["audit:before:t"]);
  });

  it("a hook exported by an allowed module is found through import", async () => {
    configure({ allowImports: [`${FIXTURES}/hooks.ts`] });
    const text = encodeState(makeState([], { hooks: [`${FIXTURES}/hooks.ts:lazyHook`] }));
    const a = await loadStateString(text);
    expect(a.hooks).toHaveLength(1);
    expect(a.hooks[0]!.name).toBe("lazyHook");
  });

  it("a hook that cannot be found is skipped with a warning, the load succeeds, and its name is kept", async () => {
    const warnings: PersistenceWarning[] = [];
    const missing = `${FIXTURES}/hooks.ts:removedHook`;
    const text = encodeState(makeState([], { hooks: [`${FIXTURES}/hooks.ts:auditHook`, missing, "some-pkg:x"] }));
    const a = await loadStateString(text, { onWarning: (w) => warnings.push(w) });
    expect(a.hooks).toEqual([auditHook]);
    expect(warnings.map((w) => w.code)).toEqual(["HOOK_NOT_FOUND", "HOOK_NOT_FOUND"]);
    expect(warnings[0]!.message).toContain("removedHook");
    expect(warnings[0]!.message).toContain("registerHookFunction");
    expect(a.toState().state.hooks).toEqual([`${FIXTURES}/hooks.ts:auditHook`, missing, "some-pkg:x"]);
  });

  it("the default warning goes to console.warn", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      await loadStateString(encodeState(makeState([], { hooks: ["./nowhere.ts:gone"] })));
      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0]![0])).toContain("./nowhere.ts:gone");
    } finally {
      warn.mockRestore();
    }
  });

  it("an unregistered hook is not saved; a persistWarning says so once", () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      const a = new BaseAgent();
      const inline = () => undefined;
      a.registerToolHook(inline);
      const events: PersistenceWarning[] = [];
      a.on("persistWarning", (w) => events.push(w));
      expect(a.toState().state.hooks).toEqual([]);
      expect(a.toState().state.hooks).toEqual([]);
      expect(events).toHaveLength(1);
      expect(events[0]!.code).toBe("HOOK_NOT_REGISTERED");
    } finally {
      warn.mockRestore();
    }
  });

  it("registerHookFunction refuses a name bound to another function unless replace is given", () => {
    function h1() {}
    function h2() {}
    registerHookFunction(h1, "my-hooks", "h");
    expect(() => registerHookFunction(h2, "my-hooks", "h")).toThrow(RegistrationError);
    expect(registerHookFunction(h2, "my-hooks", "h", { replace: true })).toBe("my-hooks:h");
  });
});
