/**
 * History lines longer than the file backend's 256 KB read chunk: every read
 * path (read, iterHistory, readHeader's verification of the committed lines)
 * joins a line's pieces once, at its end (joining them chunk by chunk made
 * streaming a 40 MB message take 2 s against 0.1 s to load it). The pieces
 * must come back whole and in order whatever side of a chunk boundary a line
 * starts or ends on.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import type { Message } from "../../src/core/messages.js";
import { BaseAgent } from "../../src/index.js";

const root = mkdtempSync(path.join(tmpdir(), "duas-long-lines-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const CHUNK = 256 * 1024;

/** A message whose JSON line is exactly `bytes` long (ASCII content). */
function lineOf(bytes: number, mark: string): Message {
  const empty = JSON.stringify({ role: "tool", tool_call_id: mark, content: "" }).length;
  return { role: "tool", tool_call_id: mark, content: mark[0]?.repeat(bytes - empty) ?? "" } as Message;
}

describe("file backend: lines longer than a read chunk", () => {
  it("comes back whole through read and iterHistory, on every side of a chunk boundary", async () => {
    const backend = new FileBackend({ baseDir: root });
    const agent = new BaseAgent({ name: "long", prompt: "p" });
    // Sizes around one, two and three chunks; "é" lines put a multi-byte character across boundaries.
    const sizes = [CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 7, 3 * CHUNK - 3, 100];
    for (const [i, n] of sizes.entries()) agent.history.push(lineOf(n, `${"abcdef"[i]}${i}`));
    agent.history.push({ role: "user", content: "é".repeat(CHUNK) });
    await agent.saveState("long", { backend });
    agent.history.push(lineOf(CHUNK + 3, "z9")); // an append after long lines
    await agent.saveState("long");
    const fresh = new FileBackend({ baseDir: root });
    const streamed: Message[] = [];
    for await (const m of fresh.iterHistory("long")) streamed.push(m);
    expect(streamed).toEqual(agent.history);
    expect((await fresh.read("long"))?.state.history).toEqual(agent.history);
    expect((await fresh.readHeader("long"))?.header.meta.messageCount).toBe(agent.history.length);
  });
});
