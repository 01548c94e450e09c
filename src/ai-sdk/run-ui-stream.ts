/**
 * A durable run's side channel as a resumable AI SDK UI message stream, for
 * `useChat({ resume: true })`: {@link runUIMessageStream} replays the run's
 * events from the start, then follows them live until the run ends, as the
 * UI message chunks `useChat` reads (`start`, `start-step`, `text-start`,
 * `text-delta`, `text-end`, `finish-step`, `finish`); {@link resumeRunResponse}
 * is the `GET /api/chat/:id/stream` answer (the stream, or 204 when no run is
 * active).
 *
 * **Why every call replays from the start.** The AI SDK's
 * `DefaultChatTransport` treats a resumed stream as a full replay by default
 * (`resumeStreamIsReplay: true`): "On the first `start` chunk, the client
 * resets the interrupted response and rebuilds it from the replay" (AI SDK
 * docs, "Chatbot Resume Streams",
 * https://ai-sdk.dev/docs/ai-sdk-ui/chatbot-resume-streams). Every stream made here starts with the same
 * `start` chunk (`messageId`, by default the run id) and rebuilds the whole
 * answer, so a reconnect — a second call, in any process — ends with the same
 * message as an uninterrupted read.
 *
 * **Abandoned attempts: text is sent once its attempt is committed.** A step
 * attempt can be abandoned after it streamed tokens (the model request failed
 * mid-stream and the step is retried; the process died and another one runs
 * the step again). The side channel says so afterwards, with a
 * `{ type: "reset", seq, attempt }` event or with a newer attempt's tokens
 * (`stream.ts`). A UI message stream cannot take text back: a text part only
 * grows (`text-start` adds a part, `text-delta` appends to it, `text-end`
 * closes it: "Stream Protocols", https://ai-sdk.dev/docs/ai-sdk-ui/stream-protocol);
 * only `data-*` parts are reconciled by id ("Data Part Reconciliation",
 * https://ai-sdk.dev/docs/ai-sdk-ui/streaming-data); and the client
 * resets its message only on the first `start` chunk of a *resumed* stream,
 * not on the stream `useChat` reads after a POST. Text streamed from an
 * attempt that is later abandoned would therefore stay in the client's
 * message next to the retried attempt's text ("Hello, Hello, world").
 * So the text of a step attempt is held until the attempt is known to be the
 * step's committed one, and is then sent as one text part of its own (one
 * `start-step` … `finish-step` per model call): the message never holds a
 * word of an abandoned attempt, at the cost of text arriving per model call
 * rather than per token. An attempt is known committed:
 * - with `journal`: when the journal records the step `completed` by that
 *   attempt (same `attempt`, same `fencingToken`) — the source of truth, right
 *   for any workflow, parallel steps included; the journal is read when an
 *   event of a later step arrives, when the run ends, and every `pollMs` while
 *   nothing arrives;
 * - without: when an event of a later step arrives (the step returned — true
 *   for workflows whose streaming steps run one at a time, as `DurableAgent`'s
 *   and a `durableModel` loop's `llm` steps do), or when the run ends
 *   `completed`. A run that ends otherwise (failed, blocked, cancelled) drops
 *   the text of its last step: it cannot be told from a failed model call
 *   without the journal.
 *
 * **Stopped answers.** `stopRunResponse` appends a `{ type: "run-stop" }`
 * marker, then cancels the run. A reader that reaches the marker asks the
 * journal: `cancelled` — the message ends with the text streamed before the
 * marker (committed steps and the attempt that was streaming, as one text
 * part each), then `finish`, without an `error` chunk, and nothing after the
 * marker counts; `completed`, `failed`, `waiting` or `blocked` — the stop lost
 * the race, the marker is void and the events after it are read as usual;
 * `pending`/`running` — the reader waits (the cancel lands right after the
 * marker). Without `journal` the marker ends the message.
 *
 * **Live tokens, optionally.** With `drafts: true`, the tokens of attempts not
 * yet committed are also sent as they arrive, as *transient* data chunks
 * (`data-dumplings-draft`), which the AI SDK passes to `useChat`'s `onData`
 * and never adds to the message ("Transient Data Parts", AI SDK docs). An app
 * renders them as a provisional line and drops it when the draft's `state` is
 * `abandoned` (a retried attempt) or `committed` (the step's text part has
 * arrived). Clients that ignore them see only committed text.
 *
 * @module
 */
import { createUIMessageStreamResponse, type UIMessageChunk } from "ai";
import { InvalidOptionError } from "../core/errors.js";
import type { JsonValue } from "../core/json.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { RunStreamError } from "../durable/errors.js";
import { ENDED_RUN_STATUSES, type Journal, type RunStatus, type StepRecord } from "../durable/journal.js";
import type { RunEventStream, RunStreamEvent } from "../durable/stream-contract.js";

/** The `data` of a `data-dumplings-draft` chunk (sent only with `drafts: true`). */
export interface RunDraftData {
  /** The step (0-based `seq`) whose attempt streams. */
  seq: number;
  /** The attempt (1-based). */
  attempt: number;
  /**
   * `streaming`: `delta` is the attempt's next text; `abandoned`: drop what this
   * attempt drafted (it was retried or superseded); `committed`: drop the draft,
   * the step's text part carries the text now.
   */
  state: "streaming" | "abandoned" | "committed";
  /** The text to append (`streaming` only). */
  delta?: string;
}

/** The journal reads {@link runUIMessageStream} makes. */
export type RunJournalReader = Pick<Journal, "getRun" | "readSteps">;

/** Options of {@link runUIMessageStream}. */
export interface RunUIMessageStreamOptions {
  /**
   * The run's journal: commits text by the journal's step records (see the module
   * comment), and ends the stream when the run is no longer running (`waiting`
   * for a signal or a timer included, whose run appends no end event).
   * Without it, the stream ends at the run's `run-end` event.
   */
  journal?: RunJournalReader;
  /**
   * The id of the assistant message (the `start` chunk's `messageId`): the same on
   * every call for a run, so a resumed replay replaces the interrupted message.
   * @default the run id
   */
  messageId?: string;
  /** `data.type` of the events whose `data.text` is the text (as `readText` takes it). @default "token" */
  type?: string;
  /** Also send uncommitted tokens as transient `data-dumplings-draft` chunks. @default false */
  drafts?: boolean;
  /** With `journal`: how often (ms) the journal is read while no event arrives. @default 500 */
  pollMs?: number;
  /** Ends the stream (closed, without a `finish` chunk) when aborted. */
  signal?: AbortSignal;
  /**
   * The `errorText` of the `error` chunk sent when reading the stream or the
   * journal fails (the stream then closes). @default `() => "An error occurred."` (the
   * AI SDK's own default: server details do not leak to the client)
   */
  onError?: (error: unknown) => string;
}

/** Options of {@link resumeRunResponse}: those of {@link runUIMessageStream}, plus response headers. */
export interface ResumeRunResponseOptions extends RunUIMessageStreamOptions {
  /** Extra headers of the 200 response (the UI message stream headers are set). */
  headers?: Record<string, string>;
}

const STREAM_OPTIONS = optionKeys<RunUIMessageStreamOptions>({
  journal: true,
  messageId: true,
  type: true,
  drafts: true,
  pollMs: true,
  signal: true,
  onError: true,
});
const RESPONSE_OPTIONS = optionKeys<ResumeRunResponseOptions>({
  journal: true,
  messageId: true,
  type: true,
  drafts: true,
  pollMs: true,
  signal: true,
  onError: true,
  headers: true,
});

/** A run status in which the run still executes (or is about to). */
const ACTIVE: ReadonlySet<RunStatus> = new Set(["pending", "running"]);
/** A status after which the run will not run again without an operator. */

/**
 * `data.type` of the marker `stopRunResponse` appends to a run's side channel before it cancels the run
 * (`{ type: "run-stop", by, reason? }`, no origin): the answer ends there if the run ends `cancelled`.
 */
export const STOP_EVENT = "run-stop";

/** The `errorText` of a run that ended without completing. */
const ENDINGS: Record<string, string> = {
  failed: "the run failed",
  blocked: "the run is blocked (its program diverged from its journal)",
  cancelled: "the run was cancelled",
};

type Obj = { [key: string]: JsonValue };
const objectOf = (v: JsonValue): Obj | undefined =>
  v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Obj) : undefined;
const intOf = (v: JsonValue | undefined): number | undefined =>
  typeof v === "number" && Number.isInteger(v) && v >= 0 ? v : undefined;

/** One attempt of a step: (executor fencing token, attempt), its held text. */
interface Attempt {
  token: number | undefined;
  attempt: number;
  text: string;
  drafted: boolean;
}

/** A step whose tokens were seen. */
interface HeldStep {
  seq: number;
  /** The newest attempt not abandoned (its tokens are held). */
  latest?: Attempt;
  /** Resets seen for this step: attempts ≤ `attempt` of executors ≤ `token` are abandoned. */
  resets: { attempt: number; token: number }[];
  /** Sent (committed) or dropped: later tokens of this step are ignored. */
  done: boolean;
  /** An event of a later step was seen since the journal was last read. */
  laterSeen: boolean;
  /** The journal was read once after an event of a later step (then only `pollMs` reads follow). */
  laterChecked: boolean;
}

const order = (t: number | undefined) => t ?? 0;
const newer = (a: Attempt, b: { token: number | undefined; attempt: number }) =>
  order(a.token) > order(b.token) || (order(a.token) === order(b.token) && a.attempt > b.attempt);

/**
 * The state machine shared by a replay and a live read: events in, UI message
 * chunks out. Pure (no I/O), so a replay and a live read of the same events
 * and journal records emit the same text parts.
 */
class RunTextAssembler {
  private readonly steps = new Map<number, HeldStep>();
  /** The text part of tokens outside steps (never abandoned), while open. */
  private openPart: string | undefined;
  private parts = 0;
  private ended: string | undefined;
  /** A stop marker (`run-stop`) was read: its fate is `pending` until the journal tells (`honored`/`void`). */
  private stop: "pending" | "honored" | "void" | undefined;
  /** The events read after a pending stop marker (added if the stop turns out void). */
  private afterStop: RunStreamEvent[] = [];

  /** The status of the run's `run-end` event, once read (`cancelled` once a stop is honored). */
  endStatus(): string | undefined {
    return this.ended ?? (this.stop === "honored" ? "cancelled" : undefined);
  }

  constructor(
    private readonly type: string,
    private readonly drafts: boolean,
    private readonly useJournal: boolean,
  ) {}

  /** Steps holding text, in seq order. */
  held(): HeldStep[] {
    return [...this.steps.values()].filter((s) => !s.done).sort((a, b) => a.seq - b.seq);
  }

  /** Whether an event of a later step asked for a journal read. */
  wantsJournal(): boolean {
    return this.held().some((s) => s.laterSeen);
  }

  /** Whether a stop marker was read and the journal has not yet said whether the run was cancelled. */
  stopPending(): boolean {
    return this.stop === "pending";
  }

  /** Whether the answer ended at a stop marker (the run was cancelled by a stop: no error chunk). */
  stopHonored(): boolean {
    return this.stop === "honored";
  }

  /**
   * The stop took effect (the run is cancelled): the text held up to the marker — committed steps and
   * the step that streamed when the stop came — is sent, and nothing after the marker counts.
   */
  honorStop(out: UIMessageChunk[]): void {
    this.stop = "honored";
    this.afterStop = [];
    for (const s of this.held()) {
      if (s.latest) this.commit(s, s.latest, out);
      else this.drop(s, out);
    }
  }

  /** The run ended otherwise (the stop lost the race): the events after the marker count as usual. */
  voidStop(out: UIMessageChunk[], live: boolean): void {
    this.stop = "void";
    const later = this.afterStop;
    this.afterStop = [];
    for (const e of later) this.add(e, out, live);
  }

  add(e: RunStreamEvent, out: UIMessageChunk[], live: boolean): void {
    if (this.stop === "honored") return; // the answer ended at the stop marker
    if (this.stop === "pending") {
      this.afterStop.push(e);
      return;
    }
    const data = objectOf(e.data);
    if (!data) return;
    if (data.type === STOP_EVENT && e.seq === undefined) {
      if (this.stop === "void") return; // the run ended otherwise: a later stop changes nothing
      this.stop = "pending";
      // without a journal the marker is the end: nothing can tell a stop that lost the race
      if (!this.useJournal) this.honorStop(out);
      return;
    }
    let seq = e.seq;
    let attempt = e.attempt;
    if (seq === undefined) {
      // a stream that drops tags: the data names the step and the attempt
      seq = intOf(data.seq);
      attempt = intOf(data.attempt);
      if (data.type === "reset" && attempt !== undefined) attempt += 1; // appended by the next attempt
    }
    const token = e.fencingToken;
    if (seq === undefined) {
      if (data.type === "run-end") {
        this.ended = typeof data.status === "string" ? data.status : "completed";
      } else if (data.type === this.type && typeof data.text === "string" && data.text !== "") {
        this.sendOutside(data.text, out);
      }
      return;
    }
    // an event of a later step: the steps before it have returned (see the module comment)
    for (const s of this.held()) {
      if (s.seq >= seq) continue;
      if (this.useJournal) s.laterSeen = !s.laterChecked;
      else if (s.latest && order(s.latest.token) <= order(token)) this.commit(s, s.latest, out);
    }
    if (data.type === "reset") {
      const rSeq = intOf(data.seq);
      const rAttempt = intOf(data.attempt);
      if (rSeq === undefined || rAttempt === undefined) return;
      const s = this.step(rSeq);
      const reset = { attempt: rAttempt, token: token ?? Number.POSITIVE_INFINITY };
      s.resets.push(reset);
      if (s.latest && this.abandoned(s, s.latest)) this.abandon(s, out);
      return;
    }
    if (data.type !== this.type || typeof data.text !== "string") return;
    if (attempt === undefined) {
      // a step token without an attempt cannot be abandoned (as readText keeps it)
      if (data.text !== "") this.sendOutside(data.text, out);
      return;
    }
    const s = this.step(seq);
    if (s.done) return; // a late token of an attempt already settled
    const candidate = { token, attempt };
    if (this.abandoned(s, candidate)) return;
    if (s.latest && !(s.latest.token === token && s.latest.attempt === attempt)) {
      if (!newer({ ...candidate, text: "", drafted: false }, s.latest)) return; // an older attempt's late token
      this.abandon(s, out); // superseded by a newer attempt (another executor, or a reset we did not see)
    }
    if (!s.latest) s.latest = { token, attempt, text: "", drafted: false };
    s.latest.text += data.text;
    if (this.drafts && live && data.text !== "") {
      s.latest.drafted = true;
      this.draft(out, { seq, attempt, state: "streaming", delta: data.text });
    }
  }

  /** After a bulk replay: the held text of each step as one draft delta. */
  draftHeld(out: UIMessageChunk[]): void {
    if (!this.drafts) return;
    for (const s of this.held()) {
      if (!s.latest || s.latest.text === "") continue;
      s.latest.drafted = true;
      this.draft(out, { seq: s.seq, attempt: s.latest.attempt, state: "streaming", delta: s.latest.text });
    }
  }

  /**
   * Commits by the journal's step records: a step completed by the attempt held
   * is sent; a step completed by another attempt, or failed, is dropped. Sent in
   * seq order: a committed step waits while an earlier step still runs.
   */
  commitFromJournal(records: readonly StepRecord[], out: UIMessageChunk[]): void {
    const bySeq = new Map(records.map((r) => [r.seq, r]));
    for (const s of this.held()) {
      if (s.laterSeen) s.laterChecked = true;
      s.laterSeen = false;
      const rec = bySeq.get(s.seq);
      // not recorded yet (a stale read), still running or waiting: later steps wait for it
      if (!rec || (rec.status !== "completed" && rec.status !== "failed")) return;
      if (records.some((r) => r.seq < s.seq && r.status === "started")) return;
      const a = s.latest;
      if (
        rec.status === "completed" &&
        a &&
        a.attempt === rec.attempt &&
        (a.token === undefined || a.token === rec.fencingToken)
      ) {
        this.commit(s, a, out);
      } else this.drop(s, out);
    }
  }

  /** At the run's end without a journal: `completed` commits what is held, any other status drops it. */
  finishWithoutJournal(status: string, out: UIMessageChunk[]): void {
    for (const s of this.held()) {
      if (status === "completed" && s.latest) this.commit(s, s.latest, out);
      else this.drop(s, out);
    }
  }

  /** Drops what is still held (the stream ends with the run not completed). */
  dropHeld(out: UIMessageChunk[]): void {
    for (const s of this.held()) this.drop(s, out);
  }

  closeOutside(out: UIMessageChunk[]): void {
    if (this.openPart === undefined) return;
    out.push({ type: "text-end", id: this.openPart }, { type: "finish-step" });
    this.openPart = undefined;
  }

  private step(seq: number): HeldStep {
    let s = this.steps.get(seq);
    if (!s) {
      s = { seq, resets: [], done: false, laterSeen: false, laterChecked: false };
      this.steps.set(seq, s);
    }
    return s;
  }

  private abandoned(s: HeldStep, a: { token: number | undefined; attempt: number }): boolean {
    return s.resets.some((r) => a.attempt <= r.attempt && order(a.token) <= r.token);
  }

  private abandon(s: HeldStep, out: UIMessageChunk[]): void {
    const a = s.latest;
    s.latest = undefined;
    if (a?.drafted) this.draft(out, { seq: s.seq, attempt: a.attempt, state: "abandoned" });
  }

  private drop(s: HeldStep, out: UIMessageChunk[]): void {
    this.abandon(s, out);
    s.done = true;
  }

  private commit(s: HeldStep, a: Attempt, out: UIMessageChunk[]): void {
    s.done = true;
    s.latest = undefined;
    if (a.text !== "") {
      this.closeOutside(out);
      const id = `run-text-${++this.parts}`;
      out.push(
        { type: "start-step" },
        { type: "text-start", id },
        { type: "text-delta", id, delta: a.text },
        { type: "text-end", id },
        { type: "finish-step" },
      );
    }
    if (a.drafted) this.draft(out, { seq: s.seq, attempt: a.attempt, state: "committed" });
  }

  private sendOutside(text: string, out: UIMessageChunk[]): void {
    if (this.openPart === undefined) {
      this.openPart = `run-text-${++this.parts}`;
      out.push({ type: "start-step" }, { type: "text-start", id: this.openPart });
    }
    out.push({ type: "text-delta", id: this.openPart, delta: text });
  }

  private draft(out: UIMessageChunk[], data: RunDraftData): void {
    out.push({ type: "data-dumplings-draft", data, transient: true } as UIMessageChunk);
  }
}

const TIMEOUT = Symbol("timeout");

/**
 * The side channel of the durable run `runId` as an AI SDK UI message stream:
 * a `ReadableStream` of UI message chunks, for `createUIMessageStreamResponse`
 * (the `POST` that starts a turn, and the `GET` that resumes it) or
 * `readUIMessageStream`. It replays the run's events from the start, then
 * follows them live, and closes with `finish` when the run ends (its
 * `run-end` event; with `journal`, also when the run waits for a signal or a
 * timer). A run that ends `failed`, `blocked` or `cancelled` sends an `error`
 * chunk (`"the run failed"`, `"the run was cancelled"`, …) before `finish`,
 * except a run stopped by `stopRunResponse`: its message ends with the text
 * streamed before the stop, then `finish` (see the module comment).
 *
 * The answer is one assistant message (`messageId`, by default the run id)
 * holding one text part per model call, each sent once the call's attempt is
 * committed, so the message never holds text of an abandoned attempt (a
 * retried or superseded one): see the module comment for why and how. Any
 * number of calls, in any process, end with the same message, which is the
 * text `readText(stream, runId, { journal })` rebuilds, split per step.
 *
 * Only the events the stream still holds count (a `RedisRunStream` keeps the
 * last `maxLength` events of a run). Tool calls and their results are in the
 * journal, not on the side channel: the message carries text only.
 *
 * Cancelling the returned stream (the client disconnected) ends the
 * subscription; the run goes on.
 *
 * @param stream - the run's side channel (`MemoryRunStream`, `RedisRunStream`, any `RunEventStream`)
 * @param runId - the run
 * @param options - `journal` (recommended), `messageId` (default `runId`), `type` (default `"token"`),
 *   `drafts` (default false), `pollMs` (default 500), `signal`, `onError`
 * @returns the UI message stream (`ReadableStream<UIMessageChunk>`); it never errors: a failed read
 *   of the stream or the journal is an `error` chunk (text from `onError`), then the stream closes
 * @throws {InvalidOptionError} on an unknown option, an empty `runId`, or a `pollMs` that is not a positive number
 * @example
 * import { createUIMessageStreamResponse } from "ai";
 * import { runUIMessageStream } from "dumplings-ai/ai-sdk";
 * // POST: start the run without awaiting it (it outlives the request), answer with its stream
 * void runDurable(runId, agent.workflow(), { journal, stream, input: { messages } }).catch(console.error);
 * return createUIMessageStreamResponse({ stream: runUIMessageStream(stream, runId, { journal }) });
 */
export function runUIMessageStream(
  stream: RunEventStream,
  runId: string,
  options: RunUIMessageStreamOptions = {},
): ReadableStream<UIMessageChunk> {
  checkOptions("runUIMessageStream", options, STREAM_OPTIONS);
  if (typeof runId !== "string" || runId === "") {
    throw new InvalidOptionError("runUIMessageStream", "runId", "must be a non-empty string");
  }
  const pollMs = options.pollMs ?? 500;
  if (typeof pollMs !== "number" || !(pollMs > 0) || !Number.isFinite(pollMs)) {
    throw new InvalidOptionError("runUIMessageStream", "pollMs", "must be a positive number of milliseconds");
  }
  const { journal } = options;
  /** Ends the subscription: the reader cancelled, `signal` aborted, or the stream ended. */
  const abort = new AbortController();
  /** The reader cancelled or `signal` aborted: nothing more is sent. */
  let stopped = false;
  const onAbort = () => {
    stopped = true;
    abort.abort();
  };
  if (options.signal?.aborted) onAbort();
  else options.signal?.addEventListener("abort", onAbort, { once: true });
  const state = new RunTextAssembler(options.type ?? "token", options.drafts ?? false, journal !== undefined);
  let processed = 0;

  return new ReadableStream<UIMessageChunk>({
    start(controller) {
      const emit = (chunks: UIMessageChunk[]) => {
        for (const c of chunks) controller.enqueue(c);
        chunks.length = 0;
      };
      const out: UIMessageChunk[] = [];
      /** Reads the journal, then the events appended before it was read; commits; tells whether the run still runs. */
      const readJournal = async (j: RunJournalReader, live: boolean): Promise<RunStatus | undefined> => {
        const [records, run] = await Promise.all([j.readSteps(runId), j.getRun(runId)]);
        // every event of an attempt is appended before the journal records it: read them now
        for (const e of await stream.read(runId, processed)) {
          state.add(e, out, live);
          processed = e.index;
        }
        const status = run?.status;
        if (state.stopPending()) {
          // a stop was asked: the journal says whether it took effect (the run is cancelled) or lost the race
          if (status === "cancelled") {
            state.commitFromJournal(records, out);
            state.honorStop(out);
          } else if (status !== undefined && !ACTIVE.has(status)) {
            state.voidStop(out, live);
            state.commitFromJournal(records, out);
          }
          // still running: nothing is committed (a step's text may go on past the marker)
          return status;
        }
        state.commitFromJournal(records, out);
        return status;
      };
      const finish = (status: string | undefined) => {
        state.dropHeld(out);
        state.closeOutside(out);
        if (status && status !== "completed" && status !== "waiting" && !state.stopHonored()) {
          out.push({ type: "error", errorText: ENDINGS[status] ?? `the run ended ${status}` });
        }
        out.push({ type: "finish" });
        emit(out);
      };
      const main = async () => {
        out.push({ type: "start", messageId: options.messageId ?? runId });
        // replay: the stored events in one read
        const stored = await stream.read(runId);
        const first = stored[0]?.index;
        if (first !== undefined && first > 1) {
          // The stream lost its first events (a RedisRunStream keeps the last maxLength of a run): the answer
          // cannot be rebuilt from it, and half of it must not pass for all of it.
          out.push({
            type: "error",
            errorText: `the side channel of run ${runId} starts at event ${first}: its first ${first - 1} events were trimmed (maxLength); the answer is in the run's journal`,
          });
          out.push({ type: "finish" });
          emit(out);
          return;
        }
        for (const e of stored) {
          state.add(e, out, false);
          processed = e.index;
        }
        let status = journal ? await readJournal(journal, false) : undefined;
        if (status !== undefined && ENDED_RUN_STATUSES.has(status) && processed === 0) {
          // runDurable ends every stream it writes with a run-end event: an ended run's empty stream expired or was deleted
          throw new RunStreamError(runId, "gone", `holds none of its events although the run is ${status}`);
        }
        const endedAt = state.endStatus();
        if (!journal && endedAt) state.finishWithoutJournal(endedAt, out);
        state.draftHeld(out);
        emit(out);
        if (journal && status !== undefined && !ACTIVE.has(status)) return finish(status);
        if (endedAt) return finish(endedAt);
        // live
        // with a journal that tells time, the subscription itself ends with a RunStreamError when the run's producer is lost
        const watch = journal && typeof (journal as Partial<Journal>).now === "function";
        const events = stream
          .subscribe(runId, {
            after: processed,
            signal: abort.signal,
            ...(watch ? { journal: journal as unknown as Pick<Journal, "getRun" | "now"> } : {}),
          })
          [Symbol.asyncIterator]();
        let next = events.next();
        try {
          for (;;) {
            let timer: ReturnType<typeof setTimeout> | undefined;
            const got = journal
              ? await Promise.race([next, new Promise<typeof TIMEOUT>((r) => (timer = setTimeout(r, pollMs, TIMEOUT)))])
              : await next;
            clearTimeout(timer);
            if (stopped) return;
            if (got !== TIMEOUT) {
              if (got.done) {
                // a subscription with the journal ends when the run has finished: end the message too
                if (!journal) return;
                status = await readJournal(journal, true);
                emit(out);
                return finish(status ?? state.endStatus());
              }
              next = events.next();
              const e = got.value;
              if (e.index <= processed) continue; // already read with the journal
              state.add(e, out, true);
              processed = e.index;
              const endStatus = state.endStatus();
              if (!journal) {
                if (endStatus) state.finishWithoutJournal(endStatus, out);
                emit(out);
                if (endStatus) return finish(endStatus);
                continue;
              }
              emit(out);
              if (!endStatus && !state.wantsJournal() && !state.stopPending()) continue;
            }
            if (!journal) continue;
            status = await readJournal(journal, true);
            emit(out);
            if (state.endStatus() || (status !== undefined && !ACTIVE.has(status))) {
              return finish(status ?? state.endStatus());
            }
          }
        } finally {
          abort.abort(); // ends the subscription (a Redis reader disconnects)
          void next.catch(() => undefined);
        }
      };
      main()
        .catch((error: unknown) => {
          if (stopped) return;
          if (error instanceof RunStreamError) {
            // what the run's stream can no longer give is no server detail: say it, and end the message
            controller.enqueue({ type: "error", errorText: STREAM_ERRORS[error.reason] });
            controller.enqueue({ type: "finish" });
            return;
          }
          controller.enqueue({ type: "error", errorText: (options.onError ?? defaultOnError)(error) });
        })
        .finally(() => {
          options.signal?.removeEventListener("abort", onAbort);
          try {
            controller.close();
          } catch {
            // cancelled by the reader
          }
        });
    },
    cancel() {
      onAbort();
    },
  });
}

const defaultOnError = () => "An error occurred.";

/** The `errorText` of a stream that can no longer give the answer (a {@link RunStreamError}). */
const STREAM_ERRORS: Record<RunStreamError["reason"], string> = {
  trimmed:
    "the run's side channel no longer holds the start of the answer (trimmed by maxLength); the answer is in the run's journal",
  gone: "the run's side channel expired or was deleted; the answer is in the run's journal",
  "producer-lost":
    "the process running the run stopped (its lease expired); the answer goes on when a worker takes the run over",
};

/**
 * The answer of the resume endpoint `useChat({ resume: true })` calls
 * (`GET /api/chat/:id/stream` by default): 204 No Content when there is no
 * active run for the chat, else the run's UI message stream
 * ({@link runUIMessageStream}, a full replay then live) as an SSE response
 * made by the AI SDK's `createUIMessageStreamResponse`.
 *
 * No active run: `runId` is `undefined`, `null` or `""` (the app knows of no
 * turn being answered), or, with `journal`, the run does not exist or has
 * ended (`completed`, `failed`, `cancelled`): the chat store then holds the
 * answer, and a replay would only repeat it. A run that is `pending`,
 * `running`, `waiting` or `blocked` is replayed.
 *
 * @param stream - the run's side channel
 * @param runId - the run answering the chat's last message, if any
 * @param options - those of {@link runUIMessageStream} (`journal` recommended), and `headers`
 * @returns a `Response`: 204 without a body, or 200 with the UI message stream (SSE)
 * @throws {InvalidOptionError} on an unknown option or a bad `pollMs`
 * @throws {BackendError} when the journal cannot be read
 * @example
 * // GET /api/chat/:id/stream
 * export async function GET(_req: Request, chatId: string) {
 *   const chat = (await chats.load(chatId)) ?? [];
 *   const runId = chat.at(-1)?.role === "user" ? `${chatId}:${chat.length}` : undefined;
 *   return resumeRunResponse(stream, runId, { journal });
 * }
 */
export async function resumeRunResponse(
  stream: RunEventStream,
  runId: string | null | undefined,
  options: ResumeRunResponseOptions = {},
): Promise<Response> {
  checkOptions("resumeRunResponse", options, RESPONSE_OPTIONS);
  const { headers, ...rest } = options;
  if (runId === undefined || runId === null || runId === "") return new Response(null, { status: 204 });
  if (rest.journal) {
    const run = await rest.journal.getRun(runId);
    if (!run || ENDED_RUN_STATUSES.has(run.status)) return new Response(null, { status: 204 });
  }
  return createUIMessageStreamResponse({
    stream: runUIMessageStream(stream, runId, rest),
    ...(headers ? { headers } : {}),
  });
}
