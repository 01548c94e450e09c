/**
 * The stop endpoint of a resumable chat: {@link stopRunResponse} ends a
 * durable answer from any process. In a resumable setup a client's abort
 * (`useChat`'s `stop()`) only disconnects that client: the run goes on and
 * the other readers keep reading. The AI SDK's guidance for resumable streams
 * is a stop endpoint that cancels the work, saves the partial answer and ends
 * the active stream ("Chatbot Resume Streams",
 * https://ai-sdk.dev/docs/ai-sdk-ui/chatbot-resume-streams); here the three
 * go through the shared stores, so the process that answers the stop needs
 * neither the run nor its readers:
 *
 * 1. a `{ type: "run-stop", by, reason }` marker is appended to the run's side
 *    channel, then the run is cancelled in the journal (`cancel`, recorded
 *    with who and why). The executor, wherever it runs, notices the
 *    cancellation (its cancel check or lease renewal), aborts its model call
 *    and takes no more steps; it is not waited for;
 * 2. every reader of the run's UI message stream ({@link runUIMessageStream},
 *    in any process) reaches the marker, asks the journal, finds the run
 *    `cancelled`, and finishes the assistant message with the text streamed
 *    before the marker (no `error` chunk); tokens the executor streamed after
 *    the marker count for nobody. When the run ended otherwise before the
 *    cancel landed (it completed in between), the marker is void and the
 *    readers go on as usual: the journal decides;
 * 3. the same partial message (what a replay of the stream now gives) is
 *    added to the chat store as the chat's assistant message, where the next
 *    request and the resume route read the chat, unless the chat already
 *    holds a message with that id (the run saved its own answer first).
 *
 * @module
 */
import { readUIMessageStream, type UIMessage, type UIMessageChunk } from "ai";
import { ConflictError, InvalidOptionError } from "../core/errors.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { ENDED_RUN_STATUSES, type Journal, type RunStatus } from "../durable/journal.js";
import { cancel } from "../durable/run.js";
import type { RunEventStream } from "../durable/stream-contract.js";
import type { ChatStore } from "./chat-store.js";
import { runUIMessageStream, STOP_EVENT } from "./run-ui-stream.js";

/** Options of {@link stopRunResponse}. */
export interface StopRunResponseOptions {
  /** The run's journal (required): the run is cancelled in it, and readers ask it whether the stop took effect. */
  journal: Pick<Journal, "getRun" | "readSteps" | "cancelRun">;
  /** Who stops the run, recorded with the cancellation. @default `<user>@<host>` (as `cancel`) */
  by?: string;
  /** Why, recorded with the cancellation. */
  reason?: string;
  /**
   * The chat store where the chat's messages are read from: the partial answer is added to the chat
   * `chatId` as an assistant message (id `messageId`), unless it already holds a message with that id.
   * Without it nothing is saved (the partial message is in the response body).
   */
  chats?: ChatStore<UIMessage>;
  /** The chat the run answers (required with `chats`). */
  chatId?: string;
  /** The id of the assistant message, as given to `runUIMessageStream`. @default the run id */
  messageId?: string;
  /** `data.type` of the text events, as given to `runUIMessageStream`. @default "token" */
  type?: string;
  /** Extra headers of the 200 response. */
  headers?: Record<string, string>;
}

const OPTIONS = optionKeys<StopRunResponseOptions>({
  journal: true,
  by: true,
  reason: true,
  chats: true,
  chatId: true,
  messageId: true,
  type: true,
  headers: true,
});

const optionalString = (name: keyof StopRunResponseOptions, value: unknown) => {
  if (value !== undefined && (typeof value !== "string" || value === "")) {
    throw new InvalidOptionError("stopRunResponse", name, "must be a non-empty string");
  }
};

/**
 * The answer of a chat's stop endpoint (e.g. `POST /api/chat/:id/stop`): stops
 * the durable run `runId` from any process and returns at once, without
 * waiting for the process that executes the run. See the module comment for
 * how: a `run-stop` marker on the side channel, then `cancel` in the journal;
 * every reader of the run's UI message stream then finishes the message with
 * the partial text; with `chats`, that partial message is added to the chat.
 *
 * Answers:
 * - 204 No Content: `runId` is `undefined`, `null` or `""`, or no such run exists (nothing to stop);
 * - 200 `application/json` `{ runId, status, stopped, message }`: `status` is the run's status after
 *   the call; `stopped` is true when the run is now `cancelled` by this stop (or a concurrent one);
 *   `message` is the partial answer (a `UIMessage`, as the readers finish it), or `null` when the run
 *   was not stopped or had streamed no text. A run that had already ended (`completed`, `failed`,
 *   `cancelled`: a repeated stop) is left as it is and answered `{ stopped: false, status }`: stopping
 *   is idempotent and never an error for an ended run.
 *
 * The partial answer is saved (with `chats`) only when it has text: an assistant message without parts
 * would fail `validateUIMessages` on the next request. The save reads the chat and writes it with
 * `expectedRevision`, reading again on a `ConflictError` (up to 3 times).
 *
 * @param stream - the run's side channel (a `RedisRunStream` when several processes serve the chat)
 * @param runId - the run answering the chat's last message, if any
 * @param options - `journal` (required), `by`, `reason`, `chats` and `chatId`, `messageId` (default `runId`),
 *   `type` (default `"token"`), `headers`
 * @returns a `Response`: 204, or 200 with the JSON body above
 * @throws {InvalidOptionError} on an unknown option, a missing `journal`, `chats` without `chatId`, or an
 *   empty `by`/`reason`/`chatId`/`messageId`/`type`
 * @throws {BackendError} when the journal, the stream or the chat store fails
 * @throws {ConflictError} when the chat kept changing under the save (3 tries)
 * @example
 * // POST /api/chat/:id/stop (the client also calls useChat's stop() to stop reading)
 * export async function STOP(_req: Request, chatId: string) {
 *   const chat = (await chats.load(chatId)) ?? [];
 *   const runId = chat.at(-1)?.role === "user" ? `chat:${chatId}:${chat.length}` : undefined;
 *   return stopRunResponse(stream, runId, { journal, chats, chatId });
 * }
 */
export async function stopRunResponse(
  stream: RunEventStream,
  runId: string | null | undefined,
  options: StopRunResponseOptions,
): Promise<Response> {
  checkOptions("stopRunResponse", options, OPTIONS);
  const { journal, chats, chatId, by, reason, headers } = options ?? ({} as StopRunResponseOptions);
  if (
    journal === null ||
    typeof journal !== "object" ||
    typeof journal.getRun !== "function" ||
    typeof journal.readSteps !== "function" ||
    typeof journal.cancelRun !== "function"
  ) {
    throw new InvalidOptionError(
      "stopRunResponse",
      "journal",
      "is required: stopRunResponse(stream, runId, { journal })",
    );
  }
  for (const k of ["by", "reason", "chatId", "messageId", "type"] as const) optionalString(k, options[k]);
  if (chats !== undefined && (chats === null || typeof chats.read !== "function" || typeof chats.save !== "function")) {
    throw new InvalidOptionError("stopRunResponse", "chats", "must be a chat store (createChatStore)");
  }
  if (chats !== undefined && chatId === undefined) {
    throw new InvalidOptionError("stopRunResponse", "chatId", "is required with `chats` (the chat the run answers)");
  }
  if (runId === undefined || runId === null || runId === "") return new Response(null, { status: 204 });
  const run = await journal.getRun(runId);
  if (!run) return new Response(null, { status: 204 });
  const answer = (body: { status: RunStatus; stopped: boolean; message: UIMessage | null }) =>
    Response.json({ runId, ...body }, headers ? { headers } : {});
  if (ENDED_RUN_STATUSES.has(run.status)) return answer({ status: run.status, stopped: false, message: null });

  // the marker first: a reader that finds the run cancelled in the journal has the marker to read
  await stream.append(runId, {
    type: STOP_EVENT,
    ...(by !== undefined ? { by } : {}),
    ...(reason !== undefined ? { reason } : {}),
  });
  const after = await cancel(runId, {
    journal: journal as Journal,
    ...(by !== undefined ? { by } : {}),
    ...(reason !== undefined ? { reason } : {}),
  });
  if (after.status !== "cancelled") return answer({ status: after.status, stopped: false, message: null });

  const message = await partialMessage(stream, runId, options);
  if (message && chats && chatId !== undefined) await keepMessage(chats, chatId, message);
  return answer({ status: "cancelled", stopped: true, message });
}

/** The message every reader of the stopped run finishes with (a replay of its UI message stream), if it has text. */
async function partialMessage(
  stream: RunEventStream,
  runId: string,
  options: StopRunResponseOptions,
): Promise<UIMessage | null> {
  let failed = false;
  const chunks = runUIMessageStream(stream, runId, {
    journal: options.journal,
    ...(options.messageId !== undefined ? { messageId: options.messageId } : {}),
    ...(options.type !== undefined ? { type: options.type } : {}),
  }).pipeThrough(
    new TransformStream<UIMessageChunk, UIMessageChunk>({
      transform(chunk, controller) {
        if (chunk.type === "error") failed = true;
        controller.enqueue(chunk);
      },
    }),
  );
  let message: UIMessage | undefined;
  for await (const m of readUIMessageStream<UIMessage>({ stream: chunks })) message = m;
  // a stream that cannot give the answer (trimmed, gone) saves nothing rather than a part of it
  if (failed || !message || message.parts.length === 0) return null;
  return JSON.parse(JSON.stringify(message)) as UIMessage;
}

/** Adds `message` to the chat, unless a message with its id is there (the run saved its answer first). */
async function keepMessage(chats: ChatStore<UIMessage>, chatId: string, message: UIMessage): Promise<void> {
  for (let tries = 1; ; tries++) {
    const read = await chats.read(chatId);
    const messages = read?.messages ?? [];
    if (messages.some((m) => m.id === message.id)) return;
    try {
      await chats.save(chatId, [...messages, message], {
        ...(read === undefined
          ? { expectedRevision: null }
          : read.revision !== undefined
            ? { expectedRevision: read.revision }
            : {}),
      });
      return;
    } catch (error) {
      if (!(error instanceof ConflictError) || tries >= 3) throw error;
    }
  }
}
