/**
 * HTML building for the web inspector: one tagged template ({@link h}, hono's
 * `html` helper) that escapes every interpolated string, so a stored value —
 * a message, a key, a tool argument — is always text, never markup; the page
 * layout; and small formatting helpers. Nothing here builds HTML by string
 * concatenation.
 *
 * @module
 */
import { html } from "hono/html";
import type { HtmlEscapedString } from "hono/utils/html";

/** A fragment of HTML whose interpolated values were escaped. */
export type Html = HtmlEscapedString;

/**
 * The one way pages build HTML: a tagged template whose interpolated strings
 * (and `toString()` of other values) are escaped (`& < > " '`); nested `h`
 * fragments and arrays of them are inserted as they are; `undefined`, `null`
 * and booleans render nothing.
 *
 * @param strings - the template's literal parts (trusted markup)
 * @param values - interpolated values (escaped)
 * @returns the fragment
 * @example
 * h`<p>${message.content}</p>` // "<img src=x>" renders as the text &lt;img src=x&gt;
 */
export function h(strings: TemplateStringsArray, ...values: unknown[]): Html {
  return html(strings, ...values) as Html;
}

/**
 * Escapes a string for HTML text or a quoted attribute, as {@link h} does.
 *
 * @param text - any text
 * @returns the text with `& < > " '` replaced by entities
 */
export function escapeHtml(text: string): string {
  return String(h`${text}`);
}

/** What {@link layout} needs beside the body. */
export interface LayoutOptions {
  /** The page title (text). */
  title: string;
  /** Which top-level section is active, for the navigation bar. */
  section?: "sessions" | "workflows" | "runs" | "home";
  /** Breadcrumb links shown above the body: `[label, href]` (href undefined: plain text). */
  crumbs?: readonly (readonly [string, string | undefined])[];
}

/**
 * The whole page around a body: doctype, viewport for phones, the bundled CSS
 * and client script (same origin, allowed by the CSP; no inline script or style), navigation.
 *
 * @param options - title, active section, breadcrumbs
 * @param body - the page content
 * @returns the complete HTML document
 */
export function layout(options: LayoutOptions, body: Html): Html {
  const nav = (id: NonNullable<LayoutOptions["section"]>, label: string, href: string) =>
    h`<a href="${href}" class="${options.section === id ? "active" : ""}">${label}</a>`;
  const crumbs = options.crumbs?.length
    ? h`<nav class="crumbs">${options.crumbs.map(([label, href], i) => [
        i > 0 ? h`<span class="sep">/</span>` : "",
        href === undefined ? h`<span>${label}</span>` : h`<a href="${href}">${label}</a>`,
      ])}</nav>`
    : "";
  return h`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${options.title} · dumplings ui</title>
<link rel="stylesheet" href="/assets/app.css">
<script src="/assets/app.js" defer></script>
</head>
<body>
<header class="top">
<a class="brand" href="/">dumplings</a> <span class="muted small">inspector</span>
<nav class="sections">${nav("sessions", "Sessions", "/sessions")}${nav("workflows", "Workflows", "/workflows")}${nav("runs", "Durable runs", "/runs")}</nav>
</header>
<main>
${crumbs}
${body}
</main>
</body>
</html>`;
}

/**
 * A JSON value pretty-printed in a `<pre>` (escaped), cut after `maxChars`.
 *
 * @param value - any JSON value (undefined renders an em dash)
 * @param maxChars - longest text shown @default 20000
 * @returns the fragment
 */
/** Characters of one stored text a page shows before cutting it (the export holds all of it). */
export const MAX_TEXT_CHARS = 100_000;

/**
 * A stored text, escaped, cut at `maxChars` with a note saying so: a 30 MB tool output or prompt
 * does not make a 30 MB page.
 *
 * @param text - the text
 * @param maxChars - @default {@link MAX_TEXT_CHARS}
 * @returns the HTML (the text as text, never markup)
 */
export function clip(text: string, maxChars = MAX_TEXT_CHARS): Html {
  if (text.length <= maxChars) return h`${text}`;
  return h`${text.slice(0, maxChars)}… <span class="muted small">(cut at ${maxChars} of ${text.length} characters; the .duas export holds all of it)</span>`;
}

export function jsonBlock(value: unknown, maxChars = 20_000): Html {
  if (value === undefined) return h`<span class="muted">—</span>`;
  let text = JSON.stringify(value, null, 2) ?? String(value);
  const cut = text.length > maxChars;
  if (cut) text = `${text.slice(0, maxChars)}\n…`;
  return h`<pre class="json">${text}</pre>${cut ? h`<p class="muted">(cut at ${maxChars} characters)</p>` : ""}`;
}

/**
 * A status as a coloured badge (the class is chosen from a fixed list, the text escaped).
 *
 * @param status - a run, workflow or step status
 * @returns the fragment
 */
export function badge(status: string): Html {
  const known = new Set([
    "running",
    "waiting",
    "blocked",
    "failed",
    "completed",
    "finished",
    "cancelled",
    "pending",
    "started",
  ]);
  return h`<span class="badge ${known.has(status) ? `b-${status}` : ""}">${status}</span>`;
}

/**
 * Previous/next links of a paged list, keeping the other query parameters.
 *
 * @param base - the page path
 * @param params - query parameters to keep
 * @param page - 0-based current page
 * @param pages - number of pages (undefined: unknown, a next link when `hasNext`)
 * @param hasNext - whether a next page exists
 * @returns the fragment
 */
export function pager(
  base: string,
  params: Record<string, string | undefined>,
  page: number,
  pages: number | undefined,
  hasNext: boolean,
): Html {
  const href = (p: number) => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== "") q.set(k, v);
    q.set("page", String(p));
    return `${base}?${q.toString()}`;
  };
  const last = pages === undefined ? undefined : Math.max(0, pages - 1);
  return h`<nav class="pager">
${page > 0 ? h`<a href="${href(0)}">« first</a> <a href="${href(page - 1)}" rel="prev">‹ prev</a>` : h`<span class="muted">« first ‹ prev</span>`}
<span>page ${page + 1}${pages === undefined ? "" : ` of ${Math.max(1, pages)}`}</span>
${hasNext ? h`<a href="${href(page + 1)}" rel="next">next ›</a>${last !== undefined ? h` <a href="${href(last)}">last »</a>` : ""}` : h`<span class="muted">next › last »</span>`}
</nav>`;
}

/**
 * A 0-based page number from a query parameter (anything else is page 0).
 *
 * @param text - the `page` parameter
 * @returns a non-negative integer
 */
export function pageParam(text: string | undefined): number {
  const n = Number(text);
  return Number.isInteger(n) && n >= 0 ? n : 0;
}
