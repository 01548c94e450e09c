/**
 * A fresh agent (one that never loaded or saved the key) may only create a
 * session: saving it over an existing one is a ConflictError and the stored
 * conversation is untouched (found by a new-user test: two processes each
 * creating `new BaseAgent({ name })` under keyStrategy "name" overwrote each
 * other's history). `force: true` replaces on purpose; auto-save reports the
 * conflict as a persistError and the turn goes on.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BaseAgent } from "../../src/agent/base-agent.js";
import { FileBackend } from "../../src/backends/file/index.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend } from "../../src/backends/types.js";
import { ConflictError } from "../../src/core/errors.js";
import { autoSave, loadState, saveState } from "../../src/persistence/api.js";
import { configure } from "../../src/persistence/config.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "dumplings-create-only-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const backends: [string, () => StateBackend][] = [
  ["memory", () => new MemoryBackend()],
  ["file", () => new FileBackend({ baseDir: path.join(dir, "files") })],
  ["sqlite", () => new SQLiteBackend({ dbPath: path.join(dir, "s.db") })],
];

describe.each(backends)("%s", (_name, make) => {
  it("a fresh agent's save over an existing session conflicts and changes nothing; force replaces", async () => {
    const backend = make();
    const key = `support-${Math.random().toString(36).slice(2)}`;
    const a = new BaseAgent({ name: key });
    a.history.push({ role: "user", content: "first" }, { role: "assistant", content: "kept" });
    await saveState(a, key, { backend });

    const b = new BaseAgent({ name: key });
    b.history.push({ role: "user", content: "other" });
    const err = await saveState(b, key, { backend }).catch((e) => e);
    expect(err).toBeInstanceOf(ConflictError);
    expect((err as ConflictError).expectedRevision).toBeNull();
    expect((await loadState(key, { backend })).history).toEqual(a.history);

    // auto-save (keyed by name, to this backend) never throws: it reports the conflict and returns false
    const reported: unknown[] = [];
    b.on("persistError", (e) => reported.push(e));
    configure({ keyStrategy: "name", backend });
    try {
      expect(await autoSave(b)).toBe(false);
    } finally {
      configure({ keyStrategy: "uuid", backend: "file" });
    }
    expect(reported[0]).toBeInstanceOf(ConflictError);
    expect((await loadState(key, { backend })).history).toEqual(a.history);

    await saveState(b, key, { backend, force: true });
    expect((await loadState(key, { backend })).history).toEqual(b.history);
    await backend.close?.();
  });
});
