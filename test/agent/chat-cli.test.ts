import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chatCommand } from "../../src/cli/chat.js";
import { UsageError } from "../../src/ops/errors.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";

const fixture = path.join(import.meta.dirname, "../fixtures/agent/chat-cli.ts");
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-chat-"));
let server: ModelServer;
beforeAll(async () => {
  server = await startModelServer({ script: [] });
});
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

function chat(args: string[], input: string): Promise<{ code: number | null; out: string; err: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", fixture, ...args], {
    env: { ...process.env, DUMPLINGS_PERSISTENCE: "" },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => {
    out += d;
  });
  child.stderr.on("data", (d) => {
    err += d;
  });
  child.stdin.end(input);
  return new Promise((resolve) => child.on("exit", (code) => resolve({ code, out, err })));
}

describe("dumplings chat", () => {
  it.each(["openai", "anthropic"] as const)(
    "starts a %s session, streams answers, saves, and resumes it in a new process",
    async (protocol) => {
      const db = path.join(dir, `${protocol}.db`);
      const common = ["--session", `chat-${protocol}`, "--backend", "sqlite", "--db", db];
      server.push({ text: "Hello from the model!", chunkSize: 3 });
      const first = await chat(
        [...common, "--provider", server.url, "--model", "scripted", "--protocol", protocol, "--prompt", "Be brief."],
        "hi there\n/save\n/exit\n",
      );
      expect(first.code, first.err).toBe(0);
      expect(first.out).toContain(`new session "chat-${protocol}"`);
      expect(first.out).toContain("assistant> Hello from the model!");
      expect(first.out).toMatch(/saved "chat-openai"|saved "chat-anthropic"/);
      const sent = server.requests.at(-1);
      expect(sent?.stream).toBe(true);
      expect(sent?.path).toBe(protocol === "openai" ? "/v1/chat/completions" : "/v1/messages");

      server.push({ text: "Second answer." });
      const second = await chat(common, "and again\n/history\n/exit\n");
      expect(second.code, second.err).toBe(0);
      expect(second.out).toContain(`resumed session "chat-${protocol}"`);
      expect(second.out).toMatch(/user\s+hi there/);
      expect(second.out).toMatch(/assistant\s+Hello from the model!/);
      expect(second.out).toContain("assistant> Second answer.");
      // the resumed request carried the whole conversation
      const body = JSON.stringify(server.requests.at(-1)?.body);
      expect(body).toContain("hi there");
      expect(body).toContain("Hello from the model!");
      expect(body).toContain("Be brief.");
    },
    60_000,
  );

  it("refuses to start a session without --provider/--model (a usage error, nothing stored)", async () => {
    const db = path.join(dir, "none.db");
    const run = chatCommand().parseAsync(["--session", "nothing-here", "--backend", "sqlite", "--db", db], {
      from: "user",
    });
    await expect(run).rejects.toBeInstanceOf(UsageError);
    await expect(run).rejects.toThrow(/give --provider and --model/);
  });
});
