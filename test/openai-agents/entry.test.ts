/**
 * Importing the built `dumplings-ai/openai-agents` loads neither the Agents SDK (an optional
 * peer: the module uses only its types) nor a database or queue driver (a SPEC store opens its
 * driver on first use). `npm test` builds first.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { expect, it } from "vitest";

const entry = path.resolve(import.meta.dirname, "../../dist/openai-agents/index.js");

it("importing dist/openai-agents/index.js loads no @openai/* package, better-sqlite3, pg, ioredis nor bullmq", () => {
  expect(existsSync(entry), "dist/openai-agents/index.js missing: run npm run build").toBe(true);
  // an ESM resolve hook refuses those packages (ESM imports), the require cache shows CommonJS loads
  const hook = `export async function resolve(s, c, next) {
    if (s.startsWith("@openai/") || ["better-sqlite3", "pg", "ioredis", "bullmq"].includes(s)) throw new Error("imported " + s);
    return next(s, c);
  }`;
  const script = `
    import { createRequire, register } from "node:module";
    register("data:text/javascript," + encodeURIComponent(${JSON.stringify(hook)}));
    const mod = await import(${JSON.stringify(pathToFileURL(entry).href)});
    const session = new mod.DumplingsSession({ sessionId: "s", store: "memory:" });
    if (session.key !== "agents-s") throw new Error("bad key " + session.key);
    const paths = Object.keys(createRequire(import.meta.url).cache);
    console.log(JSON.stringify(["better-sqlite3", "pg", "ioredis", "bullmq", "@openai"].filter((d) => paths.some((p) => p.includes("/node_modules/" + d + "/")))));
  `;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    encoding: "utf8",
    timeout: 30_000,
    cwd: path.dirname(entry),
  });
  expect(r.status, r.stderr).toBe(0);
  expect(JSON.parse(r.stdout.trim())).toStrictEqual([]);
});
