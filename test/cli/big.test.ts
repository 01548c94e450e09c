/**
 * `dumplings show` and `export` on a 100,000-message session: the history is
 * streamed from the file backend (readHeader + iterHistory), and the export
 * is exactly the `.duas` text of the state.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { encodeState } from "../../src/core/codec/encode.js";
import type { Message } from "../../src/core/messages.js";
import { makeState } from "../../src/testing/states.js";
import { runCli, runJson } from "./run-cli.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-cli-big-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("a 100,000-message session", () => {
  it("shows and exports by streaming", async () => {
    const dir = path.join(tmp, "sessions");
    const history: Message[] = [];
    for (let i = 0; i < 100_000; i++) {
      history.push(
        i % 2 === 0
          ? { role: "user", content: `question ${i}` }
          : {
              role: "assistant",
              content: null,
              tool_calls: [
                { id: `c${i}`, type: "function", function: { name: i % 4 === 1 ? "a" : "b", arguments: "{}" } },
              ],
            },
      );
    }
    const state = makeState(history, { name: "big" });
    const backend = new FileBackend({ baseDir: dir });
    await backend.save("big", state);
    backend.close?.();

    const shown = runJson<{
      streamed: boolean;
      messages: { total: number; byRole: Record<string, number> };
      toolCalls: { total: number; byName: Record<string, number> };
      last: { index: number }[];
    }>(["show", "big", "--last", "2", "--dir", dir]);
    expect(shown.streamed).toBe(true);
    expect(shown.messages).toEqual({ total: 100_000, byRole: { user: 50_000, assistant: 50_000 } });
    expect(shown.toolCalls).toEqual({ total: 50_000, byName: { a: 25_000, b: 25_000 } });
    expect(shown.last.map((x) => x.index)).toEqual([99_998, 99_999]);

    const out = path.join(tmp, "big.duas");
    const r = runCli(["export", "big", "-o", out, "--dir", dir]);
    expect(r.code).toBe(0);
    expect(readFileSync(out, "utf8")).toBe(encodeState(state));
  });
});
