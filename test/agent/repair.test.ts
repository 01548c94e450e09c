import { describe, expect, it } from "vitest";
import { findPendingToolCalls, INTERRUPTED_RESULT, isHistoryValid, repairHistory } from "../../src/agent/repair.js";
import type { Message } from "../../src/core/messages.js";
import { validateAnthropic, validateOpenAI } from "../../src/testing/model-server.js";
import { loadSampleConversations } from "../../src/testing/samples.js";

const call = (id: string, args = "{}") => ({ id, type: "function", function: { name: "f", arguments: args } });

describe("history repair", () => {
  it("leaves every recorded conversation untouched", () => {
    for (const conv of loadSampleConversations({ source: "all" })) {
      const r = repairHistory(conv.protocol, conv.messages);
      expect(r.actions, conv.id).toEqual([]);
      expect(r.history).toEqual(conv.messages);
    }
  });

  it("answers a dangling OpenAI call as interrupted right after its message, keeps everything else, is idempotent", () => {
    const history: Message[] = [
      { role: "user", content: "Charge 5 EUR" },
      { role: "assistant", content: null, tool_calls: [call("c1", '{"amount":5}'), call("c2")] },
      { role: "tool", tool_call_id: "c2", content: "ok" },
      { role: "user", content: "done?" },
    ];
    expect(findPendingToolCalls("openai", history).map((p) => p.id)).toEqual(["c1"]);
    const once = repairHistory("openai", history);
    expect(once.history).toEqual([
      history[0],
      history[1],
      history[2],
      { role: "tool", tool_call_id: "c1", content: INTERRUPTED_RESULT, interrupted: true },
      history[3],
    ]);
    expect(once.actions).toEqual([{ kind: "interrupted-result-added", index: 1, toolCallId: "c1" }]);
    expect(validateOpenAI({ messages: once.history })).toBeUndefined();
    const twice = repairHistory("openai", once.history);
    expect(twice.actions).toEqual([]);
    expect(twice.history).toEqual(once.history);
  });

  it("removes orphaned results, calls with half-written JSON arguments and empty assistant messages", () => {
    const history: Message[] = [
      { role: "user", content: "hi" },
      { role: "tool", tool_call_id: "ghost", content: "orphan" },
      { role: "assistant", content: "", tool_calls: [call("bad", '{"city":"Par')] },
      { role: "tool", tool_call_id: "bad", content: "never ran" },
      { role: "assistant", content: "" },
      { role: "user", content: "again" },
    ];
    const r = repairHistory("openai", history);
    expect(r.history).toEqual([history[0], history[5]]);
    expect(r.actions.map((a) => a.kind).sort()).toEqual([
      "empty-assistant-removed",
      "empty-assistant-removed",
      "invalid-call-removed",
      "orphan-result-removed",
      "orphan-result-removed",
    ]);
    expect(isHistoryValid("openai", r.history)).toBe(true);
  });

  it("PB-01 (Anthropic): inserts is_error tool_result blocks, first in the next user message, and drops orphans", () => {
    const history: Message[] = [
      { role: "user", content: [{ type: "text", text: "List the files in /tmp" }] },
      {
        role: "assistant",
        content: [
          { type: "text", text: "Running ls." },
          { type: "tool_use", id: "toolu_A1", name: "bash", input: { cmd: "ls /tmp" } },
        ],
      },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "toolu_ZZ", content: "orphan" },
          { type: "text", text: "hello?" },
        ],
      },
    ];
    const r = repairHistory("anthropic", history);
    expect(r.history[2]).toEqual({
      role: "user",
      content: [
        { type: "tool_result", tool_use_id: "toolu_A1", is_error: true, content: INTERRUPTED_RESULT },
        { type: "text", text: "hello?" },
      ],
    });
    expect(validateAnthropic({ messages: r.history })).toBeUndefined();
    expect(repairHistory("anthropic", r.history).actions).toEqual([]);
    // at the end of the history, the synthetic results form their own user message
    const atEnd = repairHistory("anthropic", history.slice(0, 2));
    expect(atEnd.history).toHaveLength(3);
    expect(validateAnthropic({ messages: [...atEnd.history, { role: "user", content: "next" }] })).toBeUndefined();
  });

  it("with policy 'rerun' leaves only the last message's calls pending", () => {
    const history: Message[] = [
      { role: "user", content: "go" },
      { role: "assistant", content: null, tool_calls: [call("old")] },
      { role: "user", content: "and?" },
      { role: "assistant", content: null, tool_calls: [call("new1"), call("new2", '{"x":1}')] },
      { role: "tool", tool_call_id: "new1", content: "ok" },
    ];
    const r = repairHistory("openai", history, "rerun");
    expect(r.pending).toEqual([{ index: 3, id: "new2", name: "f", arguments: '{"x":1}' }]);
    expect(r.actions).toEqual([{ kind: "interrupted-result-added", index: 1, toolCallId: "old" }]);
  });
});
