/**
 * Images and files in agent sessions (issue 13): a base64 image part made the
 * saved BaseAgent session unusable (a raw `TypeError: Invalid URL` when its
 * history was converted back for the next turn) and a PDF part was stored as
 * JSON text. Both now round-trip through a saved session, on every protocol.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { ModelMessage } from "ai";
import { afterAll, describe, expect, it } from "vitest";
import { fromModelMessages, toModelMessages } from "../../src/agent/ai-sdk-messages.js";
import { AnthropicAgent } from "../../src/agent/anthropic-agent.js";
import { BaseAgent } from "../../src/agent/base-agent.js";
import { FileBackend } from "../../src/backends/file/index.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend } from "../../src/backends/types.js";
import { loadState, saveState } from "../../src/persistence/api.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-ai-sdk-agent-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const PNG = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 1, 2, 3]);
const PNG64 = Buffer.from(PNG).toString("base64");
const PDF = Buffer.from("%PDF-1.4\n%%EOF\n");
const PDF64 = PDF.toString("base64");

function userTurn(): ModelMessage[] {
  return [
    {
      role: "user",
      content: [
        { type: "text", text: "What is in these?" },
        { type: "image", image: PNG64, mediaType: "image/png" },
        { type: "image", image: PNG },
        { type: "image", image: new URL("https://example.com/cat.jpg") },
        { type: "image", image: `data:image/png;base64,${PNG64}` },
        { type: "file", data: PDF64, mediaType: "application/pdf", filename: "report.pdf" },
        { type: "file", data: new Uint8Array(PDF), mediaType: "application/pdf" },
      ],
    },
  ];
}

/** What each part carries, in bytes: the content that must survive. */
function payloads(messages: ModelMessage[]): unknown[] {
  const content = messages[0]?.content;
  if (!Array.isArray(content)) throw new Error("expected parts");
  return content.map((p) => {
    if (p.type === "text") return p.text;
    const data = p.type === "image" ? p.image : p.type === "file" ? p.data : undefined;
    if (data instanceof URL) return data.href;
    if (data instanceof Uint8Array) return Buffer.from(data).toString("base64");
    const s = String(data);
    return s.startsWith("data:") ? s.slice(s.indexOf(",") + 1) : s;
  });
}

const backends: Array<[string, () => StateBackend]> = [
  ["memory", () => new MemoryBackend()],
  ["file", () => new FileBackend({ baseDir: mkdtempSync(path.join(tmp, "f-")) })],
  ["sqlite", () => new SQLiteBackend({ dbPath: path.join(mkdtempSync(path.join(tmp, "s-")), "s.db") })],
];

describe.each(backends)("image and file parts in a saved session on %s", (_name, make) => {
  for (const Agent of [BaseAgent, AnthropicAgent]) {
    it(`${Agent.name}: saved, loaded and converted back for the next turn, with every byte`, async () => {
      const backend = make();
      const agent = new Agent({ name: `media-${Agent.name}` });
      agent.history.push(...fromModelMessages(agent.protocol, userTurn()));
      const stored = JSON.stringify(agent.history);
      expect(stored).not.toContain('"text":"{\\"type\\":\\"file\\"'); // a PDF is not JSON text
      await saveState(agent, "media", { backend });
      const loaded = await loadState<BaseAgent>("media", { backend });
      expect(loaded.history).toStrictEqual(agent.history);
      const model = toModelMessages(loaded.protocol, loaded.history); // was: TypeError: Invalid URL
      expect(payloads(model)).toStrictEqual(payloads(userTurn()));
      const content = model[0]?.content as Array<{ type: string; mediaType?: string; filename?: string }>;
      expect(content.map((p) => p.type)).toStrictEqual(["text", "image", "image", "image", "image", "file", "file"]);
      expect(content[5]).toMatchObject({ mediaType: "application/pdf", filename: "report.pdf" });
      expect(content[2]?.mediaType).toBe("image/png"); // sniffed from the bytes
      // and the stored history converts to model messages and back exactly
      expect(fromModelMessages(loaded.protocol, model)).toStrictEqual(loaded.history);
      await backend.close?.();
    });
  }
});

describe("base64 image and file parts from the AI SDK", () => {
  it("come back from an OpenAI history as they went in (base64 + mediaType)", () => {
    const parts = [
      { type: "image" as const, image: PNG64, mediaType: "image/png" },
      { type: "file" as const, data: PDF64, mediaType: "application/pdf", filename: "r.pdf" },
    ];
    for (const protocol of ["openai", "anthropic"] as const) {
      const model = toModelMessages(protocol, fromModelMessages(protocol, [{ role: "user", content: parts }]));
      const back = ((model[0] as ModelMessage).content as Array<Record<string, unknown>>).map(
        ({ providerOptions: _, ...p }) => p,
      );
      expect(back, protocol).toStrictEqual(parts);
    }
  });

  it("an OpenAI image_url holding bare base64 (as older versions stored it) loads, not a TypeError", () => {
    const history = [{ role: "user" as const, content: [{ type: "image_url", image_url: { url: PNG64 } }] }];
    const model = toModelMessages("openai", history);
    expect(((model[0] as ModelMessage).content as Array<{ image: unknown }>)[0]?.image).toBe(PNG64);
    expect(fromModelMessages("openai", model)).toStrictEqual(history);
  });
});
