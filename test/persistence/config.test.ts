/**
 * Configuration: the DUMPLINGS_PERSISTENCE* env vars read at first import (in
 * fresh child processes), configure() overrides and validation, isEnabled /
 * disable, and a backend given by name or instance.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import {
  BaseAgent,
  configure,
  disable,
  FileBackend,
  InvalidConfigError,
  isEnabled,
  loadState,
  MemoryBackend,
  saveState,
  UnknownBackendError,
} from "../../src/index.js";
import { loadEnvironmentConfig, persistenceSettings, resolveBackend } from "../../src/persistence/config.js";

const run = promisify(execFile);
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-config-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const CHILD = path.resolve("test/persistence/children/env-child.ts");

/** What env-child.ts prints. */
interface ChildOut {
  enabled?: boolean;
  keyStrategy?: string;
  backend?: string;
  builtin?: { baseDir: string; dbPath: string };
  saved: boolean;
  persistError?: string;
  uuid: string;
  error?: { name: string; code?: string; message: string };
}

async function child(env: Record<string, string>): Promise<ChildOut> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("DUMPLINGS_PERSISTENCE")));
  const { stdout } = await run(process.execPath, ["--import", "tsx", CHILD], {
    env: { ...clean, ...env },
    cwd: process.cwd(),
    timeout: 60_000,
  });
  return JSON.parse(stdout.trim().split("\n").at(-1)!);
}

describe("environment variables, read at import in a fresh process", () => {
  it("defaults: off, file backend, uuid keys", async () => {
    const dir = path.join(tmp, "defaults-dir");
    const out = await child({ DUMPLINGS_PERSISTENCE_DIR: dir });
    expect(out.error).toBeUndefined();
    expect(out.enabled).toBe(false);
    expect(out.keyStrategy).toBe("uuid");
    expect(out.backend).toBe("file");
    expect(out.saved).toBe(true); // autoSave saves by hand even when auto-save is off
    // the OS lock file `.<key>.duas.lck` is kept between saves
    expect(readdirSync(dir).filter((n) => !n.endsWith(".lck"))).toEqual([`${out.uuid}.duas`]);
  });

  it("DUMPLINGS_PERSISTENCE=on, _BACKEND=sqlite, _DB and _KEY=name configure everything", async () => {
    const dbPath = path.join(tmp, "env.db");
    const out = await child({
      DUMPLINGS_PERSISTENCE: "on",
      DUMPLINGS_PERSISTENCE_BACKEND: "sqlite",
      DUMPLINGS_PERSISTENCE_DB: dbPath,
      DUMPLINGS_PERSISTENCE_KEY: "name",
      CHILD_AGENT_NAME: "env-agent",
    });
    expect(out.error).toBeUndefined();
    expect(out).toMatchObject({ enabled: true, keyStrategy: "name", backend: "sqlite", saved: true });
    expect(out.builtin?.dbPath).toBe(dbPath);
    const sqlite = new SQLiteBackend({ dbPath });
    try {
      const agent = await loadState("env-agent", { backend: sqlite });
      expect(agent.uuid).toBe(out.uuid);
      expect(agent.history).toEqual([{ role: "user", content: "from the child" }]);
    } finally {
      sqlite.close();
    }
  });

  it("a malformed variable is a clear InvalidConfigError naming it (and autoSave reports, never throws)", async () => {
    const out = await child({ DUMPLINGS_PERSISTENCE: "maybe", DUMPLINGS_PERSISTENCE_DIR: path.join(tmp, "maybe") });
    expect(out.error).toMatchObject({ code: "INVALID_CONFIG" });
    expect(out.error?.message).toContain("DUMPLINGS_PERSISTENCE");
    expect(out.error?.message).toContain('"maybe"');
    expect(out.saved).toBe(true); // an explicit save does not depend on DUMPLINGS_PERSISTENCE
    const key = await child({ DUMPLINGS_PERSISTENCE_KEY: "random", DUMPLINGS_PERSISTENCE_DIR: path.join(tmp, "k") });
    expect(key.error?.message).toContain("DUMPLINGS_PERSISTENCE_KEY");
    expect(key.saved).toBe(false); // the default key depends on it: reported, not thrown
    expect(key.persistError).toBe("INVALID_CONFIG");
  });

  it("an unknown backend name fails on use, listing the known names", async () => {
    const out = await child({ DUMPLINGS_PERSISTENCE_BACKEND: "nosuch" });
    expect(out.error).toMatchObject({ code: "UNKNOWN_BACKEND" });
    expect(out.error?.message).toContain("file, memory, sqlite");
  });
});

describe("configure()", () => {
  it("overrides, validates, and disable() turns auto-save off", () => {
    loadEnvironmentConfig({});
    expect(isEnabled()).toBe(false);
    configure({ enabled: true, keyStrategy: "name" });
    expect(isEnabled()).toBe(true);
    expect(persistenceSettings().keyStrategy).toBe("name");
    disable();
    expect(isEnabled()).toBe(false);
    expect(() => configure({ keyStrategy: "email" as never })).toThrow(InvalidConfigError);
    expect(() => configure({ enabled: "yes" as never })).toThrow(InvalidConfigError);
    expect(() => configure({ baseDir: "" })).toThrow(InvalidConfigError);
    expect(() => configure({ allowImports: [42 as never] })).toThrow(InvalidConfigError);
    expect(() => configure({ backend: "nosuch" })).toThrow(UnknownBackendError);
    expect(() => configure({ backend: {} as never })).toThrow(/save, load, delete and listKeys/);
    expect(persistenceSettings().keyStrategy).toBe("name"); // failed calls changed nothing
  });

  it("an explicit setting clears a malformed env var of that setting", () => {
    loadEnvironmentConfig({ DUMPLINGS_PERSISTENCE: "perhaps" });
    expect(() => isEnabled()).toThrow(InvalidConfigError);
    configure({ enabled: false });
    expect(isEnabled()).toBe(false);
  });

  it("accepts a backend instance and uses it by default", async () => {
    loadEnvironmentConfig({});
    const mem = new MemoryBackend();
    configure({ backend: mem });
    expect(resolveBackend()).toBe(mem);
    const agent = new BaseAgent({ name: "inst" });
    await saveState(agent, "inst");
    expect(await mem.listKeys()).toEqual(["inst"]);
  });

  it("baseDir moves the file backend", async () => {
    loadEnvironmentConfig({});
    const baseDir = path.join(tmp, "moved");
    configure({ backend: "file", baseDir });
    const agent = new BaseAgent({ name: "moved" });
    await saveState(agent, "moved");
    expect(readdirSync(baseDir).filter((n) => !n.endsWith(".lck"))).toEqual(["moved.duas"]);
    expect((await loadState("moved", { backend: new FileBackend({ baseDir }) })).uuid).toBe(agent.uuid);
  });
});
