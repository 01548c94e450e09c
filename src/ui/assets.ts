/**
 * The web inspector's only static assets, served by its own server (no CDN,
 * no network: it works offline): one style sheet that fits a laptop and a
 * phone, and one small client script for the live parts of a run page
 * (server-sent events). The script writes stored text with `textContent`
 * only, never as HTML.
 *
 * @module
 */

/** The style sheet, served at `/assets/app.css`. */
export const APP_CSS = `
:root { --fg:#1d2430; --muted:#6a7383; --bg:#f6f7f9; --card:#fff; --line:#dde1e7; --accent:#b4541a;
  --user:#eef4ff; --assistant:#fff; --tool:#f3f7ef; --system:#f7f3fb; --code:#f3f4f6; }
* { box-sizing: border-box; }
body { margin:0; font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; color:var(--fg); background:var(--bg); }
a { color:var(--accent); text-decoration:none; } a:hover { text-decoration:underline; }
header.top { display:flex; flex-wrap:wrap; gap:.5rem 1.5rem; align-items:center; padding:.6rem 1rem; background:#22262e; }
header.top a { color:#e8e9ec; } header.top .brand { font-weight:700; font-size:1.05rem; }
header.top nav.sections { display:flex; gap:1rem; flex-wrap:wrap; }
header.top nav a.active { color:#ffb37a; border-bottom:2px solid #ffb37a; }
main { max-width:1200px; margin:0 auto; padding:1rem; }
h1 { font-size:1.35rem; margin:.4rem 0 .8rem; word-break:break-all; } h2 { font-size:1.1rem; margin:1.4rem 0 .5rem; }
.crumbs { font-size:.9rem; color:var(--muted); margin-bottom:.3rem; } .crumbs .sep { margin:0 .4rem; }
.muted { color:var(--muted); } .small { font-size:.85rem; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:.8rem 1rem; margin:.6rem 0; }
.grid { display:grid; grid-template-columns:repeat(auto-fit,minmax(260px,1fr)); gap:.8rem; }
table { width:100%; border-collapse:collapse; background:var(--card); border:1px solid var(--line); border-radius:8px; overflow:hidden; }
th, td { text-align:left; padding:.45rem .6rem; border-bottom:1px solid var(--line); vertical-align:top; }
th { font-size:.8rem; text-transform:uppercase; letter-spacing:.03em; color:var(--muted); background:#fafbfc; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
.table-wrap { overflow-x:auto; }
pre, code { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:.85rem; }
pre { background:var(--code); padding:.5rem .6rem; border-radius:6px; overflow:auto; white-space:pre-wrap; word-break:break-word; margin:.3rem 0; max-height:28rem; }
.badge { display:inline-block; padding:.05rem .5rem; border-radius:999px; font-size:.8rem; background:#e5e7eb; }
.b-running,.b-started,.b-pending { background:#dbeafe; } .b-waiting { background:#fef3c7; } .b-blocked { background:#fde2cf; }
.b-failed { background:#fee2e2; } .b-completed,.b-finished { background:#dcfce7; } .b-cancelled { background:#e5e7eb; }
form.inline { display:inline; } form.search { display:flex; gap:.5rem; flex-wrap:wrap; margin:.5rem 0; }
input[type=text], input[type=search], input[type=number], select, textarea { font:inherit; padding:.35rem .5rem; border:1px solid var(--line); border-radius:6px; background:#fff; max-width:100%; }
textarea { width:100%; min-height:4rem; font-family:ui-monospace,monospace; font-size:.85rem; }
button { font:inherit; padding:.35rem .9rem; border-radius:6px; border:1px solid var(--line); background:#fff; cursor:pointer; }
button.primary { background:#166534; color:#fff; border-color:#166534; } button.danger { background:#b91c1c; color:#fff; border-color:#b91c1c; }
.actions { display:flex; gap:.5rem; flex-wrap:wrap; align-items:flex-start; margin:.5rem 0; }
.pager { display:flex; gap:1rem; align-items:center; flex-wrap:wrap; margin:.7rem 0; }
.pager a.active { font-weight:700; color:var(--fg); border-bottom:2px solid var(--accent); }
.flash { padding:.6rem .9rem; border-radius:6px; margin:.5rem 0; background:#ecfdf5; border:1px solid #a7f3d0; }
.flash.error { background:#fef2f2; border-color:#fecaca; }
.chat { display:flex; flex-direction:column; gap:.6rem; }
.msg { border:1px solid var(--line); border-radius:10px; padding:.5rem .8rem; background:var(--assistant); max-width:100%; }
.msg .meta { font-size:.78rem; color:var(--muted); display:flex; gap:.6rem; flex-wrap:wrap; margin-bottom:.2rem; }
.msg.user { background:var(--user); margin-left:min(8%,4rem); } .msg.assistant { margin-right:min(8%,4rem); }
.msg.system { background:var(--system); } .msg.tool { background:var(--tool); }
.msg .text { white-space:pre-wrap; word-break:break-word; }
.msg.partial { border-style:dashed; border-color:#d97706; }
.tag { font-size:.72rem; padding:0 .4rem; border-radius:4px; background:#fde68a; color:#78350f; }
.call { display:grid; grid-template-columns:1fr 1fr; gap:.6rem; border-top:1px dashed var(--line); margin-top:.4rem; padding-top:.4rem; }
.call h4 { margin:.1rem 0; font-size:.82rem; color:var(--muted); font-weight:600; }
details.reasoning { background:#fafaf5; border-radius:6px; padding:.2rem .5rem; margin:.3rem 0; }
details.reasoning summary { cursor:pointer; color:var(--muted); font-size:.85rem; }
.timeline { list-style:none; padding:0; margin:0; }
.timeline li { border-left:3px solid var(--line); padding:.3rem .8rem; margin-left:.4rem; }
.diff .add { background:#ecfdf5; } .diff .del { background:#fef2f2; } .diff .chg { background:#fffbeb; }
.diff td pre { max-height:12rem; }
.approval { border:2px solid #f59e0b; }
#live-log { max-height:14rem; overflow:auto; font-size:.82rem; }
#live-log li { font-family:ui-monospace,monospace; }
@media (max-width: 640px) {
  main { padding:.6rem; } .call { grid-template-columns:1fr; }
  .msg.user, .msg.assistant { margin-left:0; margin-right:0; }
  th.hide-sm, td.hide-sm { display:none; }
}
`;

/**
 * The client script, served at `/assets/app.js`: the live journal events and
 * the token side channel of a run page over `EventSource` (which reconnects
 * by itself and sends `Last-Event-ID`, so the server resumes after the last
 * event the page saw). Everything received is written with `textContent`.
 */
export const APP_JS = `
"use strict";
(function () {
  function onReady(fn) { if (document.readyState !== "loading") fn(); else document.addEventListener("DOMContentLoaded", fn); }
  onReady(function () {
    var live = document.querySelector("[data-live]");
    if (live && window.EventSource) {
      var log = document.getElementById("live-log");
      var state = document.getElementById("live-state");
      var status = document.querySelector("[data-run-status]");
      var es = new EventSource(live.getAttribute("data-live"));
      es.addEventListener("open", function () { if (state) state.textContent = "connected"; });
      es.addEventListener("error", function () { if (state) state.textContent = "reconnecting…"; });
      es.addEventListener("journal", function (e) {
        var ev; try { ev = JSON.parse(e.data); } catch (_) { return; }
        if (log) {
          var li = document.createElement("li");
          li.textContent = "#" + e.lastEventId + " " + ev.at + " " + ev.type + (ev.name ? " " + ev.name : "") + (ev.detail ? ": " + ev.detail : "");
          log.appendChild(li);
          log.scrollTop = log.scrollHeight;
        }
      });
      es.addEventListener("status", function (e) {
        var s; try { s = JSON.parse(e.data); } catch (_) { return; }
        if (status && typeof s.status === "string") {
          status.textContent = s.status;
          status.className = "badge b-" + s.status.replace(/[^a-z]/g, "");
        }
        var note = document.getElementById("live-changed");
        if (note && s.changed) note.hidden = false;
      });
    }
    var tokens = document.querySelector("[data-stream]");
    if (tokens && window.EventSource) {
      var out = document.getElementById("stream-text");
      var ts = new EventSource(tokens.getAttribute("data-stream"));
      ts.addEventListener("token", function (e) {
        var ev; try { ev = JSON.parse(e.data); } catch (_) { return; }
        var d = ev.data;
        if (d && typeof d === "object" && d.type === "reset") { out.textContent = ""; return; }
        var text = d && typeof d === "object" && typeof d.text === "string" ? d.text : JSON.stringify(d) + "\\n";
        out.textContent += text;
      });
      ts.addEventListener("end", function () { ts.close(); });
      ts.addEventListener("stream-error", function (e) {
        var err; try { err = JSON.parse(e.data); } catch (_) { err = {}; }
        out.textContent += "\\n[" + (err.reason || "error") + "] " + (err.message || "");
        ts.close();
      });
    }
  });
})();
`;
