/**
 * A loaded history the provider would reject is reported at load, and never sent as is (issue 25
 * item 5: a `BaseAgent` loaded with a tool result whose call is missing reported nothing; only
 * `isHistoryValid()` knew). On a real SQLite file and through `.duas` text; the next turn's request,
 * checked by the local model server (which validates requests as the provider does), carries the
 * repaired history.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BaseAgent } from "../../src/agent/base-agent.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { Message } from "../../src/core/messages.js";
import { exportStateString, loadState, loadStateString } from "../../src/persistence/api.js";
import type { PersistenceWarning } from "../../src/persistence/classes.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";

let server: ModelServer;
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-invalid-history-"));
beforeAll(async () => {
  server = await startModelServer({ script: [] });
});
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

const agentWith = (history: Message[]) =>
  new BaseAgent({ name: "support", apiProvider: server.url, modelName: "m", apiKeyEnv: "", history });

describe("a history the provider would reject, at load", () => {
  it("an orphan tool result: HISTORY_INVALID at loadState and loadStateString; the next request is repaired", async () => {
    const history: Message[] = [
      { role: "user", content: "weather?" },
      { role: "tool", tool_call_id: "call_gone", content: "sunny" },
      { role: "assistant", content: "It is sunny." },
    ];
    const backend = new SQLiteBackend({ dbPath: path.join(dir, "s.db") });
    try {
      await agentWith(history).saveState("s1", { backend });
      const warnings: PersistenceWarning[] = [];
      const loaded = await loadState<BaseAgent>("s1", { backend, onWarning: (w) => warnings.push(w) });
      expect(warnings).toEqual([
        expect.objectContaining({
          code: "HISTORY_INVALID",
          name: "support",
          message: expect.stringMatching(/orphan-result-removed at message 1 \(call_gone\)/),
        }),
      ]);
      expect(loaded.history).toEqual(history); // reported, not changed behind the caller's back

      const fromText: PersistenceWarning[] = [];
      await loadStateString(exportStateString(loaded), { onWarning: (w) => fromText.push(w) });
      expect(fromText.map((w) => w.code)).toEqual(["HISTORY_INVALID"]);

      server.push({ text: "Still sunny." });
      const before = server.count;
      await loaded.conversationWithTool("and tomorrow?", { maxRetries: 0 });
      expect(server.requests[before]?.status).toBe(200);
      const sent = JSON.stringify(server.requests[before]?.body.messages);
      expect(sent).not.toContain("call_gone");
    } finally {
      backend.close();
    }
  });

  it("a valid history, or one cut by a crash (a call without its result), loads without a warning", async () => {
    for (const history of [
      [
        { role: "user", content: "hi" },
        { role: "assistant", content: "hello" },
      ],
      [
        { role: "user", content: "list files" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: "call_1", type: "function", function: { name: "ls", arguments: "{}" } }],
        },
      ],
    ] as Message[][]) {
      const warnings: PersistenceWarning[] = [];
      await loadStateString(exportStateString(agentWith(history)), { onWarning: (w) => warnings.push(w) });
      expect(warnings).toEqual([]);
    }
  });
});
