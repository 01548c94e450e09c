/**
 * A durable language model for a user's own AI SDK loop: {@link durableModel}
 * wraps a model (AI SDK 6 `wrapLanguageModel` middleware) so each model call
 * made inside a run — by `generateText`, `streamText`, `generateObject`, a
 * `ToolLoopAgent` — is a journaled `llm` step. After a crash the loop replays:
 * recorded answers come from the journal and the model is not called (or paid)
 * again for a completed call.
 *
 * @module
 */
import { type LanguageModelMiddleware, wrapLanguageModel } from "ai";
import type { JsonValue } from "../core/json.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { currentRun, currentStep, type RetryPolicy, step } from "./context.js";
import { NoRunContextError } from "./errors.js";

/** The keys of {@link DurableModelOptions}: any other is an `InvalidOptionError`. */
const MODEL_OPTIONS = optionKeys<DurableModelOptions>({
  name: true,
  retry: true,
  emitTokens: true,
});

/** A model `wrapLanguageModel` accepts (an AI SDK 6 `LanguageModelV3`, e.g. `openai("gpt-4.1")`). */
export type DurableModelBase = Parameters<typeof wrapLanguageModel>[0]["model"];

/** Options of {@link durableModel}. */
export interface DurableModelOptions {
  /** Step name of each model call. @default "llm" */
  name?: string;
  /**
   * Retry policy of each call (each attempt is one model request, journaled). The
   * AI SDK's own `maxRetries` does not retry a failed step (a `StepFailedError`
   * is not an API error). @default { maxAttempts: 3, backoffMs: 500 }
   */
  retry?: RetryPolicy;
  /**
   * Stream text deltas to the run's side channel as `{ type: "token", seq, attempt, text }`
   * while a `streamText` call runs (a retried attempt first emits `{ type: "reset", seq, attempt }`
   * for the one it abandons). @default true
   */
  emitTokens?: boolean;
}

type Params = Parameters<NonNullable<LanguageModelMiddleware["wrapGenerate"]>>[0]["params"];
type GenerateResult = Awaited<ReturnType<NonNullable<LanguageModelMiddleware["wrapGenerate"]>>>;
type StreamResult = Awaited<ReturnType<NonNullable<LanguageModelMiddleware["wrapStream"]>>>;
type StreamPart = StreamResult["stream"] extends ReadableStream<infer P> ? P : never;

/** JSON copy: bytes as base64 strings, URLs and Dates as strings, `undefined` dropped. */
function toJson(value: unknown): JsonValue {
  return JSON.parse(
    JSON.stringify(value, (_key, v: unknown) => {
      if (v instanceof Uint8Array) return Buffer.from(v).toString("base64");
      if (v instanceof URL) return v.href;
      return v;
    }) ?? "null",
  ) as JsonValue;
}

/** The call as recorded and hashed: the call options without the abort signal and the headers. */
function callInput(model: DurableModelBase, params: Params): JsonValue {
  const { abortSignal: _signal, headers: _headers, ...rest } = params;
  return { model: { provider: model.provider, modelId: model.modelId }, call: toJson(rest) };
}

function withSignal(params: Params): Params {
  const own = currentStep()?.signal;
  if (!own) return params;
  // AbortSignal.any is Node >= 20.3; on older 20.x the step's signal alone is passed
  const joined =
    params.abortSignal && typeof AbortSignal.any === "function" ? AbortSignal.any([params.abortSignal, own]) : own;
  return { ...params, abortSignal: joined };
}

/** A recorded `Date` field (ISO string) as a `Date` again. */
const date = (v: unknown) => (typeof v === "string" ? new Date(v) : v);

function requireRun(): void {
  if (!currentRun()) throw new NoRunContextError("a durableModel call");
}

/**
 * Wraps an AI SDK language model so every call made inside a durable run is a
 * journaled step (`llm`, input `{ model: { provider, modelId }, call }` where
 * `call` is the call options as JSON — prompt, tools, settings, provider
 * options — without the abort signal and headers; output: the result, or the
 * stream's parts). On replay the recorded result is returned (a `generateText`
 * call) or replayed as a stream (a `streamText` call) without a request: a
 * user's loop resumed after a crash sends each request once. The step's abort
 * signal (run cancelled, lease lost) is joined to the call's.
 *
 * A stream call reads the whole model stream inside the step before the caller
 * sees its parts (the recorded parts are what every replay sees); text deltas
 * reach the run's side channel as they arrive (`emitTokens`).
 *
 * @param model - an AI SDK 6 language model (`LanguageModelV3`)
 * @param options - `name` (step name, default `llm`), `retry` (default `{ maxAttempts: 3, backoffMs: 500 }`), `emitTokens` (default true)
 * @returns the wrapped model, usable wherever the model was
 * @throws {NoRunContextError} (from the model call) when called outside {@link runDurable}
 * @throws {ReplayMismatchError} (from the model call, out of `generateText`) when the journal holds
 *   another step at this position: the program changed; the run is recorded `blocked`
 * @throws {StepFailedError} (from the model call) when every attempt failed; the cause is the model's error
 * @example
 * const model = durableModel(openai("gpt-4.1-mini"));
 * const tools = { weather: durableTool(weatherTool, { name: "weather" }) };
 * await runDurable("trip-7", async () => {
 *   const r = await generateText({ model, tools, stopWhen: stepCountIs(3), prompt: "Weather in Paris?" });
 *   return r.text;
 * }, { journal });
 */
export function durableModel(model: DurableModelBase, options: DurableModelOptions = {}): DurableModelBase {
  checkOptions("durableModel", options, MODEL_OPTIONS);
  const name = options.name ?? "llm";
  const retry = options.retry ?? { maxAttempts: 3, backoffMs: 500 };
  const emitTokens = options.emitTokens ?? true;
  return wrapLanguageModel({
    model,
    middleware: {
      specificationVersion: "v3",
      async wrapGenerate({ params, model: inner }): Promise<GenerateResult> {
        requireRun();
        const recorded = await step(
          name,
          async () => {
            const result = await inner.doGenerate(withSignal(params));
            const { request: _request, response, ...rest } = result;
            const { body: _body, headers: _headers, ...meta } = response ?? {};
            return toJson({ ...rest, response: meta });
          },
          { input: callInput(model, params), retry },
        );
        const result = recorded as unknown as GenerateResult & { response?: { timestamp?: unknown } };
        if (result.response?.timestamp !== undefined) {
          result.response = { ...result.response, timestamp: date(result.response.timestamp) as Date };
        }
        return result;
      },
      async wrapStream({ params, model: inner }): Promise<StreamResult> {
        requireRun();
        const parts = (await step(
          name,
          async () => {
            const run = emitTokens ? currentRun() : undefined;
            const info = currentStep();
            const origin: { [key: string]: JsonValue } = info ? { seq: info.seq, attempt: info.attempt } : {};
            if (run && info && info.attempt > 1) {
              await run.emit({ type: "reset", seq: info.seq, attempt: info.attempt - 1 });
            }
            const { stream } = await inner.doStream(withSignal(params));
            const out: JsonValue[] = [];
            const reader = stream.getReader();
            for (;;) {
              const { done, value } = await reader.read();
              if (done) break;
              if (value.type === "error") throw value.error; // the attempt failed: retried as a step
              if (value.type === "raw") continue;
              if (value.type === "text-delta" && run) await run.emit({ type: "token", ...origin, text: value.delta });
              out.push(toJson(value));
            }
            return out;
          },
          { input: callInput(model, params), retry },
        )) as unknown as (StreamPart & { timestamp?: unknown })[];
        const replayed = parts.map((p) =>
          p.type === "response-metadata" && p.timestamp !== undefined
            ? ({ ...p, timestamp: date(p.timestamp) } as StreamPart)
            : (p as StreamPart),
        );
        return {
          stream: new ReadableStream<StreamPart>({
            start(controller) {
              for (const p of replayed) controller.enqueue(p);
              controller.close();
            },
          }),
        };
      },
    },
  });
}
