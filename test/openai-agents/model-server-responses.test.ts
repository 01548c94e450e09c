/**
 * The local model server's OpenAI Responses protocol (`POST /v1/responses`),
 * over real HTTP: the JSON response object, the SSE event sequence, and the
 * request validation the real API applies to a history (a function call
 * without its output, an output without its call).
 */
import { afterEach, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer, validateResponses } from "../../src/testing/model-server.js";

let server: ModelServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const post = (body: Record<string, unknown>) =>
  fetch(`${server?.url}/responses`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer test" },
    body: JSON.stringify(body),
  });

/** Parses an SSE body into `{ event, data }` records. */
async function events(res: Response): Promise<Array<{ event: string; data: Record<string, unknown> }>> {
  const text = await res.text();
  return text
    .split("\n\n")
    .filter((block) => block.trim() !== "")
    .map((block) => {
      const event = /^event: (.*)$/m.exec(block)?.[1] ?? "";
      const data = JSON.parse(/^data: (.*)$/m.exec(block)?.[1] ?? "null") as Record<string, unknown>;
      return { event, data };
    });
}

const turn = {
  thinking: "think first",
  text: "Hello there",
  toolCalls: [{ id: "call_1", name: "add", arguments: { a: 1, b: 2 } }],
  usage: { inputTokens: 7, outputTokens: 3 },
};

describe("model server: OpenAI Responses", () => {
  it("answers JSON with reasoning, message and function_call output items", async () => {
    server = await startModelServer({ script: [turn] });
    const res = await post({ model: "m1", input: "hi" });
    expect(res.status).toBe(200);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ object: "response", status: "completed", model: "m1" });
    expect(body.output).toMatchObject([
      { type: "reasoning", summary: [{ type: "summary_text", text: "think first" }] },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "Hello there" }] },
      { type: "function_call", call_id: "call_1", name: "add", arguments: '{"a":1,"b":2}' },
    ]);
    expect(body.usage).toMatchObject({ input_tokens: 7, output_tokens: 3, total_tokens: 10 });
    expect(server.requests[0]).toMatchObject({ protocol: "responses", path: "/v1/responses", status: 200 });
  });

  it("streams the event sequence, deltas split, ending with response.completed carrying the whole response", async () => {
    server = await startModelServer({ script: [{ ...turn, chunkSize: 2 }] });
    const res = await post({ model: "m1", input: [{ role: "user", content: "hi" }], stream: true });
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const all = await events(res);
    expect(all.every((e) => e.event === e.data.type)).toBe(true);
    expect(all.map((e) => e.data.sequence_number)).toEqual(all.map((_, i) => i));
    const types = all.map((e) => e.event);
    expect(types[0]).toBe("response.created");
    expect(types.at(-1)).toBe("response.completed");
    const deltas = (type: string) =>
      all
        .filter((e) => e.event === type)
        .map((e) => e.data.delta)
        .join("");
    expect(all.filter((e) => e.event === "response.output_text.delta").length).toBeGreaterThan(1);
    expect(deltas("response.output_text.delta")).toBe("Hello there");
    expect(deltas("response.reasoning_summary_text.delta")).toBe("think first");
    expect(deltas("response.function_call_arguments.delta")).toBe('{"a":1,"b":2}');
    expect(types.filter((t) => t === "response.output_item.added")).toHaveLength(3);
    expect(types.filter((t) => t === "response.output_item.done")).toHaveLength(3);
    const final = all.at(-1)?.data.response as Record<string, unknown>;
    expect((final.output as unknown[]).length).toBe(3);
    expect(final.status).toBe("completed");
  });

  it("a length finish is an incomplete response (max_output_tokens), JSON and streamed", async () => {
    server = await startModelServer({
      script: [
        { text: "cut", finishReason: "length" },
        { text: "cut", finishReason: "length" },
      ],
    });
    const json = (await (await post({ input: "hi" })).json()) as Record<string, unknown>;
    expect(json).toMatchObject({ status: "incomplete", incomplete_details: { reason: "max_output_tokens" } });
    const streamed = await events(await post({ input: "hi", stream: true }));
    expect(streamed.at(-1)?.event).toBe("response.incomplete");
  });

  it("refuses a history with a call but no output, or an output with no call (400, OpenAI error body)", async () => {
    server = await startModelServer({ script: [{ text: "ok" }] });
    const call = { type: "function_call", call_id: "c1", name: "add", arguments: "{}" };
    const output = { type: "function_call_output", call_id: "c1", output: "3" };
    const missing = await post({ input: [{ role: "user", content: "hi" }, call] });
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { error: { message: string } }).error.message).toContain(
      "No tool output found for function call c1",
    );
    const orphan = await post({ input: [{ role: "user", content: "hi" }, output] });
    expect(orphan.status).toBe(400);
    const ok = await post({ input: [{ role: "user", content: "hi" }, call, output] });
    expect(ok.status).toBe(200);
    expect(server.requests.map((r) => r.status)).toEqual([400, 400, 200]);
    expect(validateResponses({ input: "" })).toMatch(/empty/);
    expect(validateResponses({ input: [] })).toMatch(/non-empty/);
    expect(validateResponses({ input: [{ ...call, arguments: "{bad" }, output] })).toMatch(/not valid JSON/);
    expect(validateResponses({ input: [call], previous_response_id: "resp_1" })).toBeUndefined();
  });

  it("scripted errors use the OpenAI error body", async () => {
    server = await startModelServer({ script: [{ error: { status: 429, message: "slow down" } }] });
    const res = await post({ input: "hi" });
    expect(res.status).toBe(429);
    expect(await res.json()).toEqual({ error: { message: "slow down", type: "rate_limit_error", code: null } });
  });
});
