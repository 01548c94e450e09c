/**
 * The workflow pages of the web inspector: workflows by status (keyset pages
 * of `CheckpointStore.listWorkflows`), and a workflow page with its step
 * timeline (node, time since the previous checkpoint, status, recorded error),
 * the state at any step, the diff between two steps, the pending interrupt
 * and fork (time travel) from a step with `ResumableGraphRunner.resumeFrom`.
 *
 * A pending interrupt of a workflow kept in a durable journal (every
 * `JournalColdStore`, `SqliteColdStore` among them) is a run waiting for the
 * signal `interrupt:<id>`: the page offers what a durable run's wait offers
 * (Signal with a JSON value, and Approve / Reject for a yes/no question),
 * sent with `sendDecision` — the function of the run page and of `dumplings
 * signal` — to the store's journal; the application's worker then continues
 * the workflow with `runOrResume`. Given the application's runner, the page
 * resumes it at once instead (`runner.resume`).
 *
 * @module
 */
import type { Context, Hono } from "hono";
import { InvalidOptionError } from "../core/errors.js";
import type { JsonValue } from "../core/json.js";
import type { WorkflowRowStatus } from "../durable/checkpoints/contract.js";
import { INTERRUPT_SIGNAL, JournalColdStore } from "../durable/checkpoints/journal-store.js";
import type { Journal, SignalRecord } from "../durable/journal.js";
import { UsageError } from "../ops/errors.js";
import { when } from "../ops/format.js";
import { sendDecision } from "../ops/runs.js";
import { WorkflowNotFoundError } from "../workflow/errors.js";
import { ResumableGraphRunner } from "../workflow/runner.js";
import type { PendingInterrupt } from "../workflow/state.js";
import type { CheckpointStore, HistoryEntry } from "../workflow/store.js";
import { jsonDiff } from "./diff.js";
import { badge, type Html, h, jsonBlock, layout } from "./html.js";
import type { UiSources } from "./sources.js";

const STATUSES: readonly WorkflowRowStatus[] = ["running", "waiting", "finished", "failed"];
/** Workflows per list page. */
export const WORKFLOWS_PER_PAGE = 50;

const notice = (c: { req: { query(k: string): string | undefined } }): Html => {
  const done = c.req.query("done");
  return done ? h`<p class="flash" role="status">${done}</p>` : h``;
};

/**
 * A runner that can write a fork's first checkpoint (`resumeFrom` with `run: false`) but never
 * runs a node: the inspector does not have the application's node code. Its nodes are the
 * workflow's own node names, each refusing to run.
 */
function forkOnlyRunner(store: CheckpointStore, history: readonly HistoryEntry[]): ResumableGraphRunner {
  const names = new Set<string>();
  for (const e of history) {
    for (const n of [e.nodeName, e.state.currentNode]) if (!n.startsWith("__")) names.add(n);
  }
  if (names.size === 0) names.add("entry");
  const refuse = async (): Promise<never> => {
    throw new UsageError("dumplings ui does not run workflow nodes; run the fork with your application's runner");
  };
  return new ResumableGraphRunner({ store, nodes: Object.fromEntries([...names].map((n) => [n, refuse])) });
}

/**
 * The durable journal a workflow store keeps its workflows in (a `JournalColdStore`: workflow W is
 * run W), or undefined for a store that is not journal-backed.
 *
 * @param store - the inspector's workflow store
 * @returns the store's journal, or undefined
 */
export function workflowJournal(store: CheckpointStore | undefined): Journal | undefined {
  return store?.cold instanceof JournalColdStore ? store.cold.journal : undefined;
}

/** Words that open a question a yes or a no does not answer. */
const OPEN_QUESTION = /^(what|which|who|whom|whose|where|when|why|how)\b/i;

/**
 * Whether an interrupt asks a yes/no question (`ctx.interrupt({ reason: "approve the plan?" })`,
 * answered `true` or `false`): its reason ends with "?" and does not open with what/which/who/
 * where/when/why/how. Such an interrupt gets Approve (sends `true`) and Reject (sends `false`)
 * beside the Signal form, as a durable run's pending approval does.
 *
 * @param pending - the pending interrupt
 * @returns true for a yes/no question
 */
export function isApprovalQuestion(pending: Pick<PendingInterrupt, "reason">): boolean {
  const reason = pending.reason.trim();
  return reason.endsWith("?") && !OPEN_QUESTION.test(reason);
}

/**
 * The card of a workflow waiting on `interrupt()`, on the workflow page and on its run page: the
 * question and its payload, then either the recorded answer (pending resume) or the actions, each
 * a form posting to `<base>/signal` (name = the interrupt's signal, value = JSON): Approve (`true`)
 * and Reject (`false`) for a yes/no question, and Signal with a JSON value.
 *
 * @param base - the page's address (`/workflows/W` or `/runs/W`); the forms post to `<base>/signal`
 * @param workflowId - the workflow (its run's id)
 * @param pending - the pending interrupt
 * @param answered - the interrupt's signal when it was already sent
 * @param instead - what to show instead of the signal actions (the runner's Resume form, when the
 *   inspector has the application's runner)
 * @param journalSpec - the journal's SPEC for the `dumplings signal --journal` hint (a label that is
 *   no SPEC is left out)
 * @returns the card's HTML
 */
export function interruptCard(
  base: string,
  workflowId: string,
  pending: PendingInterrupt,
  answered: SignalRecord | undefined,
  instead?: Html,
  journalSpec?: string,
): Html {
  const name = `${INTERRUPT_SIGNAL}${pending.id}`;
  const journalOption =
    journalSpec && /^(sqlite|postgres|postgresql|redis|rediss):/.test(journalSpec) ? ` --journal ${journalSpec}` : "";
  const actions = answered
    ? h`<p data-interrupt-answered>answered with <code>${JSON.stringify(answered.value)}</code> at ${when(answered.sentAt)}, pending resume: the application's worker continues it (<code>runner.runOrResume(${JSON.stringify(workflowId)})</code>)</p>`
    : (instead ??
      h`${
        isApprovalQuestion(pending)
          ? h`<div class="actions">
<form method="post" action="${base}/signal" class="inline"><input type="hidden" name="name" value="${name}"><input type="hidden" name="value" value="true"><button class="primary" type="submit" name="decision" value="approve">Approve</button></form>
<form method="post" action="${base}/signal" class="inline"><input type="hidden" name="name" value="${name}"><input type="hidden" name="value" value="false"><button class="danger" type="submit" name="decision" value="reject">Reject</button></form>
</div>`
          : ""
      }
<form method="post" action="${base}/signal" data-interrupt-signal><label>name <input type="text" name="name" value="${name}" required></label> <label>value (JSON) <textarea name="value">true</textarea></label> <div class="actions"><button type="submit">Send signal</button></div></form>
<p class="muted small">or from a shell: <code>dumplings signal${journalOption} ${workflowId} ${name} 'JSON'</code>; the workflow continues when the application's worker runs <code>runner.runOrResume(${JSON.stringify(workflowId)})</code></p>`);
  return h`<section class="card approval" id="interrupt" data-signal="${name}"><h2>${answered ? "Interrupt answered, pending resume" : "Waiting on an interrupt"}</h2>
<p><strong>${pending.reason}</strong> <span class="muted small">(${pending.id}, node ${pending.node})</span></p>${jsonBlock(pending.payload)}
${actions}</section>`;
}

function parseJsonField(text: string, what: string): JsonValue {
  try {
    return JSON.parse(text) as JsonValue;
  } catch (cause) {
    throw Object.assign(new UsageError(`${what} is not JSON: ${text.slice(0, 200)}`), { cause });
  }
}

/**
 * Adds the workflow routes to the app.
 *
 * @param app - the hono app
 * @param sources - the inspector's stores
 */
export function workflowRoutes(app: Hono, sources: UiSources): void {
  const missing = (c: Context, why: string) =>
    c.html(
      layout({ title: "Workflows", section: "workflows" }, h`<h1>Workflows</h1><p class="flash error">${why}</p>`),
    );

  app.get("/workflows", async (c) => {
    const src = sources.workflows;
    if (src.value === undefined) return missing(c, src.missing);
    const asked = c.req.query("status");
    const status = STATUSES.find((s) => s === asked);
    const cursor = c.req.query("cursor") || undefined;
    const page = await src.value.listWorkflows({ status, limit: WORKFLOWS_PER_PAGE, cursor }).catch((e: unknown) => {
      throw e instanceof RangeError || e instanceof InvalidOptionError ? new UsageError(e.message) : e;
    });
    const tab = (s: WorkflowRowStatus | undefined, label: string) =>
      h`<a href="/workflows${s ? `?status=${s}` : ""}" class="${s === status ? "active" : ""}">${label}</a>`;
    return c.html(
      layout(
        { title: "Workflows", section: "workflows" },
        h`<h1>Workflows <span class="muted small">${src.label}</span></h1>
<nav class="pager">${tab(undefined, "all")}${STATUSES.map((s) => tab(s, s))}</nav>
<div class="table-wrap"><table>
<thead><tr><th>workflow</th><th>status</th><th class="num">step</th><th class="hide-sm">next node</th><th class="hide-sm">created</th><th class="hide-sm">updated</th></tr></thead>
<tbody>${page.items.map(
          (w) =>
            h`<tr><td><a href="/workflows/${encodeURIComponent(w.workflowId)}">${w.workflowId}</a>${w.parentWorkflowId ? h` <span class="muted small">fork of ${w.parentWorkflowId}</span>` : ""}</td><td>${badge(w.status)}</td><td class="num">${w.latestStep}</td><td class="hide-sm">${w.currentNode}</td><td class="hide-sm small">${when(w.createdAt)}</td><td class="hide-sm small">${when(w.updatedAt)}</td></tr>`,
        )}</tbody></table></div>
${page.items.length === 0 ? h`<p class="muted">no workflows${status ? ` with status ${status}` : ""}</p>` : ""}
<nav class="pager">${cursor ? h`<a href="/workflows${status ? `?status=${status}` : ""}">« newest</a>` : ""}${page.nextCursor ? h`<a rel="next" href="/workflows?${new URLSearchParams({ ...(status ? { status } : {}), cursor: page.nextCursor }).toString()}">older ›</a>` : ""}</nav>`,
      ),
    );
  });

  app.get("/workflows/:id", async (c) => {
    const src = sources.workflows;
    if (src.value === undefined) return missing(c, src.missing);
    const id = c.req.param("id");
    const history = await src.value.history(id);
    if (history.length === 0) throw new WorkflowNotFoundError(id);
    const errors = await src.value.errors(id);
    const summary = await src.value.summary(id);
    const last = history.at(-1)!;
    const stepOf = (q: string | undefined, fallback: number) => {
      const n = Number(q);
      return q !== undefined && q !== "" && Number.isInteger(n) && history.some((e) => e.stepIndex === n)
        ? n
        : fallback;
    };
    const selected = stepOf(c.req.query("step"), last.stepIndex);
    const selIdx = history.findIndex((e) => e.stepIndex === selected);
    const b = stepOf(c.req.query("b"), selected);
    const a = stepOf(
      c.req.query("a"),
      history[Math.max(0, history.findIndex((e) => e.stepIndex === b) - 1)]!.stepIndex,
    );
    const stateAt = (n: number) => history.find((e) => e.stepIndex === n)!.state;
    const diff = jsonDiff(stateAt(a), stateAt(b));
    const base = `/workflows/${encodeURIComponent(id)}`;
    const pending = last.state.pendingInterrupt;
    const journal = workflowJournal(src.value);
    // The interrupt's signal, when it was sent and the workflow has not taken it yet.
    const answered =
      pending && journal && summary?.status === "waiting"
        ? await journal.getSignal(id, `${INTERRUPT_SIGNAL}${pending.id}`)
        : undefined;
    const resumeForm =
      pending && sources.runner
        ? h`<form method="post" action="${base}/resume"><input type="hidden" name="interruptId" value="${pending.id}"><label>answer (JSON)<textarea name="value">true</textarea></label><div class="actions"><button class="primary" type="submit">Resume</button></div></form>`
        : undefined;
    // Instead of the signal actions: the runner's Resume; for a run that waits no more (cancelled), that
    // it takes no answer; for a store that is not journal-backed (a custom cold store), where it is answered.
    const instead =
      resumeForm ??
      (pending && journal && summary && summary.status !== "waiting"
        ? h`<p class="muted small">the workflow is ${summary.status}: it takes no answer</p>`
        : undefined) ??
      (pending && !journal
        ? h`<p class="muted small">Resuming runs the graph's node code, which lives in the application: there, <code>runner.resume(${JSON.stringify(id)}, answer, { interruptId: ${JSON.stringify(pending.id)} })</code> (or give <code>startUi</code> a <code>runner</code>).</p>`
        : undefined);
    const stepOptions = (chosen: number) =>
      history.map(
        (e) =>
          h`<option value="${e.stepIndex}" ${e.stepIndex === chosen ? "selected" : ""}>${e.stepIndex} · ${e.nodeName}</option>`,
      );
    const timeline = history.map((e, i) => {
      const prev = history[i - 1];
      const errs = errors.filter((x) => x.stepIndex === e.stepIndex);
      return h`<tr class="${e.stepIndex === selected ? "chg" : ""}">
<td class="num"><a href="${base}?step=${e.stepIndex}">${e.stepIndex}</a></td>
<td>${e.nodeName}</td>
<td class="num">${prev ? e.createdAt - prev.createdAt : 0}</td>
<td>${badge(e.state.status)}</td>
<td class="hide-sm">${e.state.currentNode}</td>
<td class="hide-sm small">${when(e.createdAt)}</td>
<td>${errs.map((x) => h`<div class="small">${String(x.error.name ?? "Error")}: ${String(x.error.message ?? "")} <span class="muted">in ${x.nodeName}</span></div>`)}</td>
</tr>`;
    });
    const orphanErrors = errors.filter((x) => !history.some((e) => e.stepIndex === x.stepIndex));
    return c.html(
      layout(
        {
          title: id,
          section: "workflows",
          crumbs: [
            ["Workflows", "/workflows"],
            [id, undefined],
          ],
        },
        h`<h1>${id} ${badge(summary?.status ?? last.state.status)}</h1>
${notice(c)}
<p class="muted small">${history.length} steps · session ${last.state.sessionId} · next node ${last.state.currentNode}${last.state.parent ? h` · fork of <a href="/workflows/${encodeURIComponent(last.state.parent.workflowId)}?step=${last.state.parent.stepIndex}">${last.state.parent.workflowId}</a> at step ${last.state.parent.stepIndex}` : ""}</p>
${pending ? interruptCard(base, id, pending, answered, instead, src.label) : ""}
${journal && sources.journal.value === journal ? h`<p class="small"><a href="/runs/${encodeURIComponent(id)}">its run in the journal</a></p>` : ""}
<h2>Step timeline</h2>
<div class="table-wrap"><table id="timeline">
<thead><tr><th class="num">step</th><th>node</th><th class="num">+ms</th><th>status</th><th class="hide-sm">next</th><th class="hide-sm">at</th><th>error</th></tr></thead>
<tbody>${timeline}</tbody></table></div>
${orphanErrors.map((x) => h`<p class="flash error">error at step ${x.stepIndex} in ${x.nodeName}: ${String(x.error.message ?? "")}</p>`)}
<div class="grid">
<section class="card" id="state"><h2>State at step ${selected} <span class="muted small">${history[selIdx]!.nodeName}</span></h2>${jsonBlock(stateAt(selected))}
<form method="post" action="${base}/fork" class="actions">
<input type="hidden" name="step" value="${selected}">
<input type="text" name="newWorkflowId" placeholder="new workflow id (optional)" aria-label="new workflow id">
<button type="submit">Fork from step ${selected}</button>
</form></section>
<section class="card diff" id="diff"><h2>Diff step ${a} → step ${b}</h2>
<form method="get" action="${base}" class="actions">
<input type="hidden" name="step" value="${selected}">
<label>from <select name="a">${stepOptions(a)}</select></label>
<label>to <select name="b">${stepOptions(b)}</select></label>
<button type="submit">Compare</button>
</form>
${
  diff.length === 0
    ? h`<p class="muted">no difference</p>`
    : h`<div class="table-wrap"><table><thead><tr><th>path</th><th>step ${a}</th><th>step ${b}</th></tr></thead><tbody>${diff.map(
        (d) =>
          h`<tr class="${d.kind === "added" ? "add" : d.kind === "removed" ? "del" : "chg"}"><td><code>${d.path || "/"}</code> <span class="muted small">${d.kind}</span></td><td>${d.kind === "added" ? "" : jsonBlock(d.before, 2000)}</td><td>${d.kind === "removed" ? "" : jsonBlock(d.after, 2000)}</td></tr>`,
      )}</tbody></table></div>`
}
</section>
</div>`,
      ),
    );
  });

  app.post("/workflows/:id/fork", async (c) => {
    const src = sources.workflows;
    if (src.value === undefined) throw new UsageError(src.missing);
    const id = c.req.param("id");
    const form = await c.req.parseBody();
    const step = Number(form.step);
    if (!Number.isInteger(step) || step < 0)
      throw new UsageError(`step ${JSON.stringify(form.step)} is not a step number`);
    const newId =
      typeof form.newWorkflowId === "string" && form.newWorkflowId.trim() !== ""
        ? form.newWorkflowId.trim()
        : undefined;
    const history = await src.value.history(id);
    if (history.length === 0) throw new WorkflowNotFoundError(id);
    const runner = sources.runner ?? forkOnlyRunner(src.value, history);
    const result = await runner.resumeFrom(id, step, {
      ...(newId ? { newWorkflowId: newId } : {}),
      run: sources.runner !== undefined,
    });
    const forkId = result.state.workflowId;
    const done = sources.runner
      ? `forked ${id} at step ${step} as ${forkId} and ran it: ${result.status}`
      : `forked ${id} at step ${step} as ${forkId}: its first checkpoint is written; your application's runner continues it (runner.runOrResume(${JSON.stringify(forkId)}))`;
    return c.redirect(`/workflows/${encodeURIComponent(forkId)}?${new URLSearchParams({ done }).toString()}`, 303);
  });

  // Answers a waiting interrupt (or sends any signal) as the run page and `dumplings signal` do: one
  // signal in the store's journal; the application's worker continues the workflow with runOrResume.
  app.post("/workflows/:id/signal", async (c) => {
    const src = sources.workflows;
    if (src.value === undefined) throw new UsageError(src.missing);
    const id = c.req.param("id");
    const journal = workflowJournal(src.value);
    if (!journal) {
      throw new UsageError(
        `the workflow store ${src.label} is not kept in a durable journal: answer ${JSON.stringify(id)} in the application (runner.resume)`,
      );
    }
    const form = await c.req.parseBody();
    const name = typeof form.name === "string" ? form.name.trim() : "";
    if (name === "") throw new UsageError("a signal needs a name (the interrupt's: interrupt:<id>)");
    const text = typeof form.value === "string" ? form.value.trim() : "";
    const value = text === "" ? true : parseJsonField(text, "the signal value");
    if ((await src.value.summary(id)) === undefined) throw new WorkflowNotFoundError(id);
    // No --queue: a workflow's worker is the application's runner, not a durable-run queue's.
    const result = await sendDecision(journal, id, name, value);
    const done = `signal ${name} recorded${result.wakes ? "; the workflow continues when the application's worker runs runner.runOrResume" : ""}`;
    return c.redirect(`/workflows/${encodeURIComponent(id)}?${new URLSearchParams({ done }).toString()}`, 303);
  });

  app.post("/workflows/:id/resume", async (c) => {
    const id = c.req.param("id");
    if (!sources.runner) {
      throw new UsageError(
        `resuming ${JSON.stringify(id)} here runs its graph's node code, which this inspector does not have: answer its interrupt with a signal (POST ${`/workflows/${encodeURIComponent(id)}/signal`}, dumplings signal), then the application's worker continues it`,
      );
    }
    const form = await c.req.parseBody();
    const value = parseJsonField(typeof form.value === "string" ? form.value : "true", "the answer");
    const interruptId = typeof form.interruptId === "string" && form.interruptId !== "" ? form.interruptId : undefined;
    const result = await sources.runner.resume(id, value, interruptId ? { interruptId } : {});
    const done = `resumed ${id}: ${result.status} at step ${result.state.stepIndex}`;
    return c.redirect(`/workflows/${encodeURIComponent(id)}?${new URLSearchParams({ done }).toString()}`, 303);
  });
}
