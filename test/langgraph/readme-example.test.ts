/**
 * The README's LangGraph.js example runs as written, with its
 * `dumplings-ai/langgraph` import pointed at this checkout's sources: twice in
 * one directory (the second run continues the thread stored by the first).
 */
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { afterAll, expect, it } from "vitest";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "..", "..");
const readme = readFileSync(path.join(root, "README.md"), "utf8");
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-langgraph-readme-"));
// Inside the project, so the example's @langchain imports resolve from this checkout's node_modules.
const file = path.join(import.meta.dirname, `.generated-${randomUUID()}.mts`);
afterAll(() => {
  rmSync(tmp, { recursive: true, force: true });
  rmSync(file, { force: true });
});

it("the README's LangGraph.js example runs and a second run continues the thread", async () => {
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1] as string);
  const found = blocks.filter((b) => b.includes('from "dumplings-ai/langgraph"'));
  expect(found).toHaveLength(1);
  const src = pathToFileURL(path.join(root, "src", "langgraph", "index.ts")).href;
  writeFileSync(file, (found[0] as string).replaceAll('"dumplings-ai/langgraph"', JSON.stringify(src)));
  const node = () =>
    run(process.execPath, ["--import", import.meta.resolve("tsx"), file], { cwd: tmp, timeout: 60_000 });
  const first = await node();
  expect(first.stdout).toContain("[ 'hello', 'You said: hello', 'again', 'You said: again' ]");
  expect(first.stdout.trim().split("\n")).toHaveLength(7); // the messages, then 6 checkpoints
  const second = await node();
  // Eight messages now: the history's newest checkpoint holds them all, and there are 12 checkpoints.
  const history = second.stdout
    .trim()
    .split("\n")
    .filter((l) => /^[0-9a-f-]{36} \d+$/.test(l));
  expect(history).toHaveLength(12);
  expect(history[0]).toMatch(/ 8$/);
});
