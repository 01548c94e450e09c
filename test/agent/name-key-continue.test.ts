/**
 * `keyStrategy: "name"` (env DUMPLINGS_PERSISTENCE_KEY=name): a fresh agent whose name already has a
 * stored session continued it instead of conflicting at every turn with its conversation never
 * stored (issue 25, item 8). It now continues the stored session (the model sees it, its turns are
 * appended); a fresh agent with a conversation of its own that the stored one does not start with
 * saves it under its uuid and says so. Real SQLite and file backends, a real model server.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { BaseAgent } from "../../src/agent/base-agent.js";
import { FileBackend } from "../../src/backends/file/index.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend } from "../../src/backends/types.js";
import type { Message } from "../../src/core/messages.js";
import { loadState, saveState } from "../../src/persistence/api.js";
import type { PersistenceWarning } from "../../src/persistence/classes.js";
import { configure } from "../../src/persistence/config.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";
import { NotesAgent } from "../fixtures/classes/notes-agent.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-name-key-"));
let server: ModelServer;
let seq = 0;
beforeAll(async () => {
  server = await startModelServer({ script: [] });
});
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});
afterEach(() => configure({ enabled: false, keyStrategy: "uuid" }));

function agentNamed(name: string, history?: Message[]): BaseAgent {
  return new BaseAgent({
    name,
    apiProvider: `${server.url}/chat/completions`,
    modelName: "scripted",
    apiKeyEnv: "",
    ...(history ? { history } : {}),
  });
}

const contents = (history: readonly Message[]) => history.map((m) => (m as { content?: unknown }).content);

describe.each(["sqlite", "file"] as const)("keyStrategy name on the %s backend", (kind) => {
  const open = (): StateBackend =>
    kind === "file"
      ? new FileBackend({ baseDir: path.join(dir, `files-${++seq}`) })
      : new SQLiteBackend({ dbPath: path.join(dir, `db-${++seq}.sqlite`) });

  it("a fresh agent of a stored name continues the session: the model sees it, every turn is stored", async () => {
    const backend = open();
    configure({ enabled: true, backend, keyStrategy: "name" });
    // yesterday's process
    const first = agentNamed("support");
    server.push({ text: "hello, how can I help?" });
    await first.conversationWithTool("hi");
    expect(contents((await loadState("support", { backend })).history)).toEqual(["hi", "hello, how can I help?"]);

    // today's process: a new agent of the same name
    const errors: unknown[] = [];
    const fresh = agentNamed("support");
    fresh.on("persistError", (e) => errors.push(e));
    server.push({ text: "the refund is on its way" });
    const before = server.requests.length;
    await fresh.conversationWithTool("and my refund?");
    expect(errors).toEqual([]);
    // the model was sent yesterday's conversation
    const sent = server.requests[before]?.body.messages as { content: unknown }[];
    expect(sent.map((m) => m.content)).toEqual(
      expect.arrayContaining(["hi", "hello, how can I help?", "and my refund?"]),
    );
    // and the turn is stored after it, as are the next ones
    server.push({ text: "tomorrow" });
    await fresh.conversationWithTool("when?");
    expect(errors).toEqual([]);
    const stored = await loadState("support", { backend });
    expect(contents(stored.history)).toEqual([
      "hi",
      "hello, how can I help?",
      "and my refund?",
      "the refund is on its way",
      "when?",
      "tomorrow",
    ]);
    expect(contents(fresh.history)).toEqual(contents(stored.history));
    await backend.close?.();
  });

  it("a fresh agent with its own conversation keeps it under its uuid, and says where", async () => {
    const backend = open();
    configure({ enabled: true, backend, keyStrategy: "name" });
    await saveState(agentNamed("support", [{ role: "user", content: "someone else's" }]), "support", { backend });
    const mine = agentNamed("support", [{ role: "user", content: "my own start" }]);
    const warnings: PersistenceWarning[] = [];
    const errors: unknown[] = [];
    mine.on("persistWarning", (w: PersistenceWarning) => warnings.push(w));
    mine.on("persistError", (e) => errors.push(e));
    server.push({ text: "answer" });
    await mine.conversationWithTool("go on");
    expect(errors).toEqual([]);
    expect(warnings.map((w) => w.code)).toEqual(["SESSION_KEY_TAKEN"]);
    expect(warnings[0]?.message).toContain(JSON.stringify(mine.uuid));
    // nothing of either conversation is lost: the stored one untouched, the new one under the uuid
    expect(contents((await loadState("support", { backend })).history)).toEqual(["someone else's"]);
    expect(contents((await loadState(mine.uuid, { backend })).history)).toEqual(["my own start", "go on", "answer"]);
    await backend.close?.();
  });

  it("a subclass continues with its persistent fields; a session of another class is not taken over", async () => {
    const backend = open();
    configure({ enabled: true, backend, keyStrategy: "name" });
    const notes = new NotesAgent({
      name: "notes",
      apiProvider: `${server.url}/chat/completions`,
      modelName: "scripted",
      apiKeyEnv: "",
    });
    notes.notes = ["buy milk"];
    await saveState(notes, "notes", { backend });
    const again = new NotesAgent({
      name: "notes",
      apiProvider: `${server.url}/chat/completions`,
      modelName: "scripted",
      apiKeyEnv: "",
    });
    server.push({ text: "noted" });
    await again.conversationWithTool("remember eggs");
    expect(again.notes).toEqual(["buy milk"]);
    expect((await loadState<NotesAgent>("notes", { backend })).history).toHaveLength(2);
    // a plain BaseAgent of that name: the NotesAgent session is left as it is
    const warnings: PersistenceWarning[] = [];
    const plain = agentNamed("notes");
    plain.on("persistWarning", (w: PersistenceWarning) => warnings.push(w));
    server.push({ text: "hello" });
    await plain.conversationWithTool("hi");
    expect(warnings.map((w) => w.code)).toEqual(["SESSION_KEY_TAKEN"]);
    expect(plain.history.map((m) => (m as { content?: unknown }).content)).toEqual(["hi", "hello"]);
    const stored = await loadState<NotesAgent>("notes", { backend });
    expect(stored).toBeInstanceOf(NotesAgent);
    expect(stored.notes).toEqual(["buy milk"]);
    expect(contents(stored.history)).toEqual(["remember eggs", "noted"]);
    expect(contents((await loadState(plain.uuid, { backend })).history)).toEqual(["hi", "hello"]);
    await backend.close?.();
  });
});
