/**
 * The chat rendering of a history page (src/ui/chat.ts): both protocols, a
 * tool call beside its result, a result whose call is on another page,
 * reasoning folded, a partial (interrupted) message marked, an enveloped
 * message shown by its preview; every stored string escaped.
 */
import { describe, expect, it } from "vitest";
import type { Message } from "../../src/core/messages.js";
import { renderChat } from "../../src/ui/chat.js";

const html = (messages: unknown[], offset = 0) => String(renderChat(messages as Message[], offset));

describe("renderChat", () => {
  it("puts an OpenAI tool call beside its result and does not repeat the result", () => {
    const out = html([
      { role: "user", content: "weather <b>Paris</b>?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
      },
      { role: "tool", tool_call_id: "c1", content: "18 °C <script>x</script>" },
    ]);
    expect(out).toContain("weather &lt;b&gt;Paris&lt;/b&gt;?");
    expect(out).toMatch(
      /data-tool-call="c1">[\s\S]*get_weather[\s\S]*&quot;city&quot;: &quot;Paris&quot;[\s\S]*← result <span class="muted">\(#2\)<\/span>[\s\S]*18 °C &lt;script&gt;x&lt;\/script&gt;/,
    );
    expect(out).toContain("#2 tool: result shown beside its call above");
    expect(out).not.toContain("<script>");
  });

  it("shows a result whose call is on an earlier page on its own, with the call id", () => {
    const out = html([{ role: "tool", tool_call_id: "c9", content: "done" }], 50);
    expect(out).toContain('data-index="50"');
    expect(out).toMatch(/← result of <span class="muted">c9<\/span>[\s\S]*<pre>done<\/pre>/);
  });

  it("renders Anthropic blocks: thinking folded, tool_use beside tool_result, an error result tagged", () => {
    const out = html([
      {
        role: "assistant",
        content: [
          { type: "thinking", thinking: "the user wants <i>files</i>" },
          { type: "text", text: "Listing." },
          { type: "tool_use", id: "tu1", name: "ls", input: { path: "/tmp" } },
        ],
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "tu1", content: "denied", is_error: true }] },
    ]);
    expect(out).toMatch(
      /<details class="reasoning"><summary>reasoning<\/summary><div class="text">the user wants &lt;i&gt;files&lt;\/i&gt;<\/div><\/details>/,
    );
    expect(out).toMatch(
      /data-tool-call="tu1">[\s\S]*<code>ls<\/code>[\s\S]*<span class="tag">error<\/span>[\s\S]*<pre>denied<\/pre>/,
    );
    expect(out).toContain("#1 user: result shown beside its call above");
  });

  it("marks a partial message and shows OpenAI reasoning_content", () => {
    const out = html([{ role: "assistant", content: "The answer is", partial: true, reasoning_content: "think" }]);
    expect(out).toContain('class="msg assistant partial"');
    expect(out).toMatch(/<span class="tag"[^>]*>partial<\/span>/);
    expect(out).toContain("<summary>reasoning</summary>");
  });

  it("folds a long system prompt and previews an enveloped message", () => {
    const out = html([
      { role: "system", content: `# Policy\n${"x".repeat(1000)}` },
      { aiSdk: { id: "m1", role: "user", parts: [{ type: "text", text: "hi <u>there</u>" }] } },
    ]);
    expect(out).toMatch(/<details><summary class="small"># Policy… \(1009 characters\)<\/summary>/);
    expect(out).toContain("stored aiSdk message");
    expect(out).toContain("hi &lt;u&gt;there&lt;/u&gt;");
  });
});
