/**
 * The README's "OpenAI Agents SDK session" example runs as written (its
 * `dumplings-ai/openai-agents` import pointed at this checkout's sources, and
 * `@openai/agents` at the same core + OpenAI provider it bundles), against the
 * local model server through `OPENAI_BASE_URL`: twice in one directory, as two
 * processes, and the second run's model request carries the first run's history.
 */
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { afterAll, expect, it } from "vitest";
import { startModelServer } from "../../src/testing/model-server.js";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "..", "..");
const readme = readFileSync(path.join(root, "README.md"), "utf8");
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-agents-readme-"));
// Inside the project, so the example's zod and @openai imports resolve from this checkout's node_modules.
const file = path.join(import.meta.dirname, `.generated-${randomUUID()}.mts`);
const href = (...p: string[]) => JSON.stringify(pathToFileURL(path.join(root, ...p)).href);
afterAll(() => {
  rmSync(tmp, { recursive: true, force: true });
  rmSync(file, { force: true });
});

it("the README's OpenAI Agents example runs, and a second process continues the session", async () => {
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1] as string);
  const found = blocks.filter((b) => b.includes('from "dumplings-ai/openai-agents"'));
  expect(found).toHaveLength(1);
  const code = (found[0] as string)
    .replaceAll('"dumplings-ai/openai-agents"', href("src", "openai-agents", "index.ts"))
    .replaceAll('"@openai/agents"', href("test", "fixtures", "openai-agents", "agents.ts"));
  writeFileSync(file, code);
  const server = await startModelServer({
    script: [
      { toolCalls: [{ id: "call_p", name: "get_weather", arguments: { city: "Paris" } }] },
      { text: "Sunny, 21°C in Paris." },
      { text: "You asked about Paris." },
    ],
  });
  try {
    const env = { ...process.env, OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "test-key" };
    const node = (...args: string[]) =>
      run(process.execPath, ["--import", import.meta.resolve("tsx"), file, ...args], {
        cwd: tmp,
        env,
        timeout: 60_000,
      });
    expect((await node()).stdout).toBe("Sunny, 21°C in Paris.\n4\n");
    expect((await node("Which city did I ask about?")).stdout).toBe("You asked about Paris.\n6\n");
    expect(server.requests.map((r) => [r.protocol, r.status])).toEqual([
      ["responses", 200],
      ["responses", 200],
      ["responses", 200],
    ]);
    const input = server.requests[2]?.body.input as Array<Record<string, unknown>>;
    expect(input.map((i) => i.type ?? i.role)).toEqual([
      "user",
      "function_call",
      "function_call_output",
      "message",
      "user",
    ]);
    expect(input[2]).toMatchObject({ call_id: "call_p" });
    expect(input[4]).toMatchObject({ content: "Which city did I ask about?" });
  } finally {
    await server.close();
  }
}, 120_000);
