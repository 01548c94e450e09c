/**
 * The README's "AI SDK chats" example runs as written (its `dumplings-ai`
 * imports pointed at this checkout's sources), twice in one directory.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { afterAll, expect, it } from "vitest";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "..", "..");
const readme = readFileSync(path.join(root, "README.md"), "utf8");
const src = (entry: string) => JSON.stringify(pathToFileURL(path.join(root, "src", entry)).href);
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-readme-ai-sdk-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

it("the AI SDK chats example runs and prints what its comments say", async () => {
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1] as string);
  const found = blocks.filter((b) => b.includes('createChatStore<ModelMessage>({ store, keyPrefix: "run-" })'));
  expect(found).toHaveLength(1);
  const code = (found[0] as string)
    .replaceAll('"dumplings-ai/ai-sdk"', src("ai-sdk/index.ts"))
    .replaceAll('"dumplings-ai/sqlite"', src("backends/sqlite.ts"));
  const file = path.join(tmp, "example.mts");
  writeFileSync(file, code);
  for (let i = 0; i < 2; i++) {
    const { stdout } = await run(process.execPath, ["--import", import.meta.resolve("tsx"), file], {
      cwd: tmp,
      timeout: 60_000,
    });
    expect(stdout).toBe("1 2 [ 'chat-1' ]\ntrue\n");
  }
});
