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
  AnthropicAgent,
  BaseAgent,
  CredentialError,
  configure,
  exportStateString,
  FileBackend,
  loadState,
  loadStateString,
  MemoryBackend,
  type Message,
  MissingSecretError,
  saveState,
} from "../../src/index.js";
import { credentialReason, REDACTED, redactSecrets, resolveApiKey } from "../../src/persistence/credentials.js";

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

describe("credential check at construction (issue 25)", () => {
  it("new BaseAgent / AnthropicAgent refuse each refused value with a CredentialError naming the field; a stored state is restored as it is and its save refuses it", async () => {
    for (const [field, value] of refused) {
      for (const make of [
        () => new BaseAgent({ name: "leaky", apiKeyEnv: "OPENAI_API_KEY", [field]: value }),
        () => new AnthropicAgent({ name: "leaky", apiKeyEnv: "ANTHROPIC_API_KEY", [field]: value }),
      ]) {
        const e = (() => {
          try {
            make();
          } catch (x) {
            return x;
          }
        })();
        expect(e, `${field} = ${value}`).toBeInstanceOf(CredentialError);
        expect((e as CredentialError).code).toBe("CREDENTIAL_REFUSED");
        expect((e as CredentialError).field).toBe(`config.${field}`);
        expect((e as Error).message).not.toContain(value);
      }
    }
    // A hand-edited file with a key in api_key_env still loads (so it can be fixed); saving it is refused.
    const backend = new FileBackend({ baseDir: mkdtempSync(path.join(tmp, "f-")) });
    const text = exportStateString(new BaseAgent({ name: "edited", apiKeyEnv: "OPENAI_API_KEY" })).replace(
      "api_key_env = OPENAI_API_KEY",
      `api_key_env = ${SECRET}`,
    );
    expect(text).toContain(SECRET);
    const agent = await loadStateString(text);
    expect(agent.config.apiKeyEnv).toBe(SECRET);
    const e = await saveState(agent, "edited", { backend }).catch((x) => x);
    expect(e).toBeInstanceOf(CredentialError);
    expect(await backend.listKeys()).toEqual([]);
  });
});

describe("credential check on save", () => {
  it.each(refused)("refuses %s = %j with a CredentialError naming the field, writing nothing", async (field, value) => {
    const backend = new FileBackend({ baseDir: mkdtempSync(path.join(tmp, "f-")) });
    // refused at construction (above): set afterwards, the save still refuses it
    const agent = new BaseAgent({ name: "leaky", apiKeyEnv: "OPENAI_API_KEY" });
    agent.config[field] = value;
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

describe("pb-23: secrets inside tool-call arguments follow the documented toolArgumentSecrets policy", () => {
  const call: Message = {
    role: "assistant",
    content: null,
    tool_calls: [
      {
        id: "call_S1",
        type: "function",
        function: {
          name: "http_get",
          arguments: `{"url":"https://api.example.invalid","api_key":"${SECRET}","password":"hunter2","q":"weather"}`,
        },
      },
    ],
  };
  const anthropicCall: Message = {
    role: "assistant",
    content: [
      { type: "text", text: "calling" },
      {
        type: "tool_use",
        id: "toolu_1",
        name: "http_get",
        input: { headers: { Authorization: `Bearer ${SECRET}` }, n: 1 },
      },
    ],
  };

  it("keep (default): the history round-trips exactly", async () => {
    configure({ toolArgumentSecrets: "keep" });
    const backend = new MemoryBackend();
    await saveState(new BaseAgent({ history: [call] }), "keep", { backend });
    expect((await loadState("keep", { backend })).history).toEqual([call]);
  });

  it("redact: stored arguments hold [REDACTED]; the agent in memory keeps the real values; appends stay O(new)", async () => {
    configure({ toolArgumentSecrets: "redact" });
    try {
      const baseDir = mkdtempSync(path.join(tmp, "red-"));
      const backend = new FileBackend({ baseDir });
      const agent = new BaseAgent({ name: "agent-23", history: [{ role: "user", content: "get it" }, call] });
      await saveState(agent, "agent-23", { backend });
      const raw = readFileSync(path.join(baseDir, "agent-23.duas"), "utf8");
      expect(raw).not.toContain("sk-test-FAKE");
      expect(raw).not.toContain("hunter2");
      expect(raw).toContain("weather");
      expect(agent.history[1]).toBe(call); // untouched in memory
      const loaded = await loadState("agent-23", { backend });
      const args = JSON.parse(
        (loaded.history[1] as { tool_calls: { function: { arguments: string } }[] }).tool_calls[0]!.function.arguments,
      );
      expect(args).toEqual({ url: "https://api.example.invalid", api_key: REDACTED, password: REDACTED, q: "weather" });
      agent.history.push({ role: "tool", tool_call_id: "call_S1", content: "sunny" });
      const r = await saveState(agent, "agent-23", { backend });
      expect(r.written).toBe(1); // the redacted copy does not defeat append detection
      const an = new AnthropicAgent({ history: [{ role: "user", content: "x" }, anthropicCall] });
      expect(an.exportStateString()).not.toContain("sk-test-FAKE");
    } finally {
      configure({ toolArgumentSecrets: "keep" });
    }
  });

  it("refuse: the save fails naming the message and field, nothing written", async () => {
    configure({ toolArgumentSecrets: "refuse" });
    try {
      const backend = new MemoryBackend();
      const e = await saveState(new BaseAgent({ history: [call] }), "r", { backend }).catch((x) => x);
      expect(e).toBeInstanceOf(CredentialError);
      expect(e.field).toBe("history[0].tool_calls[0].function.arguments");
      expect(e.message).not.toContain(SECRET);
      expect(await backend.listKeys()).toEqual([]);
      const ae = await saveState(new AnthropicAgent({ history: [anthropicCall] }), "r", { backend }).catch((x) => x);
      expect(ae.field).toBe("history[0].content[1].input");
    } finally {
      configure({ toolArgumentSecrets: "keep" });
    }
  });

  it("redactSecrets covers key prefixes, bearer tokens, URL passwords and secret query parameters", () => {
    expect(redactSecrets(`key ${SECRET} end`)).toBe(`key ${REDACTED} end`);
    expect(redactSecrets("Authorization: Bearer abc.def-123456")).toBe(`Authorization: Bearer ${REDACTED}`);
    expect(redactSecrets("https://user:pa55word@host/x")).toBe(`https://user:${REDACTED}@host/x`);
    expect(redactSecrets("https://h/x?token=tok-FAKE-123&a=1")).toBe(`https://h/x?token=${REDACTED}&a=1`);
    expect(redactSecrets("nothing secret here: gpt-4o, https://api.openai.com/v1")).toBe(
      "nothing secret here: gpt-4o, https://api.openai.com/v1",
    );
  });
});
