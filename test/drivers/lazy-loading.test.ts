/**
 * Database and queue drivers load when a store needs them, not on import:
 * importing any built entry (the main one, `/sqlite`, `/redis`, `/postgres`,
 * `/workflow`, `/durable`) in a fresh `node` loads none of `pg`, `ioredis`,
 * `bullmq`, `better-sqlite3` (optional peers: an app may not have them); constructing a
 * Redis component loads ioredis, a queue loads bullmq. Read from the CJS
 * module cache, where a CJS package lands even when imported from ESM, so a
 * static import anywhere in the graph is caught. (`npm test` builds first.)
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const DRIVERS = ["pg", "ioredis", "bullmq", "better-sqlite3"] as const;
type Driver = (typeof DRIVERS)[number];

/**
 * Runs `node` on a module script that imports `entry` (bound to `mod`), runs
 * `then`, and reports which drivers the process has loaded.
 */
function loadedAfter(entry: string, then = ""): Record<Driver, boolean> {
  const file = path.join(ROOT, "dist", entry);
  expect(existsSync(file), `dist/${entry} missing: run npm run build`).toBe(true);
  const script = `
    import { createRequire } from "node:module";
    const mod = await import(${JSON.stringify(pathToFileURL(file).href)});
    ${then}
    const paths = Object.keys(createRequire(import.meta.url).cache);
    const has = (name) => paths.some((p) => p.includes(\`/node_modules/\${name}/\`));
    console.log(JSON.stringify(Object.fromEntries(${JSON.stringify(DRIVERS)}.map((d) => [d, has(d)]))));
    process.exit(0);
  `;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    cwd: ROOT,
    encoding: "utf8",
    env: { ...process.env, REDIS_URL: "redis://127.0.0.1:1" },
    timeout: 30_000,
  });
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout.trim().split("\n").pop() ?? "{}") as Record<Driver, boolean>;
}

describe("drivers load when used", () => {
  const entries = [
    "index.js",
    "backends/sqlite.js",
    "backends/redis.js",
    "backends/postgres.js",
    "workflow/index.js",
    "durable/index.js",
  ];
  for (const entry of entries) {
    for (const driver of DRIVERS) {
      it(`importing dist/${entry} does not load ${driver}`, () => {
        expect(loadedAfter(entry)[driver]).toBe(false);
      });
    }
  }

  it("constructing a RedisJournal loads ioredis (and neither bullmq nor pg)", () => {
    const loaded = loadedAfter("durable/index.js", "await new mod.RedisJournal().close();");
    expect(loaded.ioredis).toBe(true);
    expect(loaded.bullmq).toBe(false);
  });

  it("constructing a SQLiteBackend loads better-sqlite3 (and no other driver)", () => {
    const loaded = loadedAfter("backends/sqlite.js", 'new mod.SQLiteBackend({ path: ":memory:" }).close();');
    expect(loaded).toEqual({ pg: false, ioredis: false, bullmq: false, "better-sqlite3": true });
  });

  it("constructing a RedisHotTier loads ioredis", () => {
    expect(loadedAfter("workflow/index.js", "await new mod.RedisHotTier().close();").ioredis).toBe(true);
  });

  it("constructing a DurableQueue loads bullmq", () => {
    const loaded = loadedAfter("durable/index.js", "await new mod.DurableQueue({ journal: {} }).close();");
    expect(loaded.bullmq).toBe(true);
    expect(loaded.ioredis).toBe(true);
  });
});
