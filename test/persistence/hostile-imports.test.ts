/**
 * A stored state never makes loading import a module the application did not
 * register or list in `configure({ allowImports })` (issue 11 item 5). The
 * fixture module writes a marker file at its top level: after loading a
 * hostile `.duas` file or database row, the marker must not exist.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { encodeState } from "../../src/core/codec/encode.js";
import {
  AgentNotFoundError,
  configure,
  FileBackend,
  loadState,
  loadStateString,
  type PersistenceWarning,
} from "../../src/index.js";
import { makeState } from "../../src/testing/states.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-hostile-"));
const marker = path.join(tmp, "imported.marker");
process.env.DUMPLINGS_TEST_IMPORT_MARKER = marker;
afterAll(() => {
  delete process.env.DUMPLINGS_TEST_IMPORT_MARKER;
  rmSync(tmp, { recursive: true, force: true });
});
afterEach(() => configure({ allowImports: [] }));

const MODULE = "./test/fixtures/classes/marker-module.ts";
/** Every spelling of the project file a hostile state could use. */
const SPELLINGS = [MODULE, path.resolve(MODULE), "test/fixtures/classes/marker-module.ts", `./test/../${MODULE}`];

describe("a stored state names a project module that nobody allowed", () => {
  it.each(SPELLINGS)("class %s in a .duas file: AgentNotFoundError naming the fix, nothing imported", async (mod) => {
    const dir = mkdtempSync(path.join(tmp, "file-"));
    writeFileSync(path.join(dir, "evil.duas"), encodeState(makeState([], { className: `${mod}:MarkerAgent` })));
    const backend = new FileBackend({ baseDir: dir });
    const e = await loadState("evil", { backend }).catch((x) => x);
    expect(e).toBeInstanceOf(AgentNotFoundError);
    expect(e.className).toBe(`${mod}:MarkerAgent`);
    expect(e.message).toContain("registerAgentClass(MarkerAgent, import.meta.url)");
    expect(e.message).toContain(`configure({ allowImports: [${JSON.stringify(mod)}] })`);
    expect(existsSync(marker)).toBe(false);
  });

  it("class in a SQLite row: AgentNotFoundError, nothing imported", async () => {
    const backend = new SQLiteBackend({ dbPath: path.join(tmp, "evil.db") });
    try {
      await backend.save("evil", makeState([], { className: `${MODULE}:MarkerAgent` }));
      await expect(loadState("evil", { backend })).rejects.toBeInstanceOf(AgentNotFoundError);
      expect(existsSync(marker)).toBe(false);
    } finally {
      await backend.close?.();
    }
  });

  it("hooks: skipped with a HOOK_NOT_FOUND warning naming allowImports, nothing imported, name kept", async () => {
    const warnings: PersistenceWarning[] = [];
    const hook = `${MODULE}:markerHook`;
    const a = await loadStateString(encodeState(makeState([], { hooks: [hook] })), {
      onWarning: (w) => warnings.push(w),
    });
    expect(a.hooks).toEqual([]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ code: "HOOK_NOT_FOUND", name: hook });
    expect(warnings[0]!.message).toContain("registerHookFunction(markerHook, import.meta.url)");
    expect(warnings[0]!.message).toContain("allowImports");
    expect(a.toState().state.hooks).toEqual([hook]);
    expect(existsSync(marker)).toBe(false);
  });

  it("an allow-list entry for another file or directory does not cover it", async () => {
    configure({ allowImports: ["./test/fixtures/classes/hooks.ts", "./test/fixtures/crash", "marker-module"] });
    const text = encodeState(makeState([], { className: `${MODULE}:MarkerAgent` }));
    await expect(loadStateString(text)).rejects.toBeInstanceOf(AgentNotFoundError);
    expect(existsSync(marker)).toBe(false);
  });

  // Last: once imported, the module stays in the module cache.
  it("listed in allowImports, the same state loads (the import is what the application asked for)", async () => {
    configure({ allowImports: [MODULE] });
    const a = await loadStateString(encodeState(makeState([], { className: `${MODULE}:MarkerAgent` })));
    expect(a.constructor.name).toBe("MarkerAgent");
    expect(existsSync(marker)).toBe(true);
  });
});
