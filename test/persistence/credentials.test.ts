/**
 * "No secrets at rest": credential-looking values in apiKeyEnv / apiProvider /
 * modelName are refused with a CredentialError naming the field, nothing is
 * written, the secret never appears in the error; the key is read from the
 * env var at call time (MissingSecretError when it is unset). Case pb-23.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import {
  BaseAgent,
  CredentialError,
  credentialReason,
  exportStateString,
  FileBackend,
  loadState,
  MissingSecretError,
  resolveApiKey,
  saveState,
} from "../../src/index.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-cred-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const SECRET = "sk-test-FAKE-0000000000000000";

const refused: [field: "apiKeyEnv" | "apiProvider" | "modelName", value: string][] = [
  ["apiKeyEnv", SECRET],
  ["apiKeyEnv", "sk-ant-api03-FAKEFAKEFAKEFAKE"],
  ["apiKeyEnv", `Bearer ${SECRET}`],
  ["apiKeyEnv", "my key"], // not an env-var name
  ["apiKeyEnv", "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5"], // high-entropy token
  ["apiProvider", "https://user:pa55word@proxy.example.invalid/v1"],
  ["apiProvider", "https://api.example.invalid/v1?api_key=abc123"],
  ["apiProvider", "https://hooks.example.invalid/x?token=tok-FAKE-123"],
  ["apiProvider", "https://api.example.invalid/v1/chat/completions?key=AIzaFAKE"],
  ["apiProvider", `https://api.example.invalid/v1#access_token=${SECRET}`],
  ["apiProvider", "Bearer abcdef123456"],
  ["modelName", `gpt-4o ${SECRET}`],
  ["modelName", "ghp_FAKEfake0123456789FAKEfake0123456789"],
  ["modelName", "AKIAFAKEFAKEFAKEFAKE"],
  ["modelName", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl"],
];

const allowed: [field: "apiKeyEnv" | "apiProvider" | "modelName", value: string][] = [
  ["apiKeyEnv", "OPENAI_API_KEY"],
  ["apiKeyEnv", ""],
  ["apiKeyEnv", "MY_SERVICE_ANTHROPIC_API_KEY_2"],
  ["apiProvider", "https://api.openai.com/v1/chat/completions"],
  ["apiProvider", "https://api.anthropic.com/v1/messages"],
  ["apiProvider", "http://127.0.0.1:11434/v1"],
  ["apiProvider", "https://my-res.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=2024-06-01"],
  ["apiProvider", "https://gateway.ai.cloudflare.com/v1/0123456789abcdef0123456789abcdef/my-gw/openai"],
  ["modelName", "gpt-4o-mini"],
  ["modelName", "claude-sonnet-4-5-20250929"],
  ["modelName", "meta-llama/Meta-Llama-3.1-405B-Instruct-Turbo"],
  ["modelName", "accounts/fireworks/models/llama-v3p1-405b-instruct"],
  ["modelName", "ft:gpt-4o-mini-2024-07-18:my-org:custom-suffix:9abcDEF1"],
  ["modelName", "skill-model"],
];

describe("credential check on save", () => {
  it.each(refused)("refuses %s = %j with a CredentialError naming the field, writing nothing", async (field, value) => {
    const backend = new FileBackend({ baseDir: mkdtempSync(path.join(tmp, "f-")) });
    const agent = new BaseAgent({ name: "leaky", apiKeyEnv: "OPENAI_API_KEY", [field]: value });
    const e = await saveState(agent, "agent-23", { backend }).catch((x) => x);
    expect(e).toBeInstanceOf(CredentialError);
    expect(e.code).toBe("CREDENTIAL_REFUSED");
    expect(e.field).toBe(`config.${field}`);
    expect(e.message).not.toContain(value);
    expect(await backend.listKeys()).toEqual([]);
    expect(() => exportStateString(agent)).toThrow(CredentialError);
  });

  it.each(allowed)("accepts %s = %j", (field, value) => {
    expect(credentialReason(value)).toBeUndefined();
    const agent = new BaseAgent({ [field]: value });
    expect(exportStateString(agent)).toContain("[CONFIG]");
  });
});

describe("pb-23: secrets never reach storage; the key comes from the env at call time", () => {
  it("raw storage holds the env-var NAME only, and loading needs the env var only when asked", async () => {
    const dbPath = path.join(mkdtempSync(path.join(tmp, "db-")), "s.db");
    const sqlite = new SQLiteBackend({ dbPath });
    const baseDir = mkdtempSync(path.join(tmp, "f-"));
    const file = new FileBackend({ baseDir });
    const agent = new BaseAgent({
      name: "agent-23",
      apiKeyEnv: "PB23_OPENAI_API_KEY",
      apiProvider: "https://proxy.example.invalid/v1",
      modelName: "gpt-x",
    });
    await saveState(agent, "agent-23", { backend: sqlite });
    await saveState(agent, "agent-23", { backend: file });
    sqlite.close();
    const raw = [readFileSync(dbPath), ...readdirSync(baseDir).map((f) => readFileSync(path.join(baseDir, f)))]
      .map((b) => b.toString("latin1"))
      .join("\n");
    for (const s of ["sk-test-FAKE", "pa55word", "tok-FAKE-123"]) expect(raw).not.toContain(s);
    expect(raw).toContain("PB23_OPENAI_API_KEY");

    delete process.env.PB23_OPENAI_API_KEY;
    const loaded = await loadState("agent-23", { backend: file });
    const e = (() => {
      try {
        return resolveApiKey(loaded.config);
      } catch (x) {
        return x;
      }
    })();
    expect(e).toBeInstanceOf(MissingSecretError);
    expect((e as MissingSecretError).envVar).toBe("PB23_OPENAI_API_KEY");
    expect((e as Error).message).toContain("PB23_OPENAI_API_KEY");
    await expect(loadState("agent-23", { backend: file, requireSecrets: true })).rejects.toBeInstanceOf(
      MissingSecretError,
    );

    process.env.PB23_OPENAI_API_KEY = SECRET;
    try {
      const again = await loadState("agent-23", { backend: file, requireSecrets: true });
      expect(resolveApiKey(again.config)).toBe(SECRET);
    } finally {
      delete process.env.PB23_OPENAI_API_KEY;
    }
  });

  it("an agent without apiKeyEnv gets a MissingSecretError saying to set it", () => {
    expect(() => resolveApiKey({ apiKeyEnv: "" })).toThrow(/apiKeyEnv/);
  });
});
