/**
 * One order decides which backend a call without `{ backend }` uses:
 * explicit option > the last default set in code (setDefaultBackend,
 * registerBackend(…, { setAsDefault: true }), configure({ backend })) >
 * DUMPLINGS_PERSISTENCE_BACKEND > the built-in `file`. Every pair is tested,
 * and defaultBackendName() / persistenceSettings().backend always name the
 * backend a save actually lands in.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { configureBuiltinBackends, defaultBackendName } from "../../src/backends/registry.js";
import {
  BaseAgent,
  configure,
  getBackend,
  InvalidConfigError,
  listStates,
  loadState,
  MemoryBackend,
  registerBackend,
  saveState,
  setDefaultBackend,
} from "../../src/index.js";
import { loadEnvironmentConfig, persistenceSettings, resolveBackend } from "../../src/persistence/config.js";
import { resetBackendRegistry } from "../../src/testing/index.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-default-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const stores = new Map<string, MemoryBackend>();

beforeEach(() => {
  resetBackendRegistry();
  loadEnvironmentConfig({});
  configureBuiltinBackends({ baseDir: mkdtempSync(path.join(tmp, "f-")) });
  stores.clear();
  for (const name of ["env", "set", "reg", "conf", "explicit"]) {
    const b = new MemoryBackend();
    stores.set(name, b);
    registerBackend(`m-${name}`, b);
  }
});

/** Where a save without `{ backend }` lands, by the name of the memory store holding it (or "file"). */
async function landsIn(): Promise<string> {
  const key = `k${Math.random().toString(36).slice(2)}`;
  await saveState(new BaseAgent({ name: "probe" }), key);
  for (const [name, b] of stores) if ((await b.listKeys()).includes(key)) return `m-${name}`;
  if ((await getBackend("file").listKeys()).includes(key)) return "file";
  throw new Error("the save landed nowhere known");
}

/** Asserts the default in use and that every way of asking agrees with it. */
async function expectDefault(name: string): Promise<void> {
  expect(await landsIn()).toBe(name);
  expect(defaultBackendName()).toBe(name);
  expect(resolveBackend()).toBe(getBackend(name));
  expect(persistenceSettings().backend).toBe(name);
}

/** The ways code sets a default. */
const inCode: [string, (name: string) => void][] = [
  ["setDefaultBackend", (name) => setDefaultBackend(name)],
  [
    "registerBackend setAsDefault",
    (name) => registerBackend(name, stores.get(name.slice(2)) as MemoryBackend, { replace: true, setAsDefault: true }),
  ],
  ["configure({ backend })", (name) => configure({ backend: name })],
];

const targets: Record<string, string> = {
  setDefaultBackend: "m-set",
  "registerBackend setAsDefault": "m-reg",
  "configure({ backend })": "m-conf",
};

describe("the default backend: one order", () => {
  it("built-in: file", async () => {
    await expectDefault("file");
  });

  it("env var > built-in", async () => {
    loadEnvironmentConfig({ DUMPLINGS_PERSISTENCE_BACKEND: "m-env" });
    await expectDefault("m-env");
  });

  it.each([
    ["the built-in", {}],
    ["the env var", { DUMPLINGS_PERSISTENCE_BACKEND: "m-env" }],
  ])("an explicit { backend } option > %s", async (_what, env) => {
    loadEnvironmentConfig(env);
    await saveState(new BaseAgent({ name: "explicit" }), "x", { backend: "m-explicit" });
    expect(await stores.get("explicit")!.listKeys()).toEqual(["x"]);
    expect((await loadState("x", { backend: "m-explicit" })).name).toBe("explicit");
    expect(await stores.get("env")!.listKeys()).toEqual([]);
    expect(await getBackend("file").listKeys()).toEqual([]);
  });

  it("env var set to the built-in name file still lets code choose", async () => {
    loadEnvironmentConfig({ DUMPLINGS_PERSISTENCE_BACKEND: "file" });
    await expectDefault("file");
    setDefaultBackend("m-set");
    await expectDefault("m-set");
  });

  describe.each(inCode)("%s", (_how, set) => {
    const target = targets[_how] as string;

    it("> built-in", async () => {
      set(target);
      await expectDefault(target);
    });

    it("> env var (set at import, before the code runs)", async () => {
      loadEnvironmentConfig({ DUMPLINGS_PERSISTENCE_BACKEND: "m-env" });
      set(target);
      await expectDefault(target);
    });

    it("> a malformed env var, which then never fails a call", async () => {
      loadEnvironmentConfig({ DUMPLINGS_PERSISTENCE_BACKEND: "  " });
      expect(() => resolveBackend()).toThrow(InvalidConfigError);
      set(target);
      await expectDefault(target);
    });

    it("< an explicit { backend } option", async () => {
      set(target);
      const agent = new BaseAgent({ name: "explicit" });
      await saveState(agent, "x", { backend: "m-explicit" });
      expect(await stores.get("explicit")!.listKeys()).toEqual(["x"]);
      expect(await listStates({ backend: "m-explicit" })).toEqual(["x"]);
      expect(await stores.get(target.slice(2))!.listKeys()).toEqual([]);
    });

    it.each(inCode)("then %s: the last one set wins", async (other, setOther) => {
      const second = other === _how ? "m-explicit" : (targets[other] as string);
      set(target);
      setOther(second);
      await expectDefault(second);
      set(target);
      await expectDefault(target);
    });
  });

  it("configure({ backend: instance }) is the default too, and named by its name", async () => {
    const mem = new MemoryBackend();
    setDefaultBackend("m-set");
    configure({ backend: mem });
    expect(resolveBackend()).toBe(mem);
    expect(defaultBackendName()).toBe("memory");
    expect(persistenceSettings().backend).toBe(mem);
    setDefaultBackend("m-set");
    await expectDefault("m-set");
  });

  it("loadEnvironmentConfig re-reads the environment as at import: code defaults are forgotten", async () => {
    setDefaultBackend("m-set");
    loadEnvironmentConfig({ DUMPLINGS_PERSISTENCE_BACKEND: "m-env" });
    await expectDefault("m-env");
  });
});

describe("an agent that saved once", () => {
  it("follows configure({ backend }) for a new key, and loadState on that key works", async () => {
    const agent = new BaseAgent({ name: "mover", history: [{ role: "user", content: "hi" }] });
    await saveState(agent, "old-key"); // lands in file
    configure({ backend: "m-conf" });
    await saveState(agent, "new-key");
    expect(await stores.get("conf")!.listKeys()).toEqual(["new-key"]);
    const loaded = await loadState("new-key");
    expect(loaded.uuid).toBe(agent.uuid);
    // Its home is now the new key on the new backend: a save without a key goes there.
    agent.history.push({ role: "assistant", content: "hello" });
    await saveState(agent);
    expect((await loadState("new-key")).history).toHaveLength(2);
    expect((await getBackend("file").listKeys()).sort()).toEqual(["old-key"]);
  });

  it("keeps saving under the key it was loaded from to that key's backend", async () => {
    const agent = new BaseAgent({ name: "home", history: [{ role: "user", content: "hi" }] });
    await saveState(agent, "home-key", { backend: "m-set" });
    const loaded = await loadState("home-key", { backend: "m-set" });
    configure({ backend: "m-conf" });
    loaded.history.push({ role: "assistant", content: "still here" });
    await saveState(loaded);
    await saveState(loaded, "home-key");
    expect(await stores.get("conf")!.listKeys()).toEqual([]);
    expect((await loadState("home-key", { backend: "m-set" })).history).toHaveLength(2);
  });

  it("follows setDefaultBackend for a new key after an env var default", async () => {
    loadEnvironmentConfig({ DUMPLINGS_PERSISTENCE_BACKEND: "m-env" });
    const agent = new BaseAgent({ name: "envy" });
    await saveState(agent, "a");
    expect(await stores.get("env")!.listKeys()).toEqual(["a"]);
    setDefaultBackend("m-set");
    await saveState(agent, "b");
    expect(await stores.get("set")!.listKeys()).toEqual(["b"]);
    expect((await loadState("b")).uuid).toBe(agent.uuid);
  });
});
