/**
 * The sessions pages of the web inspector: a searchable, paged list of stored
 * sessions (only the shown page's headers are read), a session page (header,
 * config and state, revision, one page of the conversation read by streaming
 * the history and stopping after the page: a 100,000-message session never
 * loads whole), and the `.duas` download (the exporter of `dumplings export`).
 *
 * @module
 */
import { createReadStream } from "node:fs";
import { Readable } from "node:stream";
import type { Hono } from "hono";
import type { StateBackend } from "../backends/types.js";
import type { Message } from "../core/messages.js";
import { isItemFault, unreadableSession } from "../ops/errors.js";
import { duasChunks, exportToTemp } from "../ops/export.js";
import { formatBytes } from "../ops/format.js";
import { listKeysSorted, openSession, readHeaderOf, readSession, type SessionView } from "../ops/sessions.js";
import { renderChat } from "./chat.js";
import { h, jsonBlock, layout, pageParam, pager } from "./html.js";
import type { UiSources } from "./sources.js";

/** Sessions per list page. */
export const SESSIONS_PER_PAGE = 50;
/** Messages per session page. */
export const MESSAGES_PER_PAGE = 50;

/**
 * Reads messages `offset … offset + limit - 1` of a stored history by streaming it and stopping
 * after the last one wanted (memory: one page; time: proportional to `offset + limit`).
 *
 * @param history - the history stream of {@link openSession}
 * @param offset - first index wanted
 * @param limit - how many
 * @returns the page's messages
 */
export async function readPage(history: AsyncIterable<Message>, offset: number, limit: number): Promise<Message[]> {
  const out: Message[] = [];
  let i = 0;
  for await (const m of history) {
    if (i >= offset) out.push(m);
    i++;
    if (out.length >= limit) break;
  }
  return out;
}

/**
 * The size of a session written as `.duas` (what the export downloads), measured by encoding it in
 * a stream: memory stays one batch of messages, time is proportional to the history.
 */
async function duasSize(
  header: SessionView["header"],
  backend: StateBackend,
  key: string,
  label: string,
): Promise<number> {
  const session = await openSession(backend, key, label);
  let bytes = 0;
  for await (const chunk of duasChunks({ ...session, header }, key)) bytes += Buffer.byteLength(chunk);
  return bytes;
}

const missingPage = (title: string, why: string) =>
  layout({ title, section: "sessions" }, h`<h1>${title}</h1><p class="flash error">${why}</p>`);

/**
 * Adds the sessions routes to the app.
 *
 * @param app - the hono app
 * @param sources - the inspector's stores
 */
export function sessionRoutes(app: Hono, sources: UiSources): void {
  app.get("/sessions", async (c) => {
    const src = sources.sessions;
    if (src.value === undefined) return c.html(missingPage("Sessions", src.missing));
    const q = (c.req.query("q") ?? "").trim();
    const page = pageParam(c.req.query("page"));
    const all = await listKeysSorted(src.value);
    const needle = q.toLowerCase();
    const keys = needle === "" ? all : all.filter((k) => k.toLowerCase().includes(needle));
    const pages = Math.ceil(keys.length / SESSIONS_PER_PAGE);
    const shown = keys.slice(page * SESSIONS_PER_PAGE, (page + 1) * SESSIONS_PER_PAGE);
    const rows = [];
    for (const key of shown) {
      const href = `/sessions/${encodeURIComponent(key)}`;
      try {
        const { meta } = await readHeaderOf(src.value, key, src.label);
        rows.push(
          h`<tr><td><a href="${href}">${key}</a></td><td class="hide-sm">${meta.agentName}</td><td class="hide-sm">${meta.protocol}</td><td class="num">${meta.messageCount}</td><td class="hide-sm small">${meta.savedAt}</td></tr>`,
        );
      } catch (e) {
        // One unreadable session (as `dumplings ls` tells them) is a row with its error, not a failed page.
        if (!isItemFault(e)) throw e;
        const { code, message } = unreadableSession(key, e);
        rows.push(
          h`<tr><td><a href="${href}">${key}</a></td><td colspan="4" class="small">unreadable: ${message} (${code})</td></tr>`,
        );
      }
    }
    return c.html(
      layout(
        { title: "Sessions", section: "sessions" },
        h`<h1>Sessions <span class="muted small">${src.label}</span></h1>
<form class="search" method="get" action="/sessions" role="search">
<input type="search" name="q" value="${q}" placeholder="search keys" aria-label="search session keys">
<button type="submit">Search</button>
</form>
<p class="muted small">${keys.length} of ${all.length} sessions${q ? ` match “${q}”` : ""}</p>
<div class="table-wrap"><table>
<thead><tr><th>key</th><th class="hide-sm">name</th><th class="hide-sm">protocol</th><th class="num">messages</th><th class="hide-sm">saved at</th></tr></thead>
<tbody>${rows}</tbody></table></div>
${pager("/sessions", { q }, page, pages, page + 1 < pages)}`,
      ),
    );
  });

  app.get("/sessions/:key/export", async (c) => {
    const src = sources.sessions;
    if (src.value === undefined) return c.text(src.missing, 404);
    const key = c.req.param("key");
    // Written and verified in a temporary file first (as `dumplings export` to stdout): a download never
    // ends with a partial session when a save lands mid-read.
    const { file, remove } = await exportToTemp(src.value, key, src.label, false);
    const stream = createReadStream(file);
    stream.once("close", () => void remove());
    const name = `${key.replace(/[^A-Za-z0-9._-]+/g, "_")}.duas`;
    const body = Readable.toWeb(stream) as ReadableStream;
    return c.body(body, 200, {
      "Content-Type": "text/plain; charset=utf-8",
      "Content-Disposition": `attachment; filename="${name}"`,
    });
  });

  app.get("/sessions/:key", async (c) => {
    const src = sources.sessions;
    if (src.value === undefined) return c.html(missingPage("Session", src.missing));
    const key = c.req.param("key");
    const backend = src.value;
    const asked = c.req.query("page");
    // Header, revision and page of one saved state; read again when a save lands mid-read (a live session).
    const { session, messages, page, pages, offset } = await readSession(backend, key, src.label, async (session) => {
      const pages = Math.max(1, Math.ceil(session.header.meta.messageCount / MESSAGES_PER_PAGE));
      const page = asked === "last" ? pages - 1 : Math.min(pageParam(asked), pages - 1);
      const offset = page * MESSAGES_PER_PAGE;
      return { session, messages: await readPage(session.history, offset, MESSAGES_PER_PAGE), page, pages, offset };
    });
    const revision = session.revision;
    const { meta, config, state } = session.header;
    const total = meta.messageCount;
    const pageBytes = messages.reduce((n, m) => n + Buffer.byteLength(JSON.stringify(m)), 0);
    const base = `/sessions/${encodeURIComponent(key)}`;
    return c.html(
      layout(
        {
          title: key,
          section: "sessions",
          crumbs: [
            ["Sessions", "/sessions"],
            [key, undefined],
          ],
        },
        h`<h1>${key}</h1>
<div class="actions"><a href="${base}/export" download><button type="button">Export .duas</button></a></div>
<div class="grid">
<div class="card"><h2>Meta</h2><table>
<tr><th>agent</th><td>${meta.agentName} <span class="muted small">${meta.agentUuid}</span></td></tr>
<tr><th>protocol</th><td>${meta.protocol}</td></tr>
<tr><th>class</th><td>${meta.class}</td></tr>
<tr><th>messages</th><td>${total}</td></tr>
<tr><th>revision</th><td>${revision ?? h`<span class="muted">— (${src.label} keeps none)</span>`}</td></tr>
<tr><th>size</th><td>${
          c.req.query("size") === "duas"
            ? h`${formatBytes(await duasSize(session.header, backend, key, src.label))} as .duas`
            : h`<a href="${base}?${new URLSearchParams({ ...(asked ? { page: asked } : {}), size: "duas" }).toString()}">measure the .duas size</a> <span class="muted small">(reads the whole history)</span>`
        }<div class="muted small">this page: ${formatBytes(pageBytes)} of JSON; prompt ${config.prompt.length} characters</div></td></tr>
<tr><th>saved at</th><td>${meta.savedAt}</td></tr>
<tr><th>format</th><td>${meta.formatVersion} (schema ${meta.schemaVersion})</td></tr>
</table></div>
<div class="card"><h2>Config</h2>${jsonBlock(config)}</div>
<div class="card"><h2>State</h2>${jsonBlock(state)}</div>
</div>
<h2>Conversation <span class="muted small">messages ${total === 0 ? 0 : offset}–${Math.max(offset + messages.length - 1, 0)} of ${total}</span></h2>
${pager(base, {}, page, pages, page + 1 < pages)}
${messages.length === 0 ? h`<p class="muted">no messages</p>` : renderChat(messages, offset)}
${pager(base, {}, page, pages, page + 1 < pages)}`,
      ),
    );
  });
}
