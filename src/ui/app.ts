/**
 * The web inspector as a hono app: access control on every route
 * (`auth.ts`), the bundled assets, the home page, the sessions, workflows and
 * durable-run pages, and one error page: a typed error becomes its HTTP status
 * (usage 400, not found 404, a conflict 409, anything else 500) with its
 * one-line message as text.
 *
 * @module
 */
import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { DumplingsError } from "../core/errors.js";
import { log } from "../core/logger.js";
import { errorParts, exitCodeFor } from "../ops/errors.js";
import { APP_CSS, APP_JS } from "./assets.js";
import { authMiddleware } from "./auth.js";
import { h, layout } from "./html.js";
import { runRoutes } from "./runs.js";
import { sessionRoutes } from "./sessions.js";
import type { Source, UiSources } from "./sources.js";
import { workflowRoutes } from "./workflows.js";

/** Options of {@link createUiApp}. */
export interface UiAppOptions {
  /** The token a browser must present once (`/?token=…`). */
  token: string;
  /** The listening port, read per request (known only once listening with port 0). */
  port: () => number;
  /** True when bound to a loopback address (then only loopback Host headers are served). @default true */
  loopback?: boolean;
}

/**
 * The HTTP status for an error thrown by a route.
 *
 * @param error - anything a route threw
 * @returns 400 for a usage error, 404 for a not-found one, 409 for a conflict, else 500
 */
export function statusFor(error: unknown): 400 | 404 | 409 | 500 {
  // a conflict first: the CLI exits 2 for some (a decision already taken), the web says 409
  if (error instanceof DumplingsError && (error.code === "CONFLICT" || error.code.endsWith("_CONFLICT"))) return 409;
  const exit = exitCodeFor(error);
  if (exit === 2) return 400;
  if (exit === 3) return 404;
  return 500;
}

/** Largest request body the inspector reads (its forms), in bytes. */
export const MAX_FORM_BYTES = 16 * 1024;

/**
 * Builds the inspector's app over the given stores.
 *
 * @param sources - the stores (see {@link UiSources})
 * @param options - the token and port the access control checks
 * @returns the hono app (serve it with `startUi`, or call `app.request()` in a test)
 * @example
 * const app = createUiApp({ sessions: { value: backend, label: "sqlite:./s.db" }, workflows, journal }, { token, port: () => 8080 });
 */
export function createUiApp(sources: UiSources, options: UiAppOptions): Hono {
  const app = new Hono();
  app.use("*", authMiddleware({ token: options.token, port: options.port, loopback: options.loopback ?? true }));
  // The forms send a tool call id, a decision and a short note: a bigger body is refused before it is read
  // (a 100 MB cancel reason was journaled, and its run page became 200 MB).
  app.use(
    "*",
    bodyLimit({
      maxSize: MAX_FORM_BYTES,
      onError: (c) => c.text(`413 Payload Too Large: a form is at most ${MAX_FORM_BYTES} bytes\n`, 413),
    }),
  );
  app.get("/assets/app.css", (c) => c.body(APP_CSS, 200, { "Content-Type": "text/css; charset=utf-8" }));
  app.get("/assets/app.js", (c) => c.body(APP_JS, 200, { "Content-Type": "text/javascript; charset=utf-8" }));
  app.get("/favicon.ico", (c) => c.body(null, 204));
  app.get("/", async (c) => {
    const card = (title: string, href: string, src: Source<unknown>, what: string) =>
      h`<section class="card"><h2><a href="${href}">${title}</a></h2><p class="small muted">${src.label}</p><p>${src.value === undefined ? h`<span class="flash error">${src.missing}</span>` : what}</p></section>`;
    return c.html(
      layout(
        { title: "Inspector", section: "home" },
        h`<h1>dumplings inspector</h1>
<div class="grid">
${card("Sessions", "/sessions", sources.sessions, "stored agent conversations, their config and state")}
${card("Workflows", "/workflows", sources.workflows, "checkpointed workflows: step timeline, state, diff, fork")}
${card("Durable runs", "/runs", sources.journal, "journals, pending approvals, signals, operator actions")}
</div>`,
      ),
    );
  });
  sessionRoutes(app, sources);
  workflowRoutes(app, sources);
  runRoutes(app, sources);
  app.notFound((c) =>
    c.html(layout({ title: "Not found", section: "home" }, h`<h1>Not found</h1><p>${c.req.path}</p>`), 404),
  );
  app.onError((error, c) => {
    const status = statusFor(error);
    const { code, message } = errorParts(error);
    if (status === 500)
      log(
        process.env.DUMPLINGS_DEBUG === "1" ? "error" : "debug",
        `inspector: ${c.req.method} ${c.req.path} failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
        { code },
      );
    return c.html(
      layout(
        { title: `Error ${status}`, section: "home" },
        h`<h1>Error ${status}</h1><p class="flash error" role="alert">${message}${code ? ` (${code})` : ""}</p><p><a href="/">home</a></p>`,
      ),
      status,
    );
  });
  return app;
}
