/**
 * A workflow waiting on `interrupt()` in the web inspector, answered without the application's
 * runner: the workflow waits in a child process (test/fixtures/workflow/interrupt-child.ts) on an
 * SQLite file; the inspector, given only that file as its workflow store, shows the wait on the
 * workflow page and on the run page (the runs list shows the workflow as a run of `graph`) with
 * Signal (prefilled with `interrupt:<id>`) and, for a yes/no question, Approve / Reject; an action
 * records the signal in the file's journal exactly as `dumplings signal` does, and a second process's
 * `runOrResume` finishes the workflow with the answer, its side effect run once.
 *
 * Over HTTP (startUi, Node's fetch) and in real headless Chromium against the real `dumplings ui`
 * process (skipped with its reason without /usr/bin/chromium, except under
 * DUMPLINGS_REQUIRE_SERVICES=1); a screenshot of the waiting workflow goes to
 * test-results/ui/workflow-interrupt.png.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { type BrowserContext, chromium } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { createUiApp } from "../../src/ui/app.js";
import { type RunningUi, startUi } from "../../src/ui/server.js";
import { isApprovalQuestion, workflowJournal } from "../../src/ui/workflows.js";
import type { GraphNode } from "../../src/workflow/index.js";
import { ResumableGraphRunner } from "../../src/workflow/runner.js";
import { END } from "../../src/workflow/state.js";
import { CheckpointStore } from "../../src/workflow/store.js";
import { programArgs, ROOT } from "../cli/run-cli.js";
import { SERVICES_REQUIRED } from "../helpers/services.js";

const CHILD = fileURLToPath(new URL("../fixtures/workflow/interrupt-child.ts", import.meta.url));
const CHROMIUM = "/usr/bin/chromium";
const SHOTS = path.join(ROOT, "test-results", "ui");
const noChromium = !existsSync(CHROMIUM);
if (noChromium && !SERVICES_REQUIRED) {
  console.warn(`[skip] ${CHROMIUM} is missing (apt-get install -y chromium); the browser test is skipped`);
}

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-ui-interrupt-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs (or resumes) workflow `id` of `file` in a child process; returns what it printed. */
function child(file: string, id: string, charges: string) {
  const r = spawnSync(process.execPath, ["--import", "tsx", CHILD], {
    cwd: ROOT,
    env: { ...process.env, WF_JOURNAL: file, WF_ID: id, WF_CHARGES: charges },
    encoding: "utf8",
  });
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout.trim().split("\n").at(-1) as string) as {
    status: string;
    interrupt: string | null;
    memory: Record<string, unknown>;
  };
}
const lines = (file: string) => (existsSync(file) ? readFileSync(file, "utf8").trim().split("\n") : []);

describe("isApprovalQuestion", () => {
  it("a yes/no question gets Approve/Reject; an open question or a statement does not", () => {
    expect(isApprovalQuestion({ reason: "charge the card?" })).toBe(true);
    expect(isApprovalQuestion({ reason: " Approve the plan? " })).toBe(true);
    expect(isApprovalQuestion({ reason: "which carrier?" })).toBe(false);
    expect(isApprovalQuestion({ reason: "How much to refund?" })).toBe(false);
    expect(isApprovalQuestion({ reason: "enter the address" })).toBe(false);
  });
});

describe("the inspector answers a waiting workflow without its runner (HTTP)", () => {
  const file = path.join(dir, "http.db");
  const charges = path.join(dir, "http-charges.txt");
  let store: CheckpointStore;
  let ui: RunningUi;
  let cookie: string;
  const get = (p: string) => fetch(`${ui.origin}${p}`, { headers: { cookie }, redirect: "manual" });
  const post = (p: string, form: Record<string, string>) =>
    fetch(`${ui.origin}${p}`, {
      method: "POST",
      headers: { cookie, origin: ui.origin, "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(form).toString(),
      redirect: "manual",
    });

  beforeAll(async () => {
    for (const id of ["order-1", "order-2"]) expect(child(file, id, charges).status).toBe("waiting");
    store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
    const journal = workflowJournal(store);
    if (!journal) throw new Error("SqliteColdStore is not journal-backed");
    // --store and --journal the same file: the store's journal is the runs pages' journal
    ui = await startUi(
      {
        sessions: { label: "none", missing: "no sessions" },
        workflows: { value: store, label: `sqlite:${file}` },
        journal: { value: journal, label: `sqlite:${file}` },
      },
      { port: 0 },
    );
    cookie = ((await fetch(ui.url, { redirect: "manual" })).headers.get("set-cookie") ?? "").split(";")[0] as string;
  }, 60_000);
  afterAll(async () => {
    await ui?.close();
    await store?.close();
  });

  it("the workflow page shows the wait with Signal (prefilled) and Approve/Reject; resume without a runner stays refused", async () => {
    const page = await (await get("/workflows/order-1")).text();
    expect(page).toContain("Waiting on an interrupt");
    expect(page).toContain("charge the card?");
    expect(page).toContain('<input type="text" name="name" value="interrupt:order-1:0:approve:0" required>');
    expect(page).toContain('action="/workflows/order-1/signal"');
    expect(page).toMatch(/<input type="hidden" name="value" value="true"><button class="primary"[^>]*>Approve</);
    expect(page).toMatch(/<input type="hidden" name="value" value="false"><button class="danger"[^>]*>Reject</);
    expect(page).toContain('href="/runs/order-1"');
    expect(page).toContain(`dumplings signal --journal sqlite:${file} order-1 interrupt:order-1:0:approve:0 'JSON'`);
    const resume = await post("/workflows/order-1/resume", { value: "true" });
    expect(resume.status).toBe(400);
    expect(await resume.text()).toContain("answer its interrupt with a signal");
  });

  it("the runs list shows the workflows as runs of graph; the run page shows the interrupt with the same actions", async () => {
    const list = await (await get("/runs?status=waiting")).text();
    for (const id of ["order-1", "order-2"]) {
      expect(list).toMatch(
        new RegExp(
          `<a href="/runs/${id}">${id}</a></td><td class="hide-sm">graph</td><td><span class="badge b-waiting">`,
        ),
      );
    }
    const page = await (await get("/runs/order-2")).text();
    expect(page).toContain("Waiting on an interrupt");
    expect(page).toContain('<input type="text" name="name" value="interrupt:order-2:0:approve:0" required>');
    expect(page).toContain('action="/runs/order-2/signal"');
    expect(page).toContain(">Approve<");
    expect(page).toContain('href="/workflows/order-2"');
    expect(page).toContain(`dumplings signal --journal sqlite:${file} order-2 interrupt:order-2:0:approve:0 'JSON'`);
  });

  it("Signal on the workflow page records the answer; a second process finishes the workflow; one charge", async () => {
    const r = await post("/workflows/order-1/signal", { name: "interrupt:order-1:0:approve:0", value: '{"ok":true}' });
    expect(r.status).toBe(303);
    expect(new URL(r.headers.get("location") ?? "", ui.origin).searchParams.get("done")).toContain(
      "signal interrupt:order-1:0:approve:0",
    );
    const journal = workflowJournal(store)!;
    expect((await journal.getSignal("order-1", "interrupt:order-1:0:approve:0"))?.value).toEqual({ ok: true });
    const page = await (await get("/workflows/order-1")).text();
    expect(page).toContain("Interrupt answered, pending resume");
    expect(page).not.toContain(">Send signal<");
    const again = await post("/workflows/order-1/signal", { name: "interrupt:order-1:0:approve:0", value: "false" });
    expect(again.status).toBe(409);
    expect(lines(charges)).toEqual([]);
    const done = child(file, "order-1", charges);
    expect(done).toMatchObject({ status: "finished", memory: { approved: true } });
    expect(lines(charges)).toHaveLength(1);
    expect(child(file, "order-1", charges).status).toBe("finished");
    expect(lines(charges)).toHaveLength(1);
    // finished: a signal is refused, nothing recorded
    const late = await post("/workflows/order-1/signal", { name: "interrupt:other", value: "true" });
    expect(late.status).toBe(400);
    expect(await journal.getSignal("order-1", "interrupt:other")).toBeUndefined();
  }, 60_000);

  it("Signal on the run page goes through the same journal; the second process takes it", async () => {
    const r = await post("/runs/order-2/signal", { name: "interrupt:order-2:0:approve:0", value: '{"ok":false}' });
    expect(r.status).toBe(303);
    expect((await get("/runs/order-2").then((x) => x.text())).includes("Interrupt answered, pending resume")).toBe(
      true,
    );
    const before = lines(charges).length;
    expect(child(file, "order-2", charges)).toMatchObject({ status: "finished", memory: { approved: false } });
    expect(lines(charges)).toHaveLength(before + 1);
  }, 60_000);

  it("Approve of a yes/no interrupt sends true; the application's runner continues with it", async () => {
    const nodes: Record<string, GraphNode> = {
      ask: async (_s, ctx) => ({
        next: END,
        updates: { shipped: await ctx.interrupt<boolean>({ reason: "ship it?" }) },
      }),
    };
    const runner = new ResumableGraphRunner({ store, nodes });
    const first = await runner.runOrResume("ship-1");
    expect(first.status).toBe("waiting");
    const page = await (await get("/workflows/ship-1")).text();
    const name = `interrupt:${first.interrupt?.id}`;
    expect(page).toContain(
      `<input type="hidden" name="name" value="${name}"><input type="hidden" name="value" value="true">`,
    );
    expect((await post("/workflows/ship-1/signal", { name, value: "true" })).status).toBe(303);
    expect((await new ResumableGraphRunner({ store, nodes }).runOrResume("ship-1")).state.sharedMemory).toEqual({
      shipped: true,
    });
  });

  it("a cancelled workflow's page offers no answer", async () => {
    const nodes: Record<string, GraphNode> = {
      ask: async (_s, ctx) => ({ next: END, updates: { ok: await ctx.interrupt<boolean>({ reason: "go on?" }) } }),
    };
    expect((await new ResumableGraphRunner({ store, nodes }).runOrResume("cancelled-1")).status).toBe("waiting");
    expect((await get("/workflows/cancelled-1").then((r) => r.text())).includes(">Send signal<")).toBe(true);
    await workflowJournal(store)!.cancelRun("cancelled-1", "tester@test", "not needed");
    const page = await (await get("/workflows/cancelled-1")).text();
    expect(page).toContain("the workflow is failed: it takes no answer");
    expect(page).not.toContain(">Send signal<");
    expect(page).not.toContain(">Approve<");
  });

  it("with the application's runner, the workflow page keeps its Resume form", async () => {
    const token = "t".repeat(32);
    const nodes: Record<string, GraphNode> = {
      ask: async (_s, ctx) => ({
        next: END,
        updates: { ok: await ctx.interrupt<boolean>({ reason: "go?" }) },
      }),
    };
    const runner = new ResumableGraphRunner({ store, nodes });
    await runner.runOrResume("with-runner");
    const app = createUiApp(
      {
        sessions: { label: "none", missing: "none" },
        workflows: { value: store, label: "sqlite" },
        journal: { label: "none", missing: "none" },
        runner,
      },
      { token, port: () => 1 },
    );
    const headers = { host: "127.0.0.1:1", cookie: `dumplings_ui_1=${token}` };
    const page = await (await app.request("http://127.0.0.1:1/workflows/with-runner", { headers })).text();
    expect(page).toContain('action="/workflows/with-runner/resume"');
    expect(page).not.toContain(">Send signal<");
    const r = await app.request("http://127.0.0.1:1/workflows/with-runner/resume", {
      method: "POST",
      headers: { ...headers, origin: "http://127.0.0.1:1", "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ value: "true" }).toString(),
    });
    expect(r.status).toBe(303);
    expect((await store.loadLatest("with-runner"))?.status).toBe("finished");
  });
});

describe.skipIf(noChromium && !SERVICES_REQUIRED)("dumplings ui --store only, in headless Chromium", () => {
  const file = path.join(dir, "browser.db");
  const charges = path.join(dir, "browser-charges.txt");
  let cli: ChildProcess;
  let address: string;
  let profile: string;
  let context: BrowserContext;
  const stderr: string[] = [];

  beforeAll(async () => {
    if (noChromium) throw new Error(`${CHROMIUM} is missing and DUMPLINGS_REQUIRE_SERVICES=1`);
    expect(child(file, "order-9", charges).status).toBe("waiting");
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("DUMPLINGS_")) env[k] = v;
    // only --store: run in an empty directory, so no default journal exists either
    cli = spawn(
      process.execPath,
      [...programArgs("cli/index"), "ui", "--port", "0", "--no-open", "--store", `sqlite:${file}`],
      { cwd: dir, env, stdio: ["ignore", "pipe", "pipe"] },
    );
    cli.stderr?.on("data", (d: Buffer) => stderr.push(d.toString()));
    address = await new Promise<string>((resolve, reject) => {
      let out = "";
      cli.stdout?.on("data", (d: Buffer) => {
        out += d.toString();
        if (out.includes("\n")) resolve(out.split("\n")[0]!.trim());
      });
      cli.once("exit", (code) => reject(new Error(`dumplings ui exited ${code}: ${stderr.join("")}`)));
    });
    profile = mkdtempSync(path.join(tmpdir(), "dumplings-ui-chromium-"));
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
      viewport: { width: 1280, height: 900 },
    });
  }, 120_000);

  afterAll(async () => {
    await context?.close();
    if (cli && cli.exitCode === null) {
      const exited = new Promise((r) => cli.once("exit", r));
      cli.kill("SIGTERM");
      await exited;
    }
    if (profile) rmSync(profile, { recursive: true, force: true });
  });

  it("shows the wait with the signal form; a click sends the answer; a second process finishes it once", async () => {
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(10_000);
    const origin = new URL(address).origin;
    const consoleErrors: string[] = []; // a CSP violation would be one
    page.on("console", (m) => {
      if (m.type() === "error") consoleErrors.push(`${page.url()}: ${m.text()}`);
    });
    page.on("pageerror", (e) => consoleErrors.push(`${page.url()}: ${e.message}`));
    await page.goto(address);
    // the runs list shows the workflow as a run of graph (the store's journal: no --journal given)
    await page.goto(`${origin}/runs`);
    const row = page.locator("tr", { has: page.locator('a[href="/runs/order-9"]') });
    await row.first().waitFor({ state: "visible" });
    expect(await row.first().textContent()).toMatch(/graph\s*waiting/);
    await page.goto(`${origin}/workflows/order-9`);
    const card = page.locator("#interrupt");
    await card.waitFor({ state: "visible" });
    expect(await card.locator("h2").textContent()).toBe("Waiting on an interrupt");
    expect(await card.textContent()).toContain("charge the card?");
    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: path.join(SHOTS, "workflow-interrupt.png"), fullPage: true });
    const form = card.locator("form[data-interrupt-signal]");
    expect(await form.locator('input[name="name"]').inputValue()).toBe("interrupt:order-9:0:approve:0");
    await form.locator('textarea[name="value"]').fill('{"ok":true}');
    await Promise.all([page.waitForURL(/\/workflows\/order-9\?done=/), form.locator("button").click()]);
    expect(await page.locator(".flash").first().textContent()).toContain(
      "signal interrupt:order-9:0:approve:0 recorded",
    );
    expect(await page.locator("#interrupt h2").textContent()).toBe("Interrupt answered, pending resume");
    expect(lines(charges)).toEqual([]);
    expect(child(file, "order-9", charges)).toMatchObject({ status: "finished", memory: { approved: true } });
    expect(lines(charges)).toHaveLength(1);
    await page.reload();
    expect(await page.locator("h1 .badge").first().textContent()).toBe("finished");
    expect(await page.locator("#interrupt").count()).toBe(0);
    expect(child(file, "order-9", charges).status).toBe("finished");
    expect(lines(charges)).toHaveLength(1);
    expect(consoleErrors).toEqual([]);
  }, 90_000);
});
