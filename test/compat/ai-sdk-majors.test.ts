/**
 * The README's durable example (test/compat/readme-durable.ts: DurableAgent
 * with an approval, then a user's own generateText / streamText loop through
 * durableModel) typechecked and run against both AI SDK majors users have:
 * ai@6 on this Node (20+), and ai@7 on Node 22 from compat/ai7 (installed by
 * scripts/compat-ai7.sh, which .ci/run calls). The same built dist serves both.
 */
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { SERVICES_REQUIRED } from "../helpers/services.js";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "../..");
const example = path.join(root, "test/compat/readme-durable.ts");
const tsc = path.join(root, "node_modules/typescript/bin/tsc");
const node22 = path.join(root, "compat/ai7/node_modules/.bin/node");
const ai7Ready = existsSync(node22) && existsSync(path.join(root, "compat/ai7/node_modules/ai/package.json"));

interface ExampleOutput {
  first: string;
  toolCallId: string;
  status: string;
  text: string | null;
  modelRequests: number;
  effects: string[];
  steps: string[];
  ownLoop: { status: string; text: unknown; steps: string[]; replayed: unknown; requestsOnReplay: number };
  streamed: { text: unknown; replayed: unknown; requestsOnReplay: number };
  ai: string;
}

async function runExample(command: string, args: string[]): Promise<ExampleOutput> {
  const dir = mkdtempSync(path.join(tmpdir(), "dumplings-compat-"));
  try {
    const { stdout } = await run(command, [...args, example, path.join(dir, "runs.db")], {
      cwd: root,
      timeout: 120_000,
    });
    return JSON.parse(stdout.trim().split("\n").at(-1) ?? "") as ExampleOutput;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function expectReadmeBehaviour(out: ExampleOutput, major: string): void {
  expect(out.ai.split(".")[0]).toBe(major);
  // paused for the approval, resumed after approve(), every model request sent once
  expect(out).toMatchObject({
    first: "waiting",
    toolCallId: "call_refund",
    status: "completed",
    text: "Refunded 42 for order 7.",
    effects: ["lookup 7", "refund 7 42", "lookup 8"],
    steps: [
      "llm:completed",
      "tool:lookup:completed",
      "llm:completed",
      "signal:approval:call_refund:completed",
      "tool:refund:completed",
      "llm:completed",
    ],
  });
  // the user's own loop: journaled model and tool steps, replayed without a request
  expect(out.ownLoop).toEqual({
    status: "completed",
    text: "Order 8 totals 42.",
    steps: ["llm:completed", "tool:lookup:completed", "llm:completed"],
    replayed: "Order 8 totals 42.",
    requestsOnReplay: 0,
  });
  expect(out.streamed).toEqual({
    text: "Streamed once, replayed from the journal.",
    replayed: "Streamed once, replayed from the journal.",
    requestsOnReplay: 0,
  });
  // 3 agent calls + 2 of the loop + 1 stream: none repeated by a replay
  expect(out.modelRequests).toBe(6);
}

describe("the README's durable example on both AI SDK majors", () => {
  it("ai@6: typechecks and runs (Node 20; the example imports the built dist: `npm run build` first)", async () => {
    await run(process.execPath, [tsc, "-p", "test/compat/tsconfig.json"], { cwd: root, timeout: 120_000 });
    expectReadmeBehaviour(await runExample(process.execPath, ["--import", "tsx"]), "6");
  }, 180_000);

  if (!ai7Ready && SERVICES_REQUIRED) {
    it("ai@7: the compat/ai7 bed is installed", () => {
      throw new Error("compat/ai7 is not installed: run `bash scripts/compat-ai7.sh` (.ci/run does)");
    });
  }
  it.skipIf(!ai7Ready)(
    "ai@7: the library and the example typecheck against ai@7's types and run on Node 22",
    async () => {
      // src (every file) and the example, with `ai` / `@ai-sdk/*` resolved to ai@7's packages
      await run(process.execPath, [tsc, "-p", "compat/ai7/tsconfig.json"], { cwd: root, timeout: 120_000 });
      const { stdout } = await run(node22, ["--version"]);
      expect(stdout.trim()).toMatch(/^v22\./);
      // Node 22 strips the example's types itself; the hooks resolve ai@7 and the Node 22 better-sqlite3
      expectReadmeBehaviour(await runExample(node22, ["--import", "./compat/ai7/hooks.mjs"]), "7");
    },
    180_000,
  );
});
