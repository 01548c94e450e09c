/**
 * A real local model provider for tests and demos: an HTTP server (node:http)
 * that speaks the OpenAI chat-completions protocol (`POST …/chat/completions`,
 * JSON or SSE streaming with tool-call deltas split across chunks, parallel
 * tool calls, error statuses) and the Anthropic Messages protocol
 * (`POST …/messages`, JSON or its `message_start` … `message_stop` event
 * stream, `tool_use` / `tool_result`) and the OpenAI Responses protocol
 * (`POST …/responses`, JSON or its `response.created` … `response.completed`
 * event stream, with `reasoning`, `message` and `function_call` output items),
 * replaying scripted responses.
 *
 * It counts and records every request it serves (`server.requests`), and by
 * default validates each request the way the real providers do (a tool call
 * without its result, or a result without its call, is answered with a 400),
 * so a test can prove that a history was sent in a state the API accepts.
 *
 * No function of the code under test is mocked: the AI SDK providers talk to
 * this server over real sockets exactly as they would to a hosted model.
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

import { checkOptions, optionKeys } from "../core/options.js";

/** The keys of {@link ModelServerOptions}: any other is an `InvalidOptionError`. */
const SERVER_OPTIONS = optionKeys<ModelServerOptions>({
  script: true,
  handler: true,
  validate: true,
  port: true,
  model: true,
});

/**
 * Wire protocol of a request, derived from its path: `openai` (`/chat/completions`),
 * `anthropic` (`/messages`) or `responses` (OpenAI Responses, `/responses`).
 */
export type WireProtocol = "openai" | "anthropic" | "responses";

/** One tool call the scripted model makes. */
export interface ScriptedToolCall {
  /** Call id. @default generated (`call_…` for OpenAI, `toolu_…` for Anthropic) */
  id?: string;
  /** Tool name. */
  name: string;
  /**
   * Arguments: an object (serialised to JSON) or a raw string sent verbatim
   * (use a string to send deliberately invalid JSON).
   */
  arguments?: unknown;
}

/** One scripted model response (protocol-neutral; the server renders it in the request's protocol). */
export interface ScriptedTurn {
  /** Assistant text. Streamed in chunks of `chunkSize` characters. */
  text?: string;
  /**
   * Reasoning text (an Anthropic `thinking` block; an OpenAI Responses `reasoning` output item
   * with this summary text; ignored for chat completions).
   */
  thinking?: string;
  /** Tool calls, in order (several = parallel tool calls). */
  toolCalls?: ScriptedToolCall[];
  /**
   * Finish reason in OpenAI terms (`stop`, `tool_calls`, `length`); mapped to
   * Anthropic `end_turn`/`tool_use`/`max_tokens`, and for Responses `length` is an
   * `incomplete` response (`max_output_tokens`). @default `tool_calls` when there are tool calls, else `stop`
   */
  finishReason?: "stop" | "tool_calls" | "length";
  /** Token usage reported. @default { inputTokens: 10, outputTokens: 5 } */
  usage?: { inputTokens: number; outputTokens: number };
  /** Answer with this HTTP error instead (400, 429, 500, …) in the protocol's error body shape. */
  error?: { status: number; message?: string };
  /** Wait this long (ms) before answering. @default 0 */
  delayMs?: number;
  /** Wait this long (ms) between streamed chunks. @default 0 */
  chunkDelayMs?: number;
  /** Characters per streamed text/argument chunk. @default 4 */
  chunkSize?: number;
  /**
   * Streaming only: destroy the connection after this many SSE events have
   * been written (simulates a dropped stream / aborted generation).
   */
  dropAfterEvents?: number;
}

/** A request the server received. */
export interface RecordedRequest {
  /** Protocol derived from the path. */
  protocol: WireProtocol;
  /** Request path, e.g. `/v1/chat/completions`, `/v1/messages`, `/v1/responses`. */
  path: string;
  /** Lower-cased request headers. */
  headers: Record<string, string | string[] | undefined>;
  /** Parsed JSON body. */
  body: Record<string, unknown>;
  /** `body.stream === true`. */
  stream: boolean;
  /** Status code the server answered with. */
  status: number;
}

/** Decides the response to one request. */
export type ModelHandler = (request: RecordedRequest, index: number) => ScriptedTurn | Promise<ScriptedTurn>;

/** Options of {@link startModelServer}. */
export interface ModelServerOptions {
  /** Responses served in order, one per request (shared by every protocol). Exhausted → HTTP 500. */
  script?: ScriptedTurn[];
  /** Computes each response instead of `script` (takes precedence). */
  handler?: ModelHandler;
  /**
   * Reject (HTTP 400, like the real APIs) a request whose history has a tool
   * call without its result, a result without its call, or an empty
   * assistant message (Responses: a `function_call` without its
   * `function_call_output`, or an output without its call). @default true
   */
  validate?: boolean;
  /** Port to listen on (127.0.0.1). @default 0 (any free port) */
  port?: number;
  /** Model name echoed in responses when the request has none. @default "scripted-model" */
  model?: string;
}

/** A running model server. */
export interface ModelServer {
  /**
   * Base URL, e.g. `http://127.0.0.1:38123/v1` (append `/chat/completions`, `/messages` or `/responses`,
   * or give it as a base URL).
   */
  url: string;
  /** Every request served so far, in arrival order (the array grows live). */
  requests: RecordedRequest[];
  /** Number of requests served (including errors). */
  readonly count: number;
  /** Appends more scripted responses. */
  push(...turns: ScriptedTurn[]): void;
  /** Stops listening and closes open connections. */
  close(): Promise<void>;
}

/**
 * Starts a scripted model server on 127.0.0.1.
 *
 * @param options - `script` or `handler`, `validate` (default true), `port` (default any)
 * @returns the running server: `url` (base URL ending in `/v1`), live `requests`, `count`, `push`, `close()`
 * @example
 * const server = await startModelServer({ script: [{ toolCalls: [{ name: "add", arguments: { a: 1, b: 2 } }] }, { text: "3" }] });
 * const agent = new BaseAgent({ apiProvider: `${server.url}/chat/completions`, modelName: "m", apiKeyEnv: "KEY" });
 * await agent.conversationWithTool("1+2?");
 * server.count; // 2
 * await server.close();
 * // OpenAI Responses (e.g. the OpenAI Agents SDK): new OpenAI({ baseURL: server.url, apiKey: "test" })
 */
export async function startModelServer(options: ModelServerOptions = {}): Promise<ModelServer> {
  checkOptions("startModelServer", options, SERVER_OPTIONS);
  const queue: ScriptedTurn[] = [...(options.script ?? [])];
  const requests: RecordedRequest[] = [];
  const validate = options.validate ?? true;
  const defaultModel = options.model ?? "scripted-model";

  const server: Server = createServer((req, res) => {
    void handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) {
        res.writeHead(500, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { message: String((error as Error)?.message ?? error) } }));
      } else res.destroy();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0] ?? "/";
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const protocol: WireProtocol | undefined = path.endsWith("/chat/completions")
      ? "openai"
      : path.endsWith("/messages")
        ? "anthropic"
        : path.endsWith("/responses")
          ? "responses"
          : undefined;
    if (req.method !== "POST" || !protocol) {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: `no route for ${req.method} ${path}` } }));
      return;
    }
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>;
    } catch {
      return sendError(res, protocol, 400, "request body is not JSON");
    }
    const record: RecordedRequest = {
      protocol,
      path,
      headers: { ...req.headers },
      body,
      stream: body.stream === true,
      status: 200,
    };
    const index = requests.length;
    requests.push(record);

    if (validate) {
      const problem =
        protocol === "openai"
          ? validateOpenAI(body)
          : protocol === "responses"
            ? validateResponses(body)
            : validateAnthropic(body);
      if (problem) {
        record.status = 400;
        return sendError(res, protocol, 400, problem);
      }
    }
    let turn: ScriptedTurn | undefined;
    if (options.handler) turn = await options.handler(record, index);
    else turn = queue.shift();
    if (!turn) {
      record.status = 500;
      return sendError(res, protocol, 500, `model server script exhausted at request #${index + 1}`);
    }
    if (turn.delayMs) await sleep(turn.delayMs);
    if (turn.error) {
      record.status = turn.error.status;
      return sendError(res, protocol, turn.error.status, turn.error.message ?? `scripted error ${turn.error.status}`);
    }
    const model = typeof body.model === "string" ? body.model : defaultModel;
    const calls = (turn.toolCalls ?? []).map((c, i) => ({
      id: c.id ?? `${protocol === "anthropic" ? "toolu" : "call"}_${randomUUID().replaceAll("-", "").slice(0, 20)}${i}`,
      name: c.name,
      args: typeof c.arguments === "string" ? c.arguments : JSON.stringify(c.arguments ?? {}),
    }));
    const finish = turn.finishReason ?? (calls.length > 0 ? "tool_calls" : "stop");
    const usage = turn.usage ?? { inputTokens: 10, outputTokens: 5 };
    if (protocol === "openai") {
      if (record.stream) await streamOpenAI(res, turn, model, calls, finish, usage);
      else sendOpenAI(res, turn, model, calls, finish, usage);
    } else if (protocol === "responses") {
      const response = responsesBody(turn, model, calls, finish, usage);
      if (record.stream) await streamResponses(res, turn, response);
      else {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify(response));
      }
    } else if (record.stream) await streamAnthropic(res, turn, model, calls, finish, usage);
    else sendAnthropic(res, turn, model, calls, finish, usage);
  }

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    get count() {
      return requests.length;
    },
    push(...turns: ScriptedTurn[]) {
      queue.push(...turns);
    },
    close() {
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

type Call = { id: string; name: string; args: string };
type Usage = { inputTokens: number; outputTokens: number };

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function split(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

function sendError(res: ServerResponse, protocol: WireProtocol, status: number, message: string): void {
  const body =
    protocol !== "anthropic"
      ? { error: { message, type: status === 429 ? "rate_limit_error" : "invalid_request_error", code: null } }
      : {
          type: "error",
          error: {
            type: status === 429 ? "rate_limit_error" : status >= 500 ? "api_error" : "invalid_request_error",
            message,
          },
        };
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

const anthropicStop = { stop: "end_turn", tool_calls: "tool_use", length: "max_tokens" } as const;

function sendOpenAI(res: ServerResponse, turn: ScriptedTurn, model: string, calls: Call[], finish: string, u: Usage) {
  const message: Record<string, unknown> = { role: "assistant", content: turn.text ?? null };
  if (calls.length > 0) {
    message.tool_calls = calls.map((c) => ({
      id: c.id,
      type: "function",
      function: { name: c.name, arguments: c.args },
    }));
  }
  res.writeHead(200, { "content-type": "application/json" });
  res.end(
    JSON.stringify({
      id: `chatcmpl-${randomUUID()}`,
      object: "chat.completion",
      created: Math.floor(Date.now() / 1000),
      model,
      choices: [{ index: 0, message, finish_reason: finish }],
      usage: {
        prompt_tokens: u.inputTokens,
        completion_tokens: u.outputTokens,
        total_tokens: u.inputTokens + u.outputTokens,
      },
    }),
  );
}

/** Writes SSE events, honouring `chunkDelayMs` and `dropAfterEvents`. Returns false when the stream was dropped. */
function sseWriter(res: ServerResponse, turn: ScriptedTurn) {
  let written = 0;
  return async (data: string, event?: string): Promise<boolean> => {
    if (turn.dropAfterEvents !== undefined && written >= turn.dropAfterEvents) {
      // let the client receive what was written, then cut the connection mid-stream
      await new Promise<void>((resolve) => res.write("", () => resolve()));
      await sleep(50);
      res.destroy();
      return false;
    }
    if (turn.chunkDelayMs) await sleep(turn.chunkDelayMs);
    res.write(`${event ? `event: ${event}\n` : ""}data: ${data}\n\n`);
    written++;
    return true;
  };
}

async function streamOpenAI(
  res: ServerResponse,
  turn: ScriptedTurn,
  model: string,
  calls: Call[],
  finish: string,
  u: Usage,
): Promise<void> {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  const write = sseWriter(res, turn);
  const id = `chatcmpl-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const size = turn.chunkSize ?? 4;
  const chunk = (delta: Record<string, unknown>, finishReason: string | null = null) =>
    JSON.stringify({
      id,
      object: "chat.completion.chunk",
      created,
      model,
      choices: [{ index: 0, delta, finish_reason: finishReason }],
    });
  if (!(await write(chunk({ role: "assistant", content: "" })))) return;
  for (const piece of split(turn.text ?? "", size)) if (!(await write(chunk({ content: piece })))) return;
  for (const [index, c] of calls.entries()) {
    const head = { index, id: c.id, type: "function", function: { name: c.name, arguments: "" } };
    if (!(await write(chunk({ tool_calls: [head] })))) return;
    for (const piece of split(c.args, size)) {
      if (!(await write(chunk({ tool_calls: [{ index, function: { arguments: piece } }] })))) return;
    }
  }
  if (!(await write(chunk({}, finish)))) return;
  const usage = {
    prompt_tokens: u.inputTokens,
    completion_tokens: u.outputTokens,
    total_tokens: u.inputTokens + u.outputTokens,
  };
  if (!(await write(JSON.stringify({ id, object: "chat.completion.chunk", created, model, choices: [], usage }))))
    return;
  if (!(await write("[DONE]"))) return;
  res.end();
}

function anthropicBlocks(turn: ScriptedTurn, calls: Call[]): Record<string, unknown>[] {
  const blocks: Record<string, unknown>[] = [];
  if (turn.thinking) blocks.push({ type: "thinking", thinking: turn.thinking, signature: "sig-scripted" });
  if (turn.text) blocks.push({ type: "text", text: turn.text });
  for (const c of calls) blocks.push({ type: "tool_use", id: c.id, name: c.name, input: safeJson(c.args) });
  return blocks;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return {};
  }
}

function sendAnthropic(
  res: ServerResponse,
  turn: ScriptedTurn,
  model: string,
  calls: Call[],
  finish: string,
  u: Usage,
) {
  res.writeHead(200, { "content-type": "application/json" });
  res.end(
    JSON.stringify({
      id: `msg_${randomUUID().replaceAll("-", "")}`,
      type: "message",
      role: "assistant",
      model,
      content: anthropicBlocks(turn, calls),
      stop_reason: anthropicStop[finish as keyof typeof anthropicStop] ?? "end_turn",
      stop_sequence: null,
      usage: { input_tokens: u.inputTokens, output_tokens: u.outputTokens },
    }),
  );
}

async function streamAnthropic(
  res: ServerResponse,
  turn: ScriptedTurn,
  model: string,
  calls: Call[],
  finish: string,
  u: Usage,
): Promise<void> {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  const write = sseWriter(res, turn);
  const size = turn.chunkSize ?? 4;
  const ev = (type: string, data: Record<string, unknown>) => write(JSON.stringify({ type, ...data }), type);
  const message = {
    id: `msg_${randomUUID().replaceAll("-", "")}`,
    type: "message",
    role: "assistant",
    model,
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage: { input_tokens: u.inputTokens, output_tokens: 1 },
  };
  if (!(await ev("message_start", { message }))) return;
  let index = 0;
  if (turn.thinking) {
    if (!(await ev("content_block_start", { index, content_block: { type: "thinking", thinking: "" } }))) return;
    for (const piece of split(turn.thinking, size)) {
      if (!(await ev("content_block_delta", { index, delta: { type: "thinking_delta", thinking: piece } }))) return;
    }
    if (!(await ev("content_block_delta", { index, delta: { type: "signature_delta", signature: "sig-scripted" } })))
      return;
    if (!(await ev("content_block_stop", { index }))) return;
    index++;
  }
  if (turn.text) {
    if (!(await ev("content_block_start", { index, content_block: { type: "text", text: "" } }))) return;
    for (const piece of split(turn.text, size)) {
      if (!(await ev("content_block_delta", { index, delta: { type: "text_delta", text: piece } }))) return;
    }
    if (!(await ev("content_block_stop", { index }))) return;
    index++;
  }
  for (const c of calls) {
    const block = { type: "tool_use", id: c.id, name: c.name, input: {} };
    if (!(await ev("content_block_start", { index, content_block: block }))) return;
    for (const piece of split(c.args, size)) {
      if (!(await ev("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: piece } })))
        return;
    }
    if (!(await ev("content_block_stop", { index }))) return;
    index++;
  }
  const stop = anthropicStop[finish as keyof typeof anthropicStop] ?? "end_turn";
  if (
    !(await ev("message_delta", {
      delta: { stop_reason: stop, stop_sequence: null },
      usage: { output_tokens: u.outputTokens },
    }))
  )
    return;
  if (!(await ev("message_stop", {}))) return;
  res.end();
}

type Obj = Record<string, unknown>;

function shortId(prefix: string): string {
  return `${prefix}_${randomUUID().replaceAll("-", "")}`;
}

/** The whole (final) Responses API object for a scripted turn. */
function responsesBody(turn: ScriptedTurn, model: string, calls: Call[], finish: string, u: Usage): Obj {
  const output: Obj[] = [];
  if (turn.thinking) {
    output.push({ type: "reasoning", id: shortId("rs"), summary: [{ type: "summary_text", text: turn.thinking }] });
  }
  if (turn.text) {
    output.push({
      type: "message",
      id: shortId("msg"),
      status: "completed",
      role: "assistant",
      content: [{ type: "output_text", text: turn.text, annotations: [], logprobs: [] }],
    });
  }
  for (const c of calls) {
    output.push({
      type: "function_call",
      id: shortId("fc"),
      call_id: c.id,
      name: c.name,
      arguments: c.args,
      status: "completed",
    });
  }
  const incomplete = finish === "length";
  return {
    id: shortId("resp"),
    object: "response",
    created_at: Math.floor(Date.now() / 1000),
    status: incomplete ? "incomplete" : "completed",
    error: null,
    incomplete_details: incomplete ? { reason: "max_output_tokens" } : null,
    model,
    output,
    parallel_tool_calls: true,
    tool_choice: "auto",
    tools: [],
    usage: {
      input_tokens: u.inputTokens,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: u.outputTokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: u.inputTokens + u.outputTokens,
    },
  };
}

/**
 * Streams a Responses API object as its event sequence: `response.created`, `response.in_progress`,
 * per output item `response.output_item.added` … (summary / text / argument deltas) …
 * `response.output_item.done`, then `response.completed` (or `response.incomplete`) carrying the whole response.
 */
async function streamResponses(res: ServerResponse, turn: ScriptedTurn, response: Obj): Promise<void> {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  const write = sseWriter(res, turn);
  const size = turn.chunkSize ?? 4;
  let sequence = 0;
  const ev = (type: string, data: Obj) => write(JSON.stringify({ type, sequence_number: sequence++, ...data }), type);
  const pending = { ...response, status: "in_progress", output: [], usage: null, incomplete_details: null };
  if (!(await ev("response.created", { response: pending }))) return;
  if (!(await ev("response.in_progress", { response: pending }))) return;
  for (const [output_index, item] of (response.output as Obj[]).entries()) {
    const item_id = item.id;
    if (item.type === "reasoning") {
      if (!(await ev("response.output_item.added", { output_index, item: { ...item, summary: [] } }))) return;
      const text = String((item.summary as Obj[])[0]?.text ?? "");
      const at = { item_id, output_index, summary_index: 0 };
      if (!(await ev("response.reasoning_summary_part.added", { ...at, part: { type: "summary_text", text: "" } })))
        return;
      for (const delta of split(text, size)) {
        if (!(await ev("response.reasoning_summary_text.delta", { ...at, delta }))) return;
      }
      if (!(await ev("response.reasoning_summary_text.done", { ...at, text }))) return;
      if (!(await ev("response.reasoning_summary_part.done", { ...at, part: { type: "summary_text", text } }))) return;
    } else if (item.type === "message") {
      const part = (item.content as Obj[])[0] as Obj;
      const text = String(part.text);
      const at = { item_id, output_index, content_index: 0 };
      const added = { ...item, status: "in_progress", content: [] };
      if (!(await ev("response.output_item.added", { output_index, item: added }))) return;
      if (!(await ev("response.content_part.added", { ...at, part: { ...part, text: "" } }))) return;
      for (const delta of split(text, size)) {
        if (!(await ev("response.output_text.delta", { ...at, delta, logprobs: [] }))) return;
      }
      if (!(await ev("response.output_text.done", { ...at, text, logprobs: [] }))) return;
      if (!(await ev("response.content_part.done", { ...at, part }))) return;
    } else {
      const args = String(item.arguments);
      const added = { ...item, arguments: "", status: "in_progress" };
      if (!(await ev("response.output_item.added", { output_index, item: added }))) return;
      for (const delta of split(args, size)) {
        if (!(await ev("response.function_call_arguments.delta", { item_id, output_index, delta }))) return;
      }
      if (!(await ev("response.function_call_arguments.done", { item_id, output_index, arguments: args }))) return;
    }
    if (!(await ev("response.output_item.done", { output_index, item }))) return;
  }
  const terminal = response.status === "incomplete" ? "response.incomplete" : "response.completed";
  if (!(await ev(terminal, { response }))) return;
  res.end();
}

/**
 * Checks an OpenAI Responses request the way the API does (when the request carries the
 * whole history, i.e. without `previous_response_id`): `input` is a string or a non-empty
 * list; every `function_call` has a `function_call_output` with its `call_id` later in the
 * input, and every `function_call_output` answers a `function_call` earlier in it.
 *
 * @param body - request body
 * @returns a problem description, or undefined when the request is valid
 */
export function validateResponses(body: Obj): string | undefined {
  const input = body.input;
  if (typeof input === "string") return input === "" ? "input must not be empty" : undefined;
  if (!Array.isArray(input) || input.length === 0) return "input must be a string or a non-empty array";
  if (typeof body.previous_response_id === "string") return undefined; // the calls may be in the stored response
  const calls = new Set<string>();
  const answered = new Set<string>();
  for (const [i, raw] of (input as Obj[]).entries()) {
    if (raw === null || typeof raw !== "object") return `input[${i}]: an input item must be an object`;
    if (raw.type === "function_call") {
      if (typeof raw.arguments === "string") {
        try {
          JSON.parse(raw.arguments);
        } catch {
          return `input[${i}]: function call ${String(raw.call_id)} has arguments that are not valid JSON`;
        }
      }
      calls.add(String(raw.call_id));
    } else if (raw.type === "function_call_output") {
      const id = String(raw.call_id);
      if (!calls.has(id)) return `input[${i}]: No tool call found for function call output with call_id ${id}.`;
      answered.add(id);
    }
  }
  for (const id of calls) if (!answered.has(id)) return `No tool output found for function call ${id}.`;
  return undefined;
}

/**
 * Checks an OpenAI chat-completions request the way the API does: every
 * assistant `tool_calls` id is answered by `tool` messages that directly
 * follow it, and no `tool` message answers a call that is not pending.
 *
 * @param body - request body
 * @returns a problem description, or undefined when the request is valid
 */
export function validateOpenAI(body: Obj): string | undefined {
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) return "messages must be a non-empty array";
  let pending = new Set<string>();
  for (const [i, raw] of (messages as Obj[]).entries()) {
    const role = raw.role;
    if (role === "tool") {
      const id = String(raw.tool_call_id);
      if (!pending.has(id)) return `messages[${i}]: tool message answers tool_call_id ${id} with no pending call`;
      pending.delete(id);
      continue;
    }
    if (pending.size > 0) {
      return `messages[${i}]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'; missing: ${[...pending].join(", ")}`;
    }
    if (role === "assistant") {
      const calls = Array.isArray(raw.tool_calls) ? (raw.tool_calls as Obj[]) : [];
      const content = raw.content;
      const empty =
        content === undefined || content === null || content === "" || (Array.isArray(content) && content.length === 0);
      if (empty && calls.length === 0) return `messages[${i}]: assistant message has neither content nor tool_calls`;
      pending = new Set();
      for (const c of calls) {
        const fn = c.function as Obj | undefined;
        if (typeof fn?.arguments === "string") {
          try {
            JSON.parse(fn.arguments);
          } catch {
            return `messages[${i}]: tool call ${String(c.id)} has arguments that are not valid JSON`;
          }
        }
        pending.add(String(c.id));
      }
    }
  }
  if (pending.size > 0)
    return `last assistant message has tool_calls without tool messages: ${[...pending].join(", ")}`;
  return undefined;
}

/**
 * Checks an Anthropic Messages request the way the API does: each
 * `tool_use` id is answered by a `tool_result` in the very next (user)
 * message, every `tool_result` answers a `tool_use` of the message just
 * before, and no message has empty content.
 *
 * @param body - request body
 * @returns a problem description, or undefined when the request is valid
 */
export function validateAnthropic(body: Obj): string | undefined {
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) return "messages: at least one message is required";
  let previousUses = new Set<string>();
  for (const [i, raw] of (messages as Obj[]).entries()) {
    const content = raw.content;
    if (content === "" || (Array.isArray(content) && content.length === 0)) {
      return `messages.${i}: all messages must have non-empty content`;
    }
    const blocks = Array.isArray(content) ? (content as Obj[]) : [];
    const results = new Set(blocks.filter((b) => b.type === "tool_result").map((b) => String(b.tool_use_id)));
    for (const id of results) {
      if (!previousUses.has(id)) {
        return `messages.${i}.content: unexpected tool_use_id found in tool_result blocks: ${id}. Each tool_result block must have a corresponding tool_use block in the previous message.`;
      }
    }
    for (const id of previousUses) {
      if (!results.has(id)) {
        return `messages.${i}: tool_use ids were found without tool_result blocks immediately after: ${id}. Each tool_use block must have a corresponding tool_result block in the next message.`;
      }
    }
    previousUses = new Set(
      raw.role === "assistant" ? blocks.filter((b) => b.type === "tool_use").map((b) => String(b.id)) : [],
    );
  }
  if (previousUses.size > 0) {
    return `messages: tool_use ids were found without tool_result blocks immediately after: ${[...previousUses].join(", ")}`;
  }
  return undefined;
}
