/**
 * `dumplings ui` end to end, in real headless Chromium (Debian's `chromium`
 * driven by playwright-core through `executablePath`) against the real CLI
 * process on seeded SQLite stores: the printed address logs the browser in
 * (and leaves the address bar), sessions are listed and one opens with its
 * messages, the stored XSS message stays text (no dialog, no injected
 * element, no script run), the workflow shows its steps and a diff, the run
 * shows the pending tool name and its arguments, Approve is recorded in the
 * journal and the run page follows the run to `completed` live when a worker
 * resumes it; a browser without the token gets 401, and a page of another
 * origin that posts an approval (a CSRF attempt, same site, so the
 * SameSite=Strict cookie is sent) is refused with 403 and records nothing.
 *
 * Screenshots of each page go to test-results/ui/. Without /usr/bin/chromium
 * the suite skips with its reason, except under DUMPLINGS_REQUIRE_SERVICES=1
 * (CI), where it fails.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { type BrowserContext, chromium, type Locator, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { approvalSignalName } from "../../src/durable/signals.js";
import { programArgs, ROOT } from "../cli/run-cli.js";
import { SERVICES_REQUIRED } from "../helpers/services.js";
import {
  CONVERSATIONS,
  RUN_ID,
  refundWorkflow,
  type Seeded,
  seed,
  TOOL_CALL_ID,
  WORKFLOW_ID,
  XSS_KEY,
} from "./seed.js";

const CHROMIUM = "/usr/bin/chromium";
const missing = !existsSync(CHROMIUM);
if (missing && !SERVICES_REQUIRED) {
  console.warn(`[skip] ${CHROMIUM} is missing (apt-get install -y chromium); the browser tests are skipped`);
}
const SHOTS = path.join(ROOT, "test-results", "ui");

let seeded: Seeded;
let cli: ChildProcess;
let address: string;
let origin: string;
let profile: string;
let context: BrowserContext;
let page: Page;
let evil: http.Server;
let evilOrigin: string;
const dialogs: string[] = [];
/** Console errors of the inspector's pages (a CSP violation would be one). */
const consoleErrors: string[] = [];
const stderr: string[] = [];

/** Starts `dumplings ui` as a real process and reads the one address line it prints. */
function startCli(): Promise<string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("DUMPLINGS_")) env[k] = v;
  cli = spawn(
    process.execPath,
    [
      ...programArgs("cli/index"),
      "ui",
      "--port",
      "0",
      "--no-open",
      "--by",
      "reviewer@e2e",
      "--backend",
      `sqlite:${seeded.sessionsDb}`,
      "--store",
      `sqlite:${seeded.workflowsDb}`,
      "--journal",
      `sqlite:${seeded.journalDb}`,
    ],
    { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] },
  );
  cli.stderr?.on("data", (d: Buffer) => stderr.push(d.toString()));
  return new Promise((resolve, reject) => {
    let out = "";
    cli.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      const line = out.split("\n")[0];
      if (out.includes("\n") && line) resolve(line.trim());
    });
    cli.once("exit", (code) => reject(new Error(`dumplings ui exited ${code}: ${stderr.join("")}`)));
  });
}

/** Waits until a locator's first element is visible (playwright-core has no `expect` of its own). */
async function visible(locator: Locator): Promise<void> {
  await locator.first().waitFor({ state: "visible", timeout: 10_000 });
}
/** Polls a locator's text until it contains `text`. */
async function hasText(locator: Locator, text: string, timeout = 10_000): Promise<void> {
  await expect.poll(() => locator.first().textContent(), { timeout }).toContain(text);
}
/** Polls a locator's text until it equals `text`. */
async function textIs(locator: Locator, text: string, timeout = 10_000): Promise<void> {
  await expect.poll(() => locator.first().textContent(), { timeout }).toBe(text);
}
/** Polls a locator's element count. */
async function countIs(locator: Locator, n: number): Promise<void> {
  await expect.poll(() => locator.count(), { timeout: 10_000 }).toBe(n);
}

async function shot(name: string, fullPage = true): Promise<void> {
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage });
}

describe.skipIf(missing && !SERVICES_REQUIRED)("dumplings ui in headless Chromium", () => {
  beforeAll(async () => {
    if (missing)
      throw new Error(`${CHROMIUM} is missing and DUMPLINGS_REQUIRE_SERVICES=1: apt-get install -y chromium`);
    mkdirSync(SHOTS, { recursive: true });
    seeded = await seed();
    address = await startCli();
    origin = new URL(address).origin;
    // a page of another origin (same host, another port: same site) that posts an approval to the inspector
    evil = http.createServer((_req, res) => {
      res.writeHead(200, { "content-type": "text/html" });
      res.end(`<!doctype html><form id="f" method="post" action="${origin}/runs/${RUN_ID}/approve">
<input type="hidden" name="toolCallId" value="${TOOL_CALL_ID}"></form><script>document.getElementById("f").submit()</script>`);
    });
    await new Promise<void>((resolve) => evil.listen(0, "127.0.0.1", resolve));
    evilOrigin = `http://127.0.0.1:${(evil.address() as { port: number }).port}`;
    profile = mkdtempSync(path.join(tmpdir(), "dumplings-ui-chromium-"));
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
      viewport: { width: 1280, height: 900 },
    });
    page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(10_000);
    page.on("console", (m) => {
      if (m.type() === "error" && page.url().startsWith(origin)) consoleErrors.push(`${page.url()}: ${m.text()}`);
    });
    page.on("pageerror", (e) => consoleErrors.push(`${page.url()}: ${e.message}`));
    page.on("dialog", (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
  }, 120_000);

  afterAll(async () => {
    await context?.close();
    if (cli && cli.exitCode === null) {
      const exited = new Promise((r) => cli.once("exit", r));
      cli.kill("SIGTERM");
      await exited;
    }
    await new Promise((r) => (evil ? evil.close(r) : r(undefined)));
    if (profile) rmSync(profile, { recursive: true, force: true });
    if (seeded) rmSync(seeded.dir, { recursive: true, force: true });
  });

  it("the printed address logs in and leaves the address bar", async () => {
    expect(address).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\?token=[A-Za-z0-9_-]+$/);
    const r = await page.goto(address);
    expect(r?.status()).toBe(200);
    expect(page.url()).toBe(`${origin}/`);
    const cookies = await context.cookies(origin);
    expect(cookies).toHaveLength(1);
    expect(cookies[0]).toMatchObject({ httpOnly: true, sameSite: "Strict" });
    expect(await page.evaluate("document.cookie")).toBe("");
    await shot("home");
  });

  it("lists the sessions and opens one with its messages; the XSS message stays text", async () => {
    await page.getByRole("link", { name: "Sessions", exact: true }).first().click();
    for (const key of CONVERSATIONS) await visible(page.getByRole("link", { name: key }));
    await shot("sessions");
    await page.getByRole("link", { name: CONVERSATIONS[1] }).click();
    await visible(page.locator("article.msg").first());
    await visible(page.locator(".call").first()); // a tool call beside its result
    await page.locator(".call").first().scrollIntoViewIfNeeded();
    await shot("session-tools", false);
    await page.goto(`${origin}/sessions`);
    await page.getByRole("link", { name: XSS_KEY }).click();
    const xss = page.locator("article.msg", { hasText: "Ignore that." });
    await visible(xss);
    await page.locator(".call").first().scrollIntoViewIfNeeded();
    await shot("session-chat", false);
    await hasText(xss, `<img src=x onerror="window.__xss=1;`);
    await hasText(xss, `<script>window.__xss=2;alert("xss")</script>`);
    await xss.scrollIntoViewIfNeeded();
    await shot("session", false);
    expect(await page.evaluate("window.__xss")).toBeUndefined();
    expect(await page.evaluate('document.body.getAttribute("data-xss")')).toBeNull();
    expect(await page.locator('main img, main script, img[src="x"]').count()).toBe(0);
    expect(dialogs).toEqual([]);
  });

  it("fits a phone screen", async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${origin}/runs/${RUN_ID}`);
    const overflow = await page.evaluate<number>("document.documentElement.scrollWidth - window.innerWidth");
    expect(overflow).toBeLessThanOrEqual(0);
    await shot("run-phone");
    await page.setViewportSize({ width: 1280, height: 900 });
  });

  it("opens the workflow with its steps and a diff", async () => {
    await page.goto(`${origin}/workflows`);
    await shot("workflows");
    await page.getByRole("link", { name: WORKFLOW_ID }).click();
    const timeline = page.locator("#timeline tbody tr");
    await countIs(timeline, 4);
    for (const node of ["plan", "charge", "ship"]) await hasText(page.locator("#timeline"), node);
    await page.locator("select[name=a]").selectOption("1");
    await page.locator("select[name=b]").selectOption("3");
    await page.getByRole("button", { name: "Compare" }).click();
    await textIs(page.locator("#diff h2"), "Diff step 1 → step 3");
    await expect.poll(() => page.locator("#diff tr.add").count()).toBeGreaterThan(0);
    await hasText(page.locator("#diff"), "/sharedMemory/shipped");
    await shot("workflow");
  });

  it("refuses a browser without the token and a page of another origin that posts an approval", async () => {
    // without the cookie (a browser that never saw the token): 401, nothing of the stores shown
    const saved = await context.cookies(origin);
    await context.clearCookies();
    const refused = await page.goto(`${origin}/runs/${RUN_ID}`);
    expect(refused?.status()).toBe(401);
    expect(await page.locator("body").textContent()).not.toContain("refund_payment");
    await context.addCookies(saved);
    const csrf = await page.goto(evilOrigin);
    await page.waitForURL(`${origin}/runs/${RUN_ID}/approve`);
    expect(csrf?.ok()).toBe(true); // the evil page itself loaded
    await hasText(page.locator("body"), "403 Forbidden: cross-site request refused");
    const journal = new SqliteJournal({ path: seeded.journalDb });
    try {
      expect(await journal.listSignals(RUN_ID)).toEqual([]);
    } finally {
      await journal.close();
    }
  });

  it("shows the pending tool and its arguments; Approve is journaled and the run continues", async () => {
    await page.goto(`${origin}/runs?status=waiting`);
    await shot("runs");
    await page.getByRole("link", { name: RUN_ID }).click();
    const approval = page.locator("#approval");
    await textIs(approval.locator(".tool-name"), "refund_payment");
    await hasText(approval, '"orderId": "A-1009"');
    await hasText(approval, '"amountCents": 4250');
    await hasText(approval, '"reason": "damaged <b>box</b>"');
    await textIs(page.locator("#live-state"), "connected");
    await shot("run");
    await approval.getByRole("button", { name: "Approve" }).click();
    await hasText(page.locator(".flash"), `approved ${TOOL_CALL_ID}`);
    const journal = new SqliteJournal({ path: seeded.journalDb });
    try {
      const signal = await journal.getSignal(RUN_ID, approvalSignalName(TOOL_CALL_ID));
      expect(signal?.value).toEqual({ approved: true });
      // the run's worker resumes it; the open page follows it live (server-sent events)
      await textIs(page.locator("#live-state"), "connected");
      const result = await runDurable(RUN_ID, refundWorkflow, { journal });
      expect(result).toMatchObject({ status: "completed", output: "refunded 4250" });
    } finally {
      await journal.close();
    }
    await textIs(page.locator("[data-run-status]"), "completed");
    await hasText(page.locator("#live-log"), "run_completed");
    await page.reload();
    await hasText(page.locator("#journal"), "tool:refund_payment");
    await countIs(page.locator("#approval"), 0);
    await shot("run-completed");
    expect(dialogs).toEqual([]);
    // nothing the inspector serves was blocked by its own CSP or failed in its script (the 401/403 pages aside)
    expect(consoleErrors.filter((e) => !/status of 40[13]/.test(e))).toEqual([]);
  });
});
