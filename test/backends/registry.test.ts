import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import {
  builtinBackendSettings,
  configureBuiltinBackends,
  defaultBackendName,
  getBackend,
  InvalidBackendError,
  listBackendNames,
  registerBackend,
  setDefaultBackend,
} from "../../src/backends/registry.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend } from "../../src/backends/types.js";
import { BackendError, BackendExistsError, UnknownBackendError } from "../../src/core/errors.js";
import { makeState, resetBackendRegistry } from "../../src/testing/index.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-registry-"));
afterAll(() => {
  resetBackendRegistry();
  rmSync(dir, { recursive: true, force: true });
});

function custom(): StateBackend {
  const store = new Map<string, string>();
  return {
    name: "custom",
    save: (k, s) => void store.set(k, JSON.stringify(s)),
    load: (k) => (store.has(k) ? JSON.parse(store.get(k) as string) : undefined),
    delete: (k) => store.delete(k),
    listKeys: () => [...store.keys()],
  };
}

describe("backend registry", () => {
  beforeEach(() => {
    resetBackendRegistry();
    configureBuiltinBackends({ baseDir: path.join(dir, "sessions"), dbPath: path.join(dir, "sessions.db") });
  });

  it("knows the built-ins file, sqlite and memory, and defaults to file", () => {
    expect(listBackendNames()).toEqual(["file", "memory", "sqlite"]);
    expect(defaultBackendName()).toBe("file");
    expect(getBackend()).toBeInstanceOf(FileBackend);
    expect(getBackend("sqlite")).toBeInstanceOf(SQLiteBackend);
    expect(getBackend("memory")).toBeInstanceOf(MemoryBackend);
    expect(getBackend("memory")).toBe(getBackend("memory")); // one cached instance
  });

  it("the built-ins use the configured locations (defaults otherwise)", () => {
    resetBackendRegistry();
    expect(builtinBackendSettings()).toEqual({
      baseDir: "./.dumplingsAI_sessions",
      dbPath: "./.dumplingsAI_sessions.db",
    });
    const dbPath = path.join(dir, "configured.db");
    configureBuiltinBackends({ dbPath, baseDir: path.join(dir, "configured") });
    expect((getBackend("sqlite") as SQLiteBackend).dbPath).toBe(dbPath);
    expect((getBackend("file") as FileBackend).baseDir).toBe(path.resolve(dir, "configured"));
  });

  it("changing a setting drops and closes the cached built-in instance", async () => {
    const first = getBackend("sqlite") as SQLiteBackend;
    first.save("k", makeState([]));
    configureBuiltinBackends({ dbPath: path.join(dir, "sessions.db") }); // unchanged: kept
    expect(getBackend("sqlite")).toBe(first);
    configureBuiltinBackends({ dbPath: path.join(dir, "other.db") });
    const second = getBackend("sqlite") as SQLiteBackend;
    expect(second).not.toBe(first);
    expect(second.dbPath).toBe(path.join(dir, "other.db"));
    expect(second.listKeys()).toEqual([]);
    expect(() => first.listKeys()).toThrow(BackendError); // closed
  });

  it("registers, resolves and makes default a custom backend", async () => {
    const b = custom();
    registerBackend("my-store", b, { setAsDefault: true });
    expect(getBackend("my-store")).toBe(b);
    expect(getBackend()).toBe(b);
    expect(defaultBackendName()).toBe("my-store");
    expect(listBackendNames()).toEqual(["file", "memory", "my-store", "sqlite"]);
    setDefaultBackend("memory");
    expect(getBackend()).toBeInstanceOf(MemoryBackend);
  });

  it("a taken name is an error unless replace is given, built-in names included", () => {
    const a = custom();
    const b = custom();
    registerBackend("dup", a);
    expect(() => registerBackend("dup", b)).toThrow(BackendExistsError);
    expect(getBackend("dup")).toBe(a);
    registerBackend("dup", b, { replace: true });
    expect(getBackend("dup")).toBe(b);
    expect(() => registerBackend("sqlite", a)).toThrow(BackendExistsError);
    registerBackend("sqlite", a, { replace: true });
    expect(getBackend("sqlite")).toBe(a);
  });

  it("an unknown name is an error listing the known names", () => {
    registerBackend("extra", custom());
    for (const call of [() => getBackend("nope"), () => setDefaultBackend("nope")]) {
      let error: unknown;
      try {
        call();
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(UnknownBackendError);
      expect((error as UnknownBackendError).known).toEqual(["extra", "file", "memory", "sqlite"]);
      expect((error as Error).message).toContain("known backends: extra, file, memory, sqlite");
    }
    expect(defaultBackendName()).toBe("file");
  });

  it("names are plain map keys: prototype names resolve to nothing", () => {
    for (const name of ["constructor", "toString", "hasOwnProperty"]) {
      expect(() => getBackend(name)).toThrow(UnknownBackendError);
    }
    const b = custom();
    registerBackend("constructor", b);
    expect(getBackend("constructor")).toBe(b);
  });

  it("refuses malformed names and values that are not backends", () => {
    for (const name of ["", "a/b", "__proto__", " x", "x".repeat(65), "new\nline"]) {
      expect(() => registerBackend(name, custom()), JSON.stringify(name)).toThrow(InvalidBackendError);
    }
    expect(() => registerBackend("half", { save() {}, load() {} } as unknown as StateBackend)).toThrow(
      /missing: delete, listKeys/,
    );
    expect(() => getBackend({} as StateBackend)).toThrow(InvalidBackendError);
    expect(listBackendNames()).toEqual(["file", "memory", "sqlite"]);
  });

  it("an instance passes through getBackend unchanged", () => {
    const b = custom();
    expect(getBackend(b)).toBe(b);
  });

  it("resetBackendRegistry forgets registrations and restores the default", () => {
    registerBackend("gone", custom(), { setAsDefault: true });
    resetBackendRegistry();
    expect(listBackendNames()).toEqual(["file", "memory", "sqlite"]);
    expect(defaultBackendName()).toBe("file");
  });
});
