/**
 * The durable-run pages of the web inspector: runs by status, and a run page
 * with the journal as a timeline (step, kind, status, attempts, fencing token,
 * input hash, output or error, duration, drift), the pending approval with the
 * tool name and its arguments and Approve / Reject buttons, signals, the
 * operator actions (cancel, reset, retry), the audit events, and two live
 * feeds over server-sent events that resume after a reconnect from
 * `Last-Event-ID`: the journal's events (`/runs/:id/live`) and the run's side
 * channel (`/runs/:id/stream`, when the inspector has one).
 *
 * Every action goes through the same functions as the `dumplings approve /
 * reject / signal / cancel / reset / retry` commands.
 *
 * @module
 */
import type { Context, Hono } from "hono";
import { streamSSE } from "hono/streaming";
import { FormatError, InvalidOptionError, RunStreamError } from "../core/errors.js";
import type { JsonObject, JsonValue } from "../core/json.js";
import { decisionValue, pendingApprovals } from "../durable/approvals.js";
import { CHECKPOINT_STEP, INTERRUPT_SIGNAL } from "../durable/checkpoints/journal-store.js";
import { RunNotFoundError } from "../durable/errors.js";
import {
  type Journal,
  type JournalEvent,
  type RunRecord,
  type RunStatus,
  runCursor,
  type StepRecord,
} from "../durable/journal.js";
import { approvalSignalName } from "../durable/signals.js";
import { errorParts, isItemFault, UsageError } from "../ops/errors.js";
import { when } from "../ops/format.js";
import { describeWait, operatorAction, operatorName, renderNotes, sendDecision } from "../ops/runs.js";
import type { PendingInterrupt } from "../workflow/state.js";
import { badge, type Html, h, jsonBlock, layout } from "./html.js";
import type { UiSources } from "./sources.js";
import { interruptCard, workflowJournal } from "./workflows.js";

const STATUSES: readonly RunStatus[] = ["pending", "running", "waiting", "blocked", "failed", "completed", "cancelled"];
/** Runs per list page (pages follow the journal's cursor: each run once while runs change). */
export const RUNS_PER_PAGE = 50;
/** How often the live feed polls the journal for new events, ms. */
export const LIVE_POLL_MS = 500;

/**
 * The kind of a journal step, from its name: `llm` (a model call), `tool`, `approval` (a
 * `needs-approval:` policy decision), `signal`, `sleep`, `patch`, or `step` (application code).
 *
 * @param name - the step's name
 * @returns the kind
 */
export function stepKind(name: string): string {
  if (name === "llm") return "llm";
  for (const [prefix, kind] of [
    ["tool:", "tool"],
    ["needs-approval:", "approval"],
    ["signal:", "signal"],
    ["sleep:", "sleep"],
    ["patch:", "patch"],
  ] as const) {
    if (name.startsWith(prefix)) return kind;
  }
  return "step";
}

function needJournal(sources: UiSources): Journal {
  const src = sources.journal;
  if (src.value === undefined) throw new UsageError(src.missing);
  return src.value;
}

async function getRun(journal: Journal, runId: string): Promise<RunRecord> {
  const run = await journal.getRun(runId);
  if (!run) throw new RunNotFoundError(runId);
  return run;
}

const back = (c: Context, runId: string, done: string) =>
  c.redirect(`/runs/${encodeURIComponent(runId)}?${new URLSearchParams({ done }).toString()}`, 303);

/**
 * The interrupt a workflow's run waits on (`waitingFor` = `interrupt:<id>`), from its newest
 * checkpoint step (the workflow state, whose `pendingInterrupt` has that id); undefined otherwise.
 */
function pendingInterruptOf(run: RunRecord, steps: readonly StepRecord[]): PendingInterrupt | undefined {
  if (run.status !== "waiting" || !run.waitingFor?.startsWith(INTERRUPT_SIGNAL)) return undefined;
  const checkpoint = steps.findLast((s) => s.name.startsWith(CHECKPOINT_STEP) && s.status === "completed");
  const pending = (checkpoint?.output as { pendingInterrupt?: PendingInterrupt } | null | undefined)?.pendingInterrupt;
  return pending && `${INTERRUPT_SIGNAL}${pending.id}` === run.waitingFor ? pending : undefined;
}

const formText = (v: unknown) => (typeof v === "string" ? v.trim() : "");

/**
 * Adds the durable-run routes to the app.
 *
 * @param app - the hono app
 * @param sources - the inspector's stores
 */
export function runRoutes(app: Hono, sources: UiSources): void {
  const by = () => sources.by ?? operatorName();

  app.get("/runs", async (c) => {
    const src = sources.journal;
    if (src.value === undefined) {
      return c.html(
        layout(
          { title: "Durable runs", section: "runs" },
          h`<h1>Durable runs</h1><p class="flash error">${src.missing}</p>`,
        ),
      );
    }
    const asked = c.req.query("status");
    const status = STATUSES.find((s) => s === asked);
    // Newest created first, a page at a time after the previous page's last run (runCursor): a run keeps
    // its place while it changes, so following "older" lists each run once.
    const cursor = c.req.query("cursor") || undefined;
    const runs = await src.value
      .listRuns({ ...(status ? { status } : {}), limit: RUNS_PER_PAGE + 1, ...(cursor ? { after: cursor } : {}) })
      .catch((e: unknown) => {
        throw e instanceof InvalidOptionError ? new UsageError(e.message) : e;
      });
    const shown = runs.slice(0, RUNS_PER_PAGE);
    const last = shown.at(-1);
    const next = runs.length > RUNS_PER_PAGE && last ? runCursor(last) : undefined;
    const rows: Html[] = [];
    for (const run of shown) {
      let waiting: string;
      try {
        if (run.readError !== undefined) throw new FormatError(run.readError.message); // its own row is unreadable
        const approvals = run.waitingFor?.startsWith("approval:")
          ? pendingApprovals(run, await src.value.readSteps(run.runId), await src.value.listSignals(run.runId))
          : [];
        waiting = describeWait(run, approvals);
      } catch (e) {
        // One run whose journal records cannot be read (as `dumplings runs` tells them) is a row with its error.
        if (!isItemFault(e)) throw e;
        const { code, message } = errorParts(e);
        waiting = `unreadable: ${message} (${code})`;
      }
      rows.push(
        h`<tr><td><a href="/runs/${encodeURIComponent(run.runId)}">${run.runId}</a></td><td class="hide-sm">${run.workflow}</td><td>${badge(run.status)}</td><td class="hide-sm small">${when(run.createdAt)}</td><td class="hide-sm small">${when(run.updatedAt)}</td><td class="small">${waiting}</td></tr>`,
      );
    }
    const tab = (s: RunStatus | undefined, label: string) =>
      h`<a href="/runs${s ? `?status=${s}` : ""}" class="${s === status ? "active" : ""}">${label}</a>`;
    return c.html(
      layout(
        { title: "Durable runs", section: "runs" },
        h`<h1>Durable runs <span class="muted small">${src.label}</span></h1>
<nav class="pager">${tab(undefined, "all")}${STATUSES.map((s) => tab(s, s))}</nav>
<div class="table-wrap"><table>
<thead><tr><th>run</th><th class="hide-sm">workflow</th><th>status</th><th class="hide-sm">created</th><th class="hide-sm">updated</th><th>waiting for / reason</th></tr></thead>
<tbody>${rows}</tbody></table></div>
${runs.length === 0 ? h`<p class="muted">no runs${status ? ` with status ${status}` : ""}</p>` : ""}
<nav class="pager">${cursor ? h`<a href="/runs${status ? `?status=${status}` : ""}">« newest</a>` : ""}${next ? h`<a rel="next" href="/runs?${new URLSearchParams({ ...(status ? { status } : {}), cursor: next }).toString()}">older ›</a>` : ""}</nav>`,
      ),
    );
  });

  app.get("/runs/:id", async (c) => {
    const journal = needJournal(sources);
    const runId = c.req.param("id");
    const run = await getRun(journal, runId);
    const [steps, events, signals] = await Promise.all([
      journal.readSteps(runId),
      journal.readEvents(runId),
      journal.listSignals(runId),
    ]);
    const approvals = pendingApprovals(run, steps, signals);
    const interrupt = pendingInterruptOf(run, steps);
    // The same workflow's page, when the inspector's workflow store is this journal.
    const sameStore = workflowJournal(sources.workflows.value) === journal;
    const drift = new Map<number, JournalEvent[]>();
    for (const e of events) {
      if (e.type === "step_drift" && e.seq !== undefined) drift.set(e.seq, [...(drift.get(e.seq) ?? []), e]);
    }
    const base = `/runs/${encodeURIComponent(runId)}`;
    const done = c.req.query("done");
    const ended = run.status === "completed" || run.status === "failed" || run.status === "cancelled";
    const lastEvent = events.at(-1)?.index ?? -1;
    return c.html(
      layout(
        {
          title: runId,
          section: "runs",
          crumbs: [
            ["Durable runs", "/runs"],
            [runId, undefined],
          ],
        },
        h`<h1>${runId} <span data-run-status class="badge b-${run.status}">${run.status}</span></h1>
${done ? h`<p class="flash" role="status">${done}</p>` : ""}
<p class="muted small">workflow ${run.workflow} · created ${when(run.createdAt)} · updated ${when(run.updatedAt)} · fencing token ${run.fencingToken}${run.leaseOwner ? ` · lease ${run.leaseOwner} until ${when(run.leaseExpiresAt)}` : ""}</p>
<p>${describeWait(run, approvals)}${sameStore && interrupt ? h` · <a href="/workflows/${encodeURIComponent(runId)}">workflow page</a>` : ""}</p>
${
  interrupt
    ? interruptCard(
        base,
        runId,
        interrupt,
        signals.find((s) => s.name === run.waitingFor),
        undefined,
        sources.journal.label,
      )
    : ""
}
${approvals.map(
  (a) => h`<section class="card approval" id="approval" data-tool-call="${a.toolCallId}">
<h2>${a.decision ? `${a.decision.approved ? "Approved" : "Rejected"}, pending resume` : "Pending approval"}</h2>
<p>tool <code class="tool-name">${a.toolName ?? "(not found in the journal)"}</code> <span class="muted small">call ${a.toolCallId}</span></p>
<h4>arguments</h4>${jsonBlock(a.input ?? null)}
${
  a.decision
    ? h`${a.decision.args ? h`<h4>corrected arguments</h4>${jsonBlock(a.decision.args)}` : ""}<p class="muted small">${a.decision.note ?? ""}</p>`
    : h`<div class="actions">
<form method="post" action="${base}/approve" class="inline"><input type="hidden" name="toolCallId" value="${a.toolCallId}"><input type="text" name="note" placeholder="note (sent to the model)" aria-label="approval note">${a.editableArgs ? h`<label class="small">corrected arguments (JSON) <textarea name="args" rows="3" aria-label="corrected arguments">${JSON.stringify(a.input ?? {})}</textarea></label><input type="hidden" name="argsShown" value="${JSON.stringify(a.input ?? {})}">` : ""}<button class="primary" type="submit" name="decision" value="approve">Approve</button></form>
<form method="post" action="${base}/reject" class="inline"><input type="hidden" name="toolCallId" value="${a.toolCallId}"><input type="text" name="note" placeholder="why (sent to the model)" aria-label="rejection reason"><button class="danger" type="submit" name="decision" value="reject">Reject</button></form>
</div>`
}
</section>`,
)}
<section class="card" data-live="${base}/live?after=${lastEvent}"><h2>Live <span id="live-state" class="muted small">connecting…</span></h2>
<p id="live-changed" class="flash" hidden>the run changed: <a href="${base}">reload</a> to see its journal</p>
<ol id="live-log" class="small" data-after="${lastEvent}"></ol>
${sources.stream ? h`<div data-stream="${base}/stream"><h4>side channel</h4><pre id="stream-text"></pre></div>` : h`<p class="muted small">no side channel (start dumplings ui with --stream redis://… to follow model tokens)</p>`}
</section>
<h2>Journal</h2>
<div class="table-wrap"><table id="journal">
<thead><tr><th class="num">seq</th><th>step</th><th>kind</th><th>status</th><th class="num">attempt</th><th class="num hide-sm">token</th><th class="num">ms</th><th>output / error</th></tr></thead>
<tbody>${steps.map((s: StepRecord) => {
          const d = drift.get(s.seq) ?? [];
          return h`<tr data-seq="${s.seq}">
<td class="num">${s.seq}</td>
<td><code>${s.name}</code>${d.map((e) => h`<div class="tag" title="the step's input changed since it was recorded; the recorded result was used">drift: ${e.detail ?? "input changed"}</div>`)}</td>
<td>${stepKind(s.name)}</td>
<td>${badge(s.status)}</td>
<td class="num">${s.attempt}</td>
<td class="num hide-sm">${s.fencingToken}</td>
<td class="num">${s.finishedAt === undefined ? "" : s.finishedAt - s.startedAt}</td>
<td><div class="small muted">input sha256 ${s.inputHash.slice(0, 16)}… · ${when(s.startedAt)}</div>${
            s.status === "failed" && s.error
              ? h`<pre>${s.error.name}: ${s.error.message}</pre>`
              : s.output === undefined
                ? ""
                : h`<details><summary class="small">output</summary>${jsonBlock(s.output, 8000)}</details>`
          }</td>
</tr>`;
        })}</tbody></table></div>
<div class="grid">
<section class="card"><h2>Input</h2>${jsonBlock(run.input)}${run.output !== undefined ? h`<h2>Output</h2>${jsonBlock(run.output)}` : ""}${run.error ? h`<h2>Error</h2><pre>${run.error.name}: ${run.error.message}</pre>` : ""}</section>
<section class="card"><h2>Signals</h2>
${signals.length === 0 ? h`<p class="muted">none</p>` : h`<ul class="small">${signals.map((s) => h`<li><code>${s.name}</code> at ${when(s.sentAt)}: ${JSON.stringify(s.value)}</li>`)}</ul>`}
${
  ended
    ? ""
    : h`<form method="post" action="${base}/signal"><label>name <input type="text" name="name" required></label> <label>value (JSON) <input type="text" name="value" value="true"></label> <button type="submit">Send signal</button></form>`
}
</section>
<section class="card"><h2>Operator actions</h2>
<div class="actions">
${ended ? "" : h`<form method="post" action="${base}/cancel"><input type="text" name="reason" placeholder="reason" aria-label="cancel reason"> <button class="danger" type="submit">Cancel run</button></form>`}
${steps.length > 0 ? h`<form method="post" action="${base}/reset"><label>reset to step <select name="toStep"><option value="-1">-1 (start over)</option>${steps.slice(0, -1).map((s) => h`<option value="${s.seq}">${s.seq} · ${s.name}</option>`)}</select></label> <button type="submit">Reset</button></form>` : ""}
${run.status === "failed" || run.status === "blocked" ? h`<form method="post" action="${base}/retry"><button type="submit">Retry</button></form>` : ""}
</div>
<h4>Audit</h4>${renderNotes(events).length === 0 ? h`<p class="muted small">no operator actions</p>` : h`<ul class="small">${renderNotes(events).map((n) => h`<li>${n}</li>`)}</ul>`}
</section>
</div>
<h2>Events</h2>
<div class="table-wrap"><table class="small"><thead><tr><th class="num">#</th><th>at</th><th>type</th><th>step</th><th class="hide-sm">by</th><th>detail</th></tr></thead>
<tbody>${events.map((e) => h`<tr><td class="num">${e.index}</td><td>${when(e.at)}</td><td>${e.type}</td><td>${e.seq ?? ""} ${e.name ?? ""}</td><td class="hide-sm">${e.by ?? ""}</td><td>${e.detail ?? ""}</td></tr>`)}</tbody></table></div>`,
      ),
    );
  });

  const decide = (approved: boolean) => async (c: Context) => {
    const journal = needJournal(sources);
    const runId = c.req.param("id")!;
    const form = await c.req.parseBody();
    const toolCallId = formText(form.toolCallId);
    const note = formText(form.note) || formText(form.reason); // `reason`: the field's name before 0.2
    const shown = formText(form.argsShown);
    const args = approved && formText(form.args) !== shown ? correctedArgs(formText(form.args)) : undefined;
    // As `approve`/`reject` and `dumplings approve/reject`: a call the run does not wait on is refused (it would
    // never be taken), naming the call it waits on; corrected arguments are checked against the tool's schema.
    const value = await decisionValue(
      journal,
      runId,
      toolCallId,
      { approved, ...(note ? { note } : {}), ...(args !== undefined ? { args } : {}) },
      approved ? "approve" : "reject",
    );
    const name = approvalSignalName(toolCallId);
    const result = await sendDecision(journal, runId, name, value, sources.queue);
    return back(
      c,
      runId,
      `${approved ? "approved" : "rejected"} ${toolCallId}: ${name} recorded${result.wakes ? (result.queued ? "; the run is queued again" : "; the run continues when its worker resumes it") : ""}`,
    );
  };
  /** The form's corrected arguments: none when the field is empty or holds the model's own arguments unchanged. */
  const correctedArgs = (text: string): JsonObject | undefined => {
    if (text === "") return undefined;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (cause) {
      throw Object.assign(new UsageError(`the corrected arguments are not JSON: ${text.slice(0, 200)}`), { cause });
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      throw new UsageError("the corrected arguments must be a JSON object of the tool's arguments");
    }
    return value as JsonObject;
  };
  app.post("/runs/:id/approve", decide(true));
  app.post("/runs/:id/reject", decide(false));

  app.post("/runs/:id/signal", async (c) => {
    const journal = needJournal(sources);
    const runId = c.req.param("id");
    const form = await c.req.parseBody();
    const name = formText(form.name);
    if (name === "") throw new UsageError("a signal needs a name");
    let value: JsonValue = true;
    const text = formText(form.value);
    if (text !== "") {
      try {
        value = JSON.parse(text) as JsonValue;
      } catch (cause) {
        throw Object.assign(new UsageError(`the signal value is not JSON: ${text.slice(0, 200)}`), { cause });
      }
    }
    const result = await sendDecision(journal, runId, name, value, sources.queue);
    return back(c, runId, `signal ${name} recorded${result.wakes ? "; it releases the run" : ""}`);
  });

  app.post("/runs/:id/cancel", async (c) => {
    const runId = c.req.param("id");
    const reason = formText((await c.req.parseBody()).reason);
    const run = await operatorAction(needJournal(sources), runId, "cancel", { by: by(), reason: reason || undefined });
    return back(c, runId, `${runId} is ${run.status} (cancel by ${by()})`);
  });

  app.post("/runs/:id/reset", async (c) => {
    const runId = c.req.param("id");
    const form = await c.req.parseBody();
    const toSeq = Number(form.toStep);
    if (!Number.isInteger(toSeq) || toSeq < -1) {
      throw new UsageError(`step ${JSON.stringify(form.toStep)} is not a step number (an integer ≥ -1)`);
    }
    const run = await operatorAction(needJournal(sources), runId, "reset", { by: by(), toSeq });
    return back(
      c,
      runId,
      `${runId} is ${run.status} (reset to step ${toSeq} by ${by()}); it continues on its next resume`,
    );
  });

  app.post("/runs/:id/retry", async (c) => {
    const runId = c.req.param("id");
    const run = await operatorAction(needJournal(sources), runId, "retry", { by: by() });
    return back(c, runId, `${runId} is ${run.status} (retry by ${by()}); it continues on its next resume`);
  });

  // The journal's events as they are recorded; `Last-Event-ID` (sent by EventSource on reconnect) resumes after it.
  app.get("/runs/:id/live", async (c) => {
    const journal = needJournal(sources);
    const runId = c.req.param("id");
    let run = await getRun(journal, runId);
    const after = lastEventId(c, -1); // journal event indexes start at 0
    return streamSSE(c, async (stream) => {
      let sent = after;
      let status = run.status;
      let alive = true;
      stream.onAbort(() => {
        alive = false;
      });
      await stream.writeSSE({ event: "status", data: JSON.stringify({ status, changed: false }), retry: 1000 });
      while (alive) {
        const events = (await journal.readEvents(runId)).filter((e) => e.index > sent);
        for (const e of events) {
          await stream.writeSSE({
            event: "journal",
            id: String(e.index),
            data: JSON.stringify({ ...e, at: when(e.at) }),
          });
          sent = e.index;
        }
        const now = await journal.getRun(runId);
        if (now && (now.status !== status || now.updatedAt !== run.updatedAt)) {
          status = now.status;
          run = now;
          await stream.writeSSE({ event: "status", data: JSON.stringify({ status, changed: true }) });
        }
        await stream.sleep(LIVE_POLL_MS);
      }
    });
  });

  // The run's side channel (model tokens), resumed from `Last-Event-ID` (the stream's own 1-based index).
  app.get("/runs/:id/stream", async (c) => {
    const runId = c.req.param("id");
    const source = sources.stream;
    if (!source) return c.text("this inspector has no side channel (--stream)", 404);
    const after = Math.max(0, lastEventId(c, 0)); // side-channel indexes start at 1
    return streamSSE(c, async (stream) => {
      const abort = new AbortController();
      stream.onAbort(() => abort.abort());
      await stream.writeSSE({ event: "hello", data: JSON.stringify({ after }), retry: 1000 });
      // With the journal, the subscription ends when the run has (or its stream is gone, or its process died):
      // say so with an `end` or `stream-error` event (the page then stops reconnecting).
      const journal = sources.journal.value;
      try {
        for await (const e of source.subscribe(runId, {
          after,
          signal: abort.signal,
          ...(journal ? { journal } : {}),
        })) {
          await stream.writeSSE({ event: "token", id: String(e.index), data: JSON.stringify(e) });
        }
        if (!abort.signal.aborted) await stream.writeSSE({ event: "end", data: "{}" });
      } catch (e) {
        if (!(e instanceof RunStreamError)) throw e;
        await stream.writeSSE({
          event: "stream-error",
          data: JSON.stringify({ code: e.code, reason: e.reason, message: e.message }),
        });
      }
    });
  });
}

/**
 * Where a live feed resumes: the `Last-Event-ID` header (EventSource sends it on a reconnect), else the
 * `after` query parameter (what the page already shows), else `fallback`.
 */
function lastEventId(c: Context, fallback: number): number {
  const text = c.req.header("last-event-id") ?? c.req.query("after");
  const n = Number(text);
  return text !== undefined && text !== "" && Number.isInteger(n) && n >= -1 ? n : fallback;
}
