/**
 * `npm run demo`: the library's main job, run on real conversations.
 *
 * Every conversation bundled in `data/trajectories/` (OpenAI chat `*.jsonl`
 * as a `BaseAgent`, Anthropic Messages `*.anthropic.jsonl` as an
 * `AnthropicAgent`) is saved with `saveState` into the default file backend
 * (`./.dumplingsAI_sessions`, or `DUMPLINGS_PERSISTENCE_DIR`) and into SQLite
 * (`./.dumplingsAI_sessions.db`, or `DUMPLINGS_PERSISTENCE_DB`), loaded back
 * with `loadState`, streamed back with `iterHistory`, and compared with the
 * original: the history message by message and the whole state field by
 * field. A table gives messages, tool calls, bytes on disk and save/load
 * times per backend, with totals; then how to look at the sessions with the
 * `dumplings` CLI. Exits 1 when anything differs. Re-running overwrites the
 * same keys. `npm run demo -- --all` also takes the full shared data set
 * (`../shared/data/trajectories`) when it is present.
 *
 * @module
 */
import { existsSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { AnthropicAgent } from "../agent/anthropic-agent.js";
import { BaseAgent } from "../agent/base-agent.js";
import { configureBuiltinBackends, getBackend } from "../backends/registry.js";
import { firstDifference } from "../cli/compare.js";
import { renderTable } from "../cli/table.js";
import { DEFAULT_FILES } from "../core/defaults.js";
import type { AgentState } from "../core/state.js";
import { formatBytes, formatMs } from "../ops/format.js";
import { countToolCalls } from "../ops/stats.js";
import { iterHistory, loadState, saveState } from "../persistence/index.js";
import { BUNDLED_TRAJECTORIES_DIR, loadSampleConversations, type SampleConversation } from "../testing/samples.js";

const DEFAULT_DIR = DEFAULT_FILES.sessionsDir;
const DEFAULT_DB = DEFAULT_FILES.sessionsDb;
const BACKENDS = ["file", "sqlite"] as const;
type BackendName = (typeof BACKENDS)[number];

/** Per-backend measurements of one conversation. */
interface Measured {
  saveMs: number;
  loadMs: number;
  /** Bytes the session takes on disk (file backend: the `.duas` file). */
  bytes: number | undefined;
  /** First differing path, or undefined when the round trip is exact. */
  problem: string | undefined;
}

/** One row of the demo's table. */
interface Row {
  key: string;
  protocol: string;
  messages: number;
  toolCalls: number;
  results: Map<BackendName, Measured>;
}

function env(name: string): string | undefined {
  const v = process.env[name];
  return v === undefined || v === "" ? undefined : v;
}

/** Model names by sample file, from the bundled `manifest.json` (best effort: a demo label only). */
function modelNames(): Map<string, string> {
  const out = new Map<string, string>();
  const file = path.join(BUNDLED_TRAJECTORIES_DIR, "manifest.json");
  if (!existsSync(file)) return out;
  const entries = JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>[];
  for (const e of entries) {
    const model = typeof e.model === "string" ? (e.model.split(",").at(-1) ?? "") : "";
    for (const f of [e.openai_file, e.anthropic_file]) {
      if (typeof f === "string") out.set(f.replace(/\.jsonl$/, ""), model);
    }
  }
  return out;
}

function buildAgent(conv: SampleConversation, modelName: string): BaseAgent {
  const options = { name: conv.id, modelName, history: structuredClone(conv.messages) };
  return conv.protocol === "anthropic" ? new AnthropicAgent(options) : new BaseAgent(options);
}

/** The state as compared: everything, except the save timestamp, which a save sets. */
function comparable(state: AgentState): AgentState {
  return { ...state, meta: { ...state.meta, savedAt: "" } };
}

async function roundTrip(
  conv: SampleConversation,
  agent: BaseAgent,
  backendName: BackendName,
  dir: string,
): Promise<Measured> {
  const backend = getBackend(backendName);
  const t0 = performance.now();
  await saveState(agent, conv.id, { backend, force: true }); // a re-run replaces the previous run's copy on purpose
  const saveMs = performance.now() - t0;
  const t1 = performance.now();
  const loaded = await loadState(conv.id, { backend });
  const loadMs = performance.now() - t1;

  const expected = comparable(agent.toState());
  let problem = firstDifference(conv.messages, loaded.history, "history");
  problem ??= firstDifference(expected, comparable(loaded.toState()), "state");
  // The stored record itself, read through the storage contract, not only the agent rebuilt from it.
  const stored = await backend.load(conv.id);
  problem ??= stored === undefined ? "stored (missing)" : firstDifference(expected, comparable(stored), "stored");
  if (problem === undefined) {
    let i = 0;
    for await (const message of iterHistory(conv.id, { backend })) {
      problem = firstDifference(conv.messages[i], message, `iterHistory[${i}]`);
      if (problem !== undefined) break;
      i++;
    }
    if (problem === undefined && i !== conv.messages.length) problem = `iterHistory.length (${i})`;
  }
  const bytes = backendName === "file" ? statSync(path.join(dir, `${conv.id}.duas`)).size : undefined;
  return { saveMs, loadMs, bytes, problem };
}

/**
 * Runs the demo and prints its report.
 *
 * @returns the process exit code: 0 when every round trip is exact, 1 otherwise
 */
async function main(): Promise<number> {
  const dir = env("DUMPLINGS_PERSISTENCE_DIR") ?? DEFAULT_DIR;
  const db = env("DUMPLINGS_PERSISTENCE_DB") ?? DEFAULT_DB;
  configureBuiltinBackends({ baseDir: dir, dbPath: db });
  // `npm run demo -- --all` adds the full shared data set (../shared/data/trajectories) when it is present.
  const all = process.argv.includes("--all");
  const conversations = loadSampleConversations({ source: all ? "all" : "bundled" });
  const models = modelNames();
  const out = process.stdout;
  out.write(
    `dumplings-ai demo: ${conversations.length} real conversations → file backend (${dir}) and SQLite (${db})\n\n`,
  );

  const rows: Row[] = [];
  for (const conv of conversations) {
    const agent = buildAgent(conv, models.get(conv.id) ?? "");
    const results = new Map<BackendName, Measured>();
    for (const name of BACKENDS) results.set(name, await roundTrip(conv, agent, name, dir));
    rows.push({
      key: conv.id,
      protocol: conv.protocol,
      messages: conv.messages.length,
      toolCalls: countToolCalls(conv.messages),
      results,
    });
  }

  const cell = (row: Row, name: BackendName, f: (m: Measured) => string) => {
    const m = row.results.get(name);
    return m ? f(m) : "-";
  };
  const sum = (f: (r: Row) => number) => rows.reduce((acc, r) => acc + f(r), 0);
  const sumOf = (name: BackendName, f: (m: Measured) => number) =>
    sum((r) => {
      const m = r.results.get(name);
      return m ? f(m) : 0;
    });
  const failures = rows.flatMap((r) =>
    BACKENDS.flatMap((name) => {
      const p = r.results.get(name)?.problem;
      return p === undefined ? [] : [{ key: r.key, backend: name, path: p }];
    }),
  );
  // Closing checkpoints SQLite's write-ahead log into the database file, so its size is the settled one.
  for (const name of BACKENDS) await getBackend(name).close?.();
  const dbBytes = [db, `${db}-wal`].filter((f) => existsSync(f)).reduce((acc, f) => acc + statSync(f).size, 0);

  out.write(
    `${renderTable(
      [
        { header: "key" },
        { header: "protocol" },
        { header: "messages", align: "right" },
        { header: "tool calls", align: "right" },
        { header: "file bytes", align: "right" },
        { header: "file save ms", align: "right" },
        { header: "file load ms", align: "right" },
        { header: "sqlite save ms", align: "right" },
        { header: "sqlite load ms", align: "right" },
        { header: "identical" },
      ],
      rows.map((r) => [
        r.key,
        r.protocol,
        String(r.messages),
        String(r.toolCalls),
        cell(r, "file", (m) => String(m.bytes ?? "-")),
        cell(r, "file", (m) => formatMs(m.saveMs)),
        cell(r, "file", (m) => formatMs(m.loadMs)),
        cell(r, "sqlite", (m) => formatMs(m.saveMs)),
        cell(r, "sqlite", (m) => formatMs(m.loadMs)),
        BACKENDS.every((n) => r.results.get(n)?.problem === undefined) ? "yes" : "NO",
      ]),
      {
        footer: [
          [
            `total (${rows.length})`,
            "",
            String(sum((r) => r.messages)),
            String(sum((r) => r.toolCalls)),
            String(sumOf("file", (m) => m.bytes ?? 0)),
            formatMs(sumOf("file", (m) => m.saveMs)),
            formatMs(sumOf("file", (m) => m.loadMs)),
            formatMs(sumOf("sqlite", (m) => m.saveMs)),
            formatMs(sumOf("sqlite", (m) => m.loadMs)),
            failures.length === 0 ? "all" : `${failures.length} differ`,
          ],
        ],
      },
    )}\n\n`,
  );
  out.write(
    `on disk: ${formatBytes(sumOf("file", (m) => m.bytes ?? 0))} of .duas files in ${dir}, ${formatBytes(dbBytes)} of SQLite database in ${db}\n`,
  );

  if (failures.length > 0) {
    for (const f of failures) {
      process.stderr.write(`demo: ${f.backend}: ${JSON.stringify(f.key)} does not round-trip: differs at ${f.path}\n`);
    }
    process.stderr.write(`demo: FAILED: ${failures.length} round trip(s) differ\n`);
    return 1;
  }
  const first = rows[0]?.key ?? "<key>";
  const dirFlag = env("DUMPLINGS_PERSISTENCE_DIR") ? ` --dir ${dir}` : "";
  const dbFlag = env("DUMPLINGS_PERSISTENCE_DB") ? ` --db ${db}` : "";
  out.write(
    [
      `every history and state read back identical from both backends (${rows.length} sessions × ${BACKENDS.length} backends)`,
      "",
      "look at them:",
      `  npm run dumplings -- ls${dirFlag}`,
      `  npm run dumplings -- show ${first}${dirFlag}`,
      `  npm run dumplings -- ls --backend sqlite${dbFlag}`,
      `  npm run dumplings -- show ${first} --backend sqlite${dbFlag}`,
      `  npm run dumplings -- export ${first}${dirFlag} -o ${first}.duas`,
      "",
    ].join("\n"),
  );
  return 0;
}

try {
  process.exitCode = await main();
} catch (error) {
  const e = error as { code?: unknown; message?: unknown };
  process.stderr.write(`demo: ${String(e?.message ?? error)}${typeof e?.code === "string" ? ` (${e.code})` : ""}\n`);
  if (process.env.DUMPLINGS_DEBUG === "1" && error instanceof Error) process.stderr.write(`${error.stack}\n`);
  process.exitCode = 1;
}
