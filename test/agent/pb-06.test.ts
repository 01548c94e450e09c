/**
 * shared/cases/pb-06: a lone UTF-16 surrogate in a stored history must not
 * brick the session. Storage keeps strings exactly (issue 2: every string
 * round-trips byte for byte, on every backend); the provider request built
 * from the history never carries a lone surrogate (replaced by U+FFFD), so the
 * next turn succeeds, and well-formed text (emoji) is sent unchanged.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, expect, it } from "vitest";
import { AnthropicAgent } from "../../src/agent/anthropic-agent.js";
import { FileBackend } from "../../src/backends/file/index.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { loadState, saveState } from "../../src/persistence/api.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";

let server: ModelServer | undefined;
const dirs: string[] = [];
afterEach(async () => {
  await server?.close();
  server = undefined;
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function strings(value: unknown, out: string[] = []): string[] {
  if (typeof value === "string") out.push(value);
  else if (Array.isArray(value)) for (const v of value) strings(v, out);
  else if (value && typeof value === "object") for (const v of Object.values(value)) strings(v, out);
  return out;
}

it.each(["file", "sqlite"] as const)(
  "%s: a stored lone surrogate round-trips exactly and never reaches the provider",
  async (kind) => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "dumplings-pb06-"));
    dirs.push(dir);
    const backend =
      kind === "file" ? new FileBackend({ baseDir: dir }) : new SQLiteBackend({ dbPath: path.join(dir, "s.db") });
    server = await startModelServer({ script: [{ text: "fine" }] });
    process.env.DUMPLINGS_PB06_KEY = "test-key";
    const agent = new AnthropicAgent({
      name: "pb06",
      apiProvider: `${server.url}/messages`,
      modelName: "scripted",
      apiKeyEnv: "DUMPLINGS_PB06_KEY",
    });
    agent.history.push(
      { role: "user", content: "bad \ud83d end" },
      { role: "assistant", content: [{ type: "text", text: "ok \ud83d\udd11 done" }] },
    );
    await saveState(agent, "conv-6b", { backend });

    const loaded = (await loadState("conv-6b", { backend })) as AnthropicAgent;
    expect(loaded.history[0]).toEqual({ role: "user", content: "bad \ud83d end" }); // storage is exact
    loaded.config.apiProvider = `${server.url}/messages`;

    const result = await loaded.conversationWithTool("next?", { maxRetries: 0 });
    expect(result.text).toBe("fine");
    const sent = strings(server.requests[0]?.body);
    expect(sent.every((s) => s.isWellFormed())).toBe(true);
    expect(sent).toContain("bad \ufffd end");
    expect(sent).toContain("ok \ud83d\udd11 done"); // a well-formed pair is sent unchanged
    expect(loaded.history[0]).toEqual({ role: "user", content: "bad \ud83d end" }); // the history is not rewritten
    await backend.close?.();
  },
);
