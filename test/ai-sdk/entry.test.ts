/**
 * Importing the built `dumplings-ai/ai-sdk` loads no database or queue driver
 * (a chat store gets its backend instance from the caller). `npm test` builds first.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { expect, it } from "vitest";

const entry = path.resolve(import.meta.dirname, "../../dist/ai-sdk/index.js");

it("importing dist/ai-sdk/index.js loads neither better-sqlite3, pg, ioredis nor bullmq", () => {
  expect(existsSync(entry), "dist/ai-sdk/index.js missing: run npm run build").toBe(true);
  const script = `
    import { createRequire } from "node:module";
    const mod = await import(${JSON.stringify(pathToFileURL(entry).href)});
    if (typeof mod.createChatStore !== "function") throw new Error("no createChatStore");
    const paths = Object.keys(createRequire(import.meta.url).cache);
    console.log(JSON.stringify(["better-sqlite3", "pg", "ioredis", "bullmq"].filter((d) => paths.some((p) => p.includes("/node_modules/" + d + "/")))));
  `;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 30_000 });
  expect(r.status, r.stderr).toBe(0);
  expect(JSON.parse(r.stdout.trim())).toStrictEqual([]);
});
