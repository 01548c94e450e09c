/**
 * The web inspector over real HTTP (startUi on a free port, Node's fetch and
 * http client) on seeded SQLite stores: access control (no token 401, the
 * token exchanged for an HttpOnly SameSite=Strict cookie and stripped from
 * the address, a POST from a foreign or missing Origin 403, a foreign Host
 * 403, a strict CSP on every page), escaping of stored strings, paging of a
 * 100,000-message session, the workflow diff, an approval recorded in the
 * journal, and both live feeds resuming from Last-Event-ID.
 */
import { rmSync } from "node:fs";
import http from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { Message } from "../../src/core/messages.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { step } from "../../src/durable/context.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { approvalSignalName } from "../../src/durable/signals.js";
import { MemoryRunStream } from "../../src/durable/stream.js";
import { createUiApp, MAX_FORM_BYTES } from "../../src/ui/app.js";
import { CONTENT_SECURITY_POLICY } from "../../src/ui/auth.js";
import { jsonDiff } from "../../src/ui/diff.js";
import { escapeHtml, MAX_TEXT_CHARS } from "../../src/ui/html.js";
import { type RunningUi, startUi } from "../../src/ui/server.js";
import { ResumableGraphRunner } from "../../src/workflow/runner.js";
import { END } from "../../src/workflow/state.js";
import { CheckpointStore } from "../../src/workflow/store.js";
import { RUN_ID, type Seeded, seed, TOOL_CALL_ID, WORKFLOW_ID, XSS_KEY } from "./seed.js";

let seeded: Seeded;
let ui: RunningUi;
let backend: SQLiteBackend;
let journal: SqliteJournal;
let store: CheckpointStore;
const stream = new MemoryRunStream();
let cookie: string;
const HUGE = 100_000;

beforeAll(async () => {
  seeded = await seed();
  backend = new SQLiteBackend({ dbPath: seeded.sessionsDb });
  // a 100,000-message session, written once with the library's backend
  const base = backend.load(XSS_KEY);
  const history: Message[] = [];
  for (let i = 0; i < HUGE; i++) history.push({ role: i % 2 ? "assistant" : "user", content: `message number ${i}` });
  backend.save("huge", { ...base, history });
  journal = new SqliteJournal({ path: seeded.journalDb });
  store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: seeded.workflowsDb }) });
  // a workflow waiting on an interrupt
  const waiting = await askRunner().runOrResume("ask-7", { sharedMemory: { amount: 10 } });
  if (waiting.status !== "waiting") throw new Error(`ask-7 is ${waiting.status}`);
  ui = await startUi(
    {
      sessions: { value: backend, label: `sqlite:${seeded.sessionsDb}` },
      workflows: { value: store, label: `sqlite:${seeded.workflowsDb}` },
      journal: { value: journal, label: `sqlite:${seeded.journalDb}` },
      stream,
      by: "tester@test",
    },
    { port: 0 },
  );
  const r = await fetch(ui.url, { redirect: "manual" });
  cookie = (r.headers.get("set-cookie") ?? "").split(";")[0] as string;
}, 120_000);

afterAll(async () => {
  await ui?.close();
  await journal?.close();
  await store?.close();
  backend?.close();
  if (seeded) rmSync(seeded.dir, { recursive: true, force: true });
});

/** The application's graph of the waiting workflow: one node that asks a person, then ends. */
function askRunner(): ResumableGraphRunner {
  return new ResumableGraphRunner({
    store,
    nodes: {
      ask: async (_s, ctx) => {
        const ok = await ctx.interrupt<boolean>({ reason: "approve a refund of <b>10</b>?", payload: { amount: 10 } });
        return { next: END, updates: { approved: ok } };
      },
    },
  });
}

/**
 * A GET; retried once when the kept-alive connection was reset under it (the server closed an idle socket
 * just as fetch reused it: seen only on a loaded machine). A GET is idempotent, so any HTTP client may.
 */
const get = async (path: string, headers: Record<string, string> = {}): Promise<Response> => {
  const once = () => fetch(`${ui.origin}${path}`, { headers: { cookie, ...headers }, redirect: "manual" });
  try {
    return await once();
  } catch (error) {
    if ((error as { cause?: { code?: string } }).cause?.code !== "ECONNRESET") throw error;
    return once();
  }
};
const post = (path: string, form: Record<string, string>, headers: Record<string, string> = {}) =>
  fetch(`${ui.origin}${path}`, {
    method: "POST",
    headers: { cookie, "content-type": "application/x-www-form-urlencoded", ...headers },
    body: new URLSearchParams(form).toString(),
    redirect: "manual",
  });

describe("access control", () => {
  it("refuses every page and asset without the token or its cookie (401)", async () => {
    for (const path of ["/", "/sessions", `/sessions/${XSS_KEY}`, "/runs", "/assets/app.js", `/runs/${RUN_ID}/live`]) {
      const r = await fetch(`${ui.origin}${path}`, { redirect: "manual" });
      expect(r.status, path).toBe(401);
      expect(await r.text()).not.toContain("taubench");
    }
    expect((await fetch(`${ui.origin}/?token=wrong`, { redirect: "manual" })).status).toBe(401);
    expect((await get("/", { cookie: `${cookie.split("=")[0]}=wrong` })).status).toBe(401);
  });

  it("exchanges the token for an HttpOnly SameSite=Strict cookie and strips it from the address", async () => {
    expect(ui.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\?token=[A-Za-z0-9_-]{32}$/);
    const r = await fetch(`${ui.origin}/sessions?q=spotter&token=${ui.token}`, { redirect: "manual" });
    expect(r.status).toBe(303);
    expect(r.headers.get("location")).toBe("/sessions?q=spotter");
    const setCookie = r.headers.get("set-cookie") ?? "";
    expect(setCookie).toMatch(new RegExp(`^dumplings_ui_${ui.port}=${ui.token};`));
    expect(setCookie).toMatch(/HttpOnly/);
    expect(setCookie).toMatch(/SameSite=Strict/);
    const page = await get("/");
    expect(page.status).toBe(200);
    expect(page.headers.get("content-security-policy")).toBe(CONTENT_SECURITY_POLICY);
    expect(CONTENT_SECURITY_POLICY).toContain("script-src 'self'");
    expect(CONTENT_SECURITY_POLICY).not.toContain("unsafe-inline");
    expect(page.headers.get("x-frame-options")).toBe("DENY");
  });

  it("refuses a state change from a foreign or missing Origin, or by GET/PUT (403), and records nothing", async () => {
    const foreign = await post(
      `/runs/${RUN_ID}/approve`,
      { toolCallId: TOOL_CALL_ID },
      { origin: "http://evil.example" },
    );
    expect(foreign.status).toBe(403);
    const none = await post(`/runs/${RUN_ID}/approve`, { toolCallId: TOOL_CALL_ID });
    expect(none.status).toBe(403);
    const put = await fetch(`${ui.origin}/runs/${RUN_ID}/approve`, {
      method: "PUT",
      headers: { cookie, origin: ui.origin },
    });
    expect(put.status).toBe(403);
    expect((await get(`/runs/${RUN_ID}/approve`)).status).toBe(404);
    expect(await journal.listSignals(RUN_ID)).toEqual([]);
  });

  it("refuses a form body above MAX_FORM_BYTES (413) before reading it, and journals nothing", async () => {
    const before = (await journal.readEvents(RUN_ID)).length;
    const big = await post(`/runs/${RUN_ID}/cancel`, { reason: "x".repeat(MAX_FORM_BYTES + 1) }, { origin: ui.origin });
    expect(big.status).toBe(413);
    expect((await journal.getRun(RUN_ID))?.status).not.toBe("cancelled");
    expect((await journal.readEvents(RUN_ID)).length).toBe(before);
  });

  it("refuses a foreign Host on a loopback bind (DNS rebinding)", async () => {
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request(
        { host: "127.0.0.1", port: ui.port, path: "/", headers: { host: `evil.example:${ui.port}`, cookie } },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on("error", reject);
      req.end();
    });
    expect(status).toBe(403);
  });
});

describe("pages", () => {
  it("renders a stored XSS message as text", async () => {
    const r = await get(`/sessions/${XSS_KEY}`);
    expect(r.status).toBe(200);
    const body = await r.text();
    expect(body).toContain("Ignore that. &lt;img src=x onerror=&quot;window.__xss=1;");
    expect(body).toContain("&lt;script&gt;window.__xss=2;");
    expect(body).not.toMatch(/<img src=x/i);
    expect(body).not.toContain("<script>window");
    // the only script is the bundled one
    expect(body.match(/<script\b[^>]*>/g)).toEqual(['<script src="/assets/app.js" defer>']);
    expect(escapeHtml(`<a href="x" title='y'>&`)).toBe("&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;");
  });

  it("cuts a stored text longer than MAX_TEXT_CHARS on the page (the export holds all of it)", async () => {
    const long = "y".repeat(MAX_TEXT_CHARS * 3);
    const base = backend.load(XSS_KEY);
    backend.save("long-output", { ...base, history: [{ role: "user", content: long }] });
    const r = await get("/sessions/long-output");
    expect(r.status).toBe(200);
    const body = await r.text();
    expect(body.length).toBeLessThan(MAX_TEXT_CHARS * 2);
    expect(body).toContain(`cut at ${MAX_TEXT_CHARS} of ${long.length} characters`);
    const exported = await (await get("/sessions/long-output/export")).text();
    expect(exported).toContain(long);
  });

  it("lists sessions with search and opens a 100,000-message session one page at a time", async () => {
    const list = await (await get("/sessions?q=HUG")).text();
    expect(list).toContain('href="/sessions/huge"');
    expect(list).not.toContain('href="/sessions/taubench');
    const t0 = performance.now();
    const first = await get("/sessions/huge");
    const firstMs = performance.now() - t0;
    const html = await first.text();
    expect(first.status).toBe(200);
    expect(html.match(/<article class="msg/g)).toHaveLength(50);
    expect(html).toContain("message number 49");
    expect(html).not.toContain("message number 50<");
    expect(html).toContain(`of ${HUGE}`);
    const t1 = performance.now();
    const last = await (await get("/sessions/huge?page=last")).text();
    const lastMs = performance.now() - t1;
    expect(last).toContain(`message number ${HUGE - 1}`);
    expect(last.match(/<article class="msg/g)).toHaveLength(50);
    console.log(`[ui] 100,000-message session: first page ${firstMs.toFixed(0)} ms, last page ${lastMs.toFixed(0)} ms`);
    expect(firstMs).toBeLessThan(2000);
  });

  it("downloads a session as .duas, and measures that size on demand", async () => {
    const r = await get(`/sessions/${XSS_KEY}/export`);
    expect(r.status).toBe(200);
    expect(r.headers.get("content-disposition")).toBe(`attachment; filename="${XSS_KEY}.duas"`);
    const bytes = Buffer.from(await r.arrayBuffer());
    const text = bytes.toString("utf8");
    expect(text.startsWith("# dumplingsAI Agent State File")).toBe(true);
    expect(text).toContain("window.__xss=1");
    const page = await (await get(`/sessions/${XSS_KEY}?size=duas`)).text();
    const kb = (bytes.length / 1024).toFixed(1);
    expect(page).toContain(`${kb} KB as .duas`);
    expect(await (await get(`/sessions/${XSS_KEY}`)).text()).toContain("measure the .duas size");
  });

  it("lists 10,000 sessions a page at a time", async () => {
    const big = new SQLiteBackend({ dbPath: `${seeded.dir}/tenk.db` });
    const token = "k".repeat(32);
    try {
      const base = backend.load(XSS_KEY);
      const small = { ...base, history: base.history.slice(0, 3) };
      for (let i = 0; i < 10_000; i++) big.save(`user-${String(i).padStart(5, "0")}`, small);
      const app = createUiApp(
        {
          sessions: { value: big, label: "sqlite:tenk.db" },
          workflows: { label: "none", missing: "none" },
          journal: { label: "none", missing: "none" },
        },
        { token, port: () => 1 },
      );
      const headers = { host: "127.0.0.1:1", cookie: `dumplings_ui_1=${token}` };
      const t0 = performance.now();
      const page = await (await app.request("http://127.0.0.1:1/sessions?page=150", { headers })).text();
      const ms = performance.now() - t0;
      expect(page.match(/<tr><td><a href="\/sessions\/user-/g)).toHaveLength(50);
      expect(page).toContain("user-07500");
      expect(page).toContain("page 151 of 200");
      const search = await (await app.request("http://127.0.0.1:1/sessions?q=user-0999", { headers })).text();
      expect(search.match(/<tr><td><a href="\/sessions\/user-0999/g)).toHaveLength(10);
      console.log(`[ui] 10,000 sessions: a list page in ${ms.toFixed(0)} ms`);
      expect(ms).toBeLessThan(1000);
    } finally {
      big.close();
    }
  });

  it("shows a workflow's timeline and the diff between two steps", async () => {
    const body = await (await get(`/workflows/${WORKFLOW_ID}?a=1&b=3`)).text();
    for (const node of ["plan", "charge", "ship"]) expect(body).toContain(`<td>${node}</td>`);
    expect(body).toContain("Diff step 1 → step 3");
    expect(body).toMatch(/<code>\/sharedMemory\/charged<\/code> <span class="muted small">added/);
    expect(body).toContain("&lt;i&gt;DHL&lt;/i&gt;");
    expect(jsonDiff({ n: 1, s: "x", a: [1] }, { n: 2, t: true, a: [1, 2] })).toEqual([
      { path: "/n", kind: "changed", before: 1, after: 2 },
      { path: "/s", kind: "removed", before: "x" },
      { path: "/a/1", kind: "added", after: 2 },
      { path: "/t", kind: "added", after: true },
    ]);
  });

  it("pages the runs by the journal's cursor: each run once while runs change and start between the pages", async () => {
    const ids = Array.from({ length: 120 }, (_, i) => `paging-${String(i).padStart(3, "0")}`);
    for (const id of ids) await journal.createRun({ runId: id, workflow: "paging", input: null });
    const seen: string[] = [];
    let next: string | undefined = "/runs?status=pending";
    for (let n = 0; next !== undefined && n < 20; n++) {
      const res = await get(next);
      expect(res.status).toBe(200);
      const body = await res.text();
      seen.push(...[...body.matchAll(/<a href="\/runs\/(paging-[^"]+)">/g)].map((m) => m[1] as string));
      const link = /<a [^>]*rel="next"[^>]*>|<a [^>]*href="[^"]*"[^>]*rel="next"/.exec(body)?.[0];
      next = link ? /href="([^"]+)"/.exec(link)?.[1]?.replaceAll("&amp;", "&") : undefined;
      // between two pages: the oldest run not shown yet is leased and released (it changed last), a new one starts
      const oldest = ids.filter((id) => !seen.includes(id)).at(-1);
      if (oldest !== undefined) {
        const l = await journal.acquireLease(oldest, "w", 10_000);
        if (l.acquired) await journal.releaseLease(oldest, l.fencingToken);
      }
      await journal.createRun({ runId: `paging-new-${n}`, workflow: "paging", input: null });
    }
    for (const id of ids)
      expect(
        seen.filter((x) => x === id),
        id,
      ).toHaveLength(1);
    expect(new Set(seen).size, "no run twice").toBe(seen.length);
    // a cursor that is not one is a 400 with the reason
    const bad = await get("/runs?cursor=garbage");
    expect(bad.status).toBe(400);
    expect(await bad.text()).toContain("is not a cursor");
  });

  it("a typed error is its HTTP status with its message", async () => {
    const missing = await get("/sessions/no-such-key");
    expect(missing.status).toBe(404);
    expect(await missing.text()).toContain("STATE_NOT_FOUND");
    expect((await get("/runs/no-such-run")).status).toBe(404);
    const wrongCall = await post(`/runs/${RUN_ID}/approve`, { toolCallId: "call_other" }, { origin: ui.origin });
    expect(wrongCall.status).toBe(400);
    expect(await wrongCall.text()).toContain("does not wait on tool call");
  });
});

describe("live feeds", () => {
  async function readSse(path: string, headers: Record<string, string>, count: number): Promise<string[]> {
    const abort = new AbortController();
    const r = await fetch(`${ui.origin}${path}`, { headers: { cookie, ...headers }, signal: abort.signal });
    expect(r.headers.get("content-type")).toContain("text/event-stream");
    const reader = r.body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    const ids: string[] = [];
    while (ids.length < count) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      ids.splice(0, ids.length, ...[...text.matchAll(/^id: (\d+)$/gm)].map((m) => m[1] as string));
    }
    abort.abort();
    return ids;
  }

  it("the journal feed resumes after Last-Event-ID", async () => {
    const events = await journal.readEvents(RUN_ID);
    expect(events.length).toBeGreaterThan(4);
    const ids = await readSse(`/runs/${RUN_ID}/live`, { "last-event-id": "3" }, events.length - 4);
    expect(ids).toEqual(events.slice(4).map((e) => String(e.index)));
  });

  it("the side channel resumes after Last-Event-ID", async () => {
    for (const text of ["Hel", "lo, ", "world"]) await stream.append(RUN_ID, { type: "token", text });
    const ids = await readSse(`/runs/${RUN_ID}/stream`, { "last-event-id": "1" }, 2);
    expect(ids).toEqual(["2", "3"]);
  });

  /** The whole SSE body of a feed that ends by itself (else the read is cut after `ms`: `closed` false). */
  async function readToEnd(path: string, ms = 5000): Promise<{ text: string; closed: boolean }> {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), ms);
    const r = await fetch(`${ui.origin}${path}`, { headers: { cookie }, signal: abort.signal });
    let text = "";
    try {
      const reader = r.body!.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return { text, closed: true };
        text += decoder.decode(value, { stream: true });
      }
    } catch {
      return { text, closed: false };
    } finally {
      clearTimeout(timer);
    }
  }

  it("the side channel of a finished run ends with an `end` event; a finished run whose stream is gone says so", async () => {
    const runId = "ui-finished-stream";
    const result = await runDurable(
      runId,
      async () => {
        await step("say", async () => {
          await stream.append(runId, { type: "token", text: "Hi" });
          return "Hi";
        });
        return "Hi";
      },
      { journal, stream, input: {} },
    );
    expect(result.status).toBe("completed");
    const done = await readToEnd(`/runs/${runId}/stream`);
    expect(done.closed).toBe(true);
    expect([...done.text.matchAll(/^id: (\d+)$/gm)].map((m) => m[1])).toEqual(["1", "2"]);
    expect(done.text).toMatch(/^event: end$/m);
    await stream.delete(runId);
    const gone = await readToEnd(`/runs/${runId}/stream`);
    expect(gone.closed).toBe(true);
    expect(gone.text).toMatch(/^event: stream-error$/m);
    expect(gone.text).toContain('"reason":"gone"');
  });
});

describe("actions", () => {
  it("Approve records the decision in the journal, as dumplings approve does", async () => {
    const r = await post(
      `/runs/${RUN_ID}/approve`,
      { toolCallId: TOOL_CALL_ID, reason: "ok <b>" },
      { origin: ui.origin },
    );
    expect(r.status).toBe(303);
    const signal = await journal.getSignal(RUN_ID, approvalSignalName(TOOL_CALL_ID));
    // the form's field is `note` since 0.2; a form that still sends `reason` is recorded as the note
    expect(signal?.value).toEqual({ approved: true, note: "ok <b>" });
    const page = await (await get(r.headers.get("location") as string)).text();
    expect(page).toContain("approved call_refund_1");
    // a second decision is refused: the run waits on it no more once it is recorded … or the signal exists
    const again = await post(`/runs/${RUN_ID}/reject`, { toolCallId: TOOL_CALL_ID }, { origin: ui.origin });
    expect(again.status).toBeGreaterThanOrEqual(400);
  });

  it("Cancel, Reset and Retry make the checks dumplings cancel/reset/retry make, with the same words", async () => {
    const id = "ui-operator-run";
    await journal.createRun({ runId: id, workflow: "ops", input: null });
    const origin = { origin: ui.origin };
    // a reset that would keep every step (the run has none) is refused, nothing recorded
    const events = (await journal.readEvents(id)).length;
    const beyond = await post(`/runs/${id}/reset`, { toStep: "0" }, origin);
    expect(beyond.status).toBe(400);
    expect(await beyond.text()).toContain("would keep them all");
    expect((await journal.readEvents(id)).length).toBe(events);
    expect((await post(`/runs/${id}/cancel`, { reason: "stop" }, origin)).status).toBe(303);
    expect((await journal.getRun(id))?.status).toBe("cancelled");
    // an ended run is not cancelled again
    const again = await post(`/runs/${id}/cancel`, {}, origin);
    expect(again.status).toBe(400);
    expect(await again.text()).toContain("nothing to cancel");
    // a run the journal does not hold
    expect((await post(`/runs/no-such-run/retry`, {}, origin)).status).toBe(404);
  });
});

describe("workflow actions", () => {
  it("shows a pending interrupt with the signal actions; without the application's runner it cannot resume (400), and says how", async () => {
    const page = await (await get("/workflows/ask-7")).text();
    expect(page).toContain("Waiting on an interrupt");
    expect(page).toContain("approve a refund of &lt;b&gt;10&lt;/b&gt;?");
    // the store keeps its workflows in its journal: answered by a signal, as a durable run's wait
    expect(page).toContain('<input type="text" name="name" value="interrupt:ask-7:0:ask:0" required>');
    expect(page).toContain(">Approve<");
    const r = await post("/workflows/ask-7/resume", { value: "true" }, { origin: ui.origin });
    expect(r.status).toBe(400);
    expect(await r.text()).toContain("answer its interrupt with a signal");
    expect((await store.loadLatest("ask-7"))?.status).toBe("waiting");
  });

  it("forks a step: the fork's first checkpoint, its parent recorded, the source untouched", async () => {
    const before = (await store.history(WORKFLOW_ID)).length;
    const r = await post(
      `/workflows/${WORKFLOW_ID}/fork`,
      { step: "1", newWorkflowId: "order-42-retry" },
      { origin: ui.origin },
    );
    expect(r.status).toBe(303);
    expect(r.headers.get("location")).toMatch(/^\/workflows\/order-42-retry\?done=/);
    const fork = await store.loadLatest("order-42-retry");
    expect(fork?.parent).toEqual({ workflowId: WORKFLOW_ID, stepIndex: 1 });
    expect(fork?.currentNode).toBe("charge");
    expect((await store.history(WORKFLOW_ID)).length).toBe(before);
    const page = await (await get(r.headers.get("location") as string)).text();
    expect(page).toContain("fork of <a");
    const again = await post(
      `/workflows/${WORKFLOW_ID}/fork`,
      { step: "1", newWorkflowId: "order-42-retry" },
      { origin: ui.origin },
    );
    expect(again.status).toBe(409);
  });

  it("with the application's runner, Resume delivers the answer and runs the graph on", async () => {
    const token = "t".repeat(32);
    const app = createUiApp(
      {
        sessions: { label: "none", missing: "none" },
        workflows: { value: store, label: "sqlite" },
        journal: { label: "none", missing: "none" },
        runner: askRunner(),
      },
      { token, port: () => 1 },
    );
    const headers = { host: "127.0.0.1:1", cookie: `dumplings_ui_1=${token}` };
    const page = await (await app.request("http://127.0.0.1:1/workflows/ask-7", { headers })).text();
    const interruptId = /name="interruptId" value="([^"]+)"/.exec(page)?.[1];
    expect(interruptId).toBe("ask-7:0:ask:0");
    const r = await app.request("http://127.0.0.1:1/workflows/ask-7/resume", {
      method: "POST",
      headers: { ...headers, origin: "http://127.0.0.1:1", "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ interruptId: interruptId as string, value: "true" }).toString(),
    });
    expect(r.status).toBe(303);
    const latest = await store.loadLatest("ask-7");
    expect(latest).toMatchObject({ status: "finished", sharedMemory: { amount: 10, approved: true } });
  });
});
