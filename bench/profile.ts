/**
 * `node --import tsx bench/profile.ts <what> [--n 10000] [--dir /dev/shm] [--save p.cpuprofile]`:
 * where the time goes, for one of
 *
 * - `file`, `sqlite`, `redis`, `postgres`, `memory`: `n` calls of
 *   `agent.saveState` (one real message pushed before each);
 * - `load-<store>`: 10 `loadState` calls of an agent saved with `n` messages;
 * - `durable-<journal>` (`sqlite`, `postgres`, `redis`): a run of `n` steps;
 * - `replay-<journal>`: 20 replays of a recorded run of `n` steps;
 * - `checkpoint`: `n` `CheckpointStore.save` calls of a workflow whose state
 *   holds about 100 KB of real messages (SQLite cold store, Redis hot tier), as
 *   in `npm run bench`'s checkpoint scenario.
 *
 * The setup (saving before a load, recording before a replay) is not
 * profiled: V8's sampling CPU profiler is started through `node:inspector`
 * around the measured loop only (nor is module loading), and prints the main thread's
 * time by category: waiting (`(idle)`: the event loop waits for a server's
 * reply or the thread pool), garbage collection, system calls made
 * synchronously (`fdatasync`, `open`, `mkdir`, …), and JavaScript by source
 * file; then the functions with the most self time.
 *
 * @module
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import type { Message } from "../src/core/messages.js";
import { loadState } from "../src/index.js";
import { loadSampleConversations } from "../src/testing/samples.js";
import { backendSpecs, deleteRedisPrefix, pgSchema, redisPrefix } from "./registry.js";
import { promptText } from "./scenarios.js";
import { dropPostgresSchema, newBenchAgent } from "./stores.js";

interface CpuProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  nodes: CpuProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const args = process.argv.slice(2);
const target = args[0] ?? "file";
const n = Number(value("--n") ?? 10_000);
const root = value("--dir") ?? os.tmpdir();

function value(name: string): string | undefined {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}

/** The category of a sample's leaf frame. */
function category(frame: CpuProfileNode["callFrame"]): string {
  const { functionName: f, url } = frame;
  if (f === "(idle)") return "waiting (event loop idle: server round trips, thread pool)";
  if (f === "(garbage collector)") return "garbage collection";
  if (f === "(program)") return "V8/native (program)";
  if (url === "") return `native: ${f || "(anonymous)"}`;
  const src = url.indexOf("/src/");
  if (src >= 0) return `js: ${url.slice(src + 1)}`;
  const nm = url.indexOf("/node_modules/");
  if (nm >= 0)
    return `js: ${url
      .slice(nm + 14)
      .split("/")
      .slice(0, url.includes("/@") ? 2 : 1)
      .join("/")}`;
  if (url.startsWith("node:")) return `js: ${url}`;
  return `js: ${path.basename(url)}`;
}

function report(profile: CpuProfile, wallUs: number, count: number, unit: string): string {
  const lines: string[] = [];
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const cats = new Map<string, number>();
  const fns = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    const frame = byId.get(id)!.callFrame;
    // The profiler's own start (the inspector's `dispatch`) is not part of a save.
    if (frame.functionName === "dispatch" && frame.url === "") return;
    total += dt;
    const c = category(frame);
    cats.set(c, (cats.get(c) ?? 0) + dt);
    const name = `${frame.functionName || "(anonymous)"} ${frame.url ? `${path.basename(frame.url)}:${frame.lineNumber + 1}` : ""}`;
    fns.set(name, (fns.get(name) ?? 0) + dt);
  });
  // Samples are taken on the main thread whether it runs or waits (`(idle)`), so their deltas add up to wall time.
  const per = (t: number) => `${(t / count).toFixed(1)} µs`;
  lines.push(`${target}: ${count} × ${unit}, ${(wallUs / count).toFixed(0)} µs each (wall)\n`);
  lines.push(`profiled: ${(total / count).toFixed(0)} µs each; by category (share, µs each):`);
  for (const [c, t] of [...cats].sort((a, b) => b[1] - a[1]).slice(0, 25)) {
    lines.push(`  ${((100 * t) / total).toFixed(1).padStart(5)}%  ${per(t).padStart(10)}  ${c}`);
  }
  lines.push("\nfunctions with the most self time:");
  for (const [f, t] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, 20)) {
    lines.push(`  ${((100 * t) / total).toFixed(1).padStart(5)}%  ${f}`);
  }
  return lines.join("\n");
}

async function main(): Promise<void> {
  const pool: Message[] = loadSampleConversations({ protocol: "openai" }).flatMap((c) => c.messages);
  const ctx = {
    dir: mkdtempSync(path.join(root, "dumplings-profile-")),
    id: `profile_${process.pid}`,
    redisUrl: process.env.REDIS_URL ?? "redis://127.0.0.1:6379",
    databaseUrl: process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test",
  };
  const session = new Session();
  session.connect();
  await session.post("Profiler.enable");
  await session.post("Profiler.setSamplingInterval", { interval: 100 });
  let run: () => Promise<void>;
  let close: () => Promise<void>;
  let ops = n;
  let unit = "save";
  if (target === "checkpoint") {
    const w = await import("../src/workflow/index.js");
    const messages: Message[] = [];
    for (let i = 0, bytes = 0; bytes < 100_000; i++) {
      const m = pool[i % pool.length]!;
      messages.push(m);
      bytes += Buffer.byteLength(JSON.stringify(m)) + 1;
    }
    const store = await w.CheckpointStore.open({
      cold: new w.SqliteColdStore({ path: path.join(ctx.dir, "workflows.db") }),
      hot: new w.RedisHotTier({ url: ctx.redisUrl, keyPrefix: redisPrefix(ctx) }),
      blobDir: path.join(ctx.dir, "blobs"),
    });
    const workflowId = `profile-${ctx.id}`;
    let state = w.createWorkflowState({ workflowId, sharedMemory: { messages: messages as never } });
    unit = "checkpoint";
    run = async () => {
      for (let i = 0; i < n; i++) {
        state = { ...state, stepIndex: i, currentNode: `node-${i % 3}`, updatedAt: Date.now() };
        await store.save(state, { expectedStep: i === 0 ? null : i - 1 });
      }
    };
    close = async () => {
      await store.close();
      await deleteRedisPrefix(ctx);
    };
  } else if (target.startsWith("durable-") || target.startsWith("replay-")) {
    const replay = target.startsWith("replay-");
    const kind = target.slice(target.indexOf("-") + 1);
    const d = await import("../src/durable/index.js");
    const journal =
      kind === "sqlite"
        ? new d.SqliteJournal({ path: path.join(ctx.dir, "journal.db") })
        : kind === "postgres"
          ? new d.PostgresJournal({ url: ctx.databaseUrl, schema: pgSchema(ctx) })
          : new d.RedisJournal({ url: ctx.redisUrl, keyPrefix: redisPrefix(ctx) });
    const wf = async () => {
      for (let i = 0; i < n; i++) await d.step("llm", () => pool[i % pool.length] as never);
      if (replay) await d.waitForSignal("done");
      return null;
    };
    const runId = `profile-${ctx.id}`;
    if (replay) {
      // Recorded once (not profiled); each profiled op replays its n steps up to the wait.
      await d.runDurable(runId, wf, { journal, input: {} });
      ops = 20;
      unit = `replay of ${n} steps`;
      run = async () => {
        for (let r = 0; r < ops; r++) await d.runDurable(runId, wf, { journal });
      };
    } else {
      unit = "step";
      run = async () => void (await d.runDurable(runId, wf, { journal, input: {} }));
    }
    close = async () => {
      await journal.close();
      if (kind === "postgres") await dropPostgresSchema(ctx.databaseUrl, pgSchema(ctx));
      if (kind === "redis") await deleteRedisPrefix(ctx);
    };
  } else {
    const load = target.startsWith("load-");
    const family = load ? target.slice(5) : target;
    const spec = (await backendSpecs()).find((s) => s.family === family);
    if (!spec) throw new Error(`unknown store ${family}`);
    const backend = await spec.make(ctx);
    const agent = newBenchAgent(promptText(1024));
    agent.history.push(pool[0]!);
    await agent.saveState("profile", { backend });
    const saves = async () => {
      for (let i = 1; i < n; i++) {
        agent.history.push(pool[i % pool.length]!);
        await agent.saveState("profile");
      }
    };
    if (load) {
      // Saved once (not profiled); each profiled op is a loadState of the n messages.
      await saves();
      ops = 10;
      unit = `loadState of ${n} messages`;
      run = async () => {
        for (let r = 0; r < ops; r++) await loadState("profile", { backend });
      };
    } else run = saves;
    close = async () => {
      await backend.close?.();
      await spec.cleanup?.(ctx);
    };
  }
  let text = "";
  try {
    await session.post("Profiler.start");
    const t0 = performance.now();
    await run();
    const wallUs = (performance.now() - t0) * 1000;
    const { profile } = await session.post("Profiler.stop");
    // Printed after the cleanup, so a closed stdout (`| head`) cannot leave a schema or keys behind.
    text = report(profile as unknown as CpuProfile, wallUs, ops, unit);
    const save = value("--save");
    if (save) writeFileSync(save, JSON.stringify(profile));
  } finally {
    session.disconnect();
    await close();
    rmSync(ctx.dir, { recursive: true, force: true });
  }
  console.log(text);
}

await main();
