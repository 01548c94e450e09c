/** SQLiteBackend.readHeader: the header without the history, as `dumplings show` streams it. */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { Message } from "../../src/core/messages.js";
import { makeState } from "../../src/testing/states.js";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

it("returns meta, config and state with the stored count and revision, and undefined when missing", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "dumplings-sqlite-header-"));
  dirs.push(dir);
  const backend = new SQLiteBackend({ dbPath: path.join(dir, "s.db") });
  const history: Message[] = [{ role: "user", content: "hi" }];
  const state = makeState(history, { name: "h", config: { prompt: "p\nq" }, fields: { n: 1 } });
  const first = await backend.write("k", state);
  state.history.push({ role: "assistant", content: "hello" });
  state.meta.messageCount = 2;
  const second = await backend.write("k", state, { expectedRevision: first.revision, baseLength: 1 });
  const head = await backend.readHeader("k");
  expect(head?.revision).toBe(second.revision);
  expect(head?.header.meta.messageCount).toBe(2);
  expect(head?.header.config.prompt).toBe("p\nq");
  expect(head?.header.state.fields).toEqual({ n: 1 });
  expect(head?.header).not.toHaveProperty("history");
  expect(await backend.readHeader("missing")).toBeUndefined();
  backend.close();
});
