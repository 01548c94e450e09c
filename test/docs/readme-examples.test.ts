/**
 * The README's examples run as written (issue 11 item 18): each code block is
 * read from README.md, its `dumplings-ai` imports pointed at this checkout's
 * sources, and run. The first example runs twice in a fresh directory without
 * a ConflictError; the custom backend passes `runBackendConformance` with the
 * README's own call; the workflow example exits by itself with a hot tier
 * (it closes its store).
 */
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import * as vitest from "vitest";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const { afterAll, describe, expect, it } = vitest;
const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "..", "..");
const readme = readFileSync(path.join(root, "README.md"), "utf8");
const src = (entry: string) => pathToFileURL(path.join(root, "src", entry)).href;

/** The ```ts block of the README whose text contains `marker`. */
function block(marker: string): string {
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
  const found = blocks.filter((b) => b.includes(marker));
  if (found.length !== 1) throw new Error(`README: ${found.length} ts blocks contain ${JSON.stringify(marker)}`);
  return found[0]!;
}

/** Points the package's specifiers at the sources (absolute file URLs, so the file may live anywhere). */
function localImports(code: string): string {
  return code
    .replaceAll('"dumplings-ai/testing"', JSON.stringify(src("testing/index.ts")))
    .replaceAll('"dumplings-ai/workflow"', JSON.stringify(src("workflow/index.ts")))
    .replaceAll('"dumplings-ai"', JSON.stringify(src("index.ts")));
}

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-readme-"));
/** Generated modules vitest imports must sit inside the project. */
const local = path.join(import.meta.dirname, `.generated-${randomUUID()}`);
mkdirSync(local);
afterAll(() => {
  rmSync(tmp, { recursive: true, force: true });
  rmSync(local, { recursive: true, force: true });
});

async function node(file: string, cwd: string, env: NodeJS.ProcessEnv = {}) {
  // tsx resolved from this checkout: the example's folder has no node_modules (.mts: ESM, as the package is).
  return run(process.execPath, ["--import", import.meta.resolve("tsx"), file], {
    cwd,
    env: { ...process.env, DUMPLINGS_PERSISTENCE_BACKEND: "", ...env },
    timeout: 60_000,
  });
}

describe("user docs", () => {
  it("name no internal case numbers (pb-NN)", () => {
    for (const file of ["README.md", "CHANGELOG.md"]) {
      expect(readFileSync(path.join(root, file), "utf8"), file).not.toMatch(/\bpb-\d+/);
    }
  });

  it("the bench finds Redis keys with SCAN, never KEYS", () => {
    for (const file of ["registry.ts", "stores.ts", "run.ts"]) {
      const code = readFileSync(path.join(root, "bench", file), "utf8");
      expect(code, file).not.toMatch(/\.keys\(\s*[`"']|["']KEYS["']/);
    }
  });
});

describe("README examples", () => {
  it("the first example runs again and again without a ConflictError (load or create)", async () => {
    const dir = mkdtempSync(path.join(tmp, "first-"));
    const file = path.join(dir, "first.mts");
    writeFileSync(file, localImports(block('loadState("support-42")')));
    for (const n of [1, 2, 3]) {
      const { stdout } = await node(file, dir, { DUMPLINGS_PERSISTENCE_BACKEND: "file" });
      expect(stdout.trim()).toBe(`support-42 holds ${n} messages`);
    }
  }, 120_000);

  it("the workflow example closes its store: the process exits by itself, Redis hot tier included", async (ctx) => {
    const skip = await redisSkipReason();
    if (skip) return ctx.skip(skip);
    const dir = mkdtempSync(path.join(tmp, "workflow-"));
    const file = path.join(dir, "workflow.mts");
    // As written: the README's stand-in payment client included (a copied example runs).
    writeFileSync(file, localImports(block("new ResumableGraphRunner")));
    try {
      const { stdout } = await node(file, dir, { REDIS_URL }); // execFile's timeout fails the test if it hangs
      expect(stdout).toContain("approve");
    } finally {
      // The example's hot-tier key has no prefix of its own.
      const { Redis } = await import("ioredis");
      const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
      await redis.del("agent:state:order-42");
      await redis.quit();
    }
  }, 120_000);
});

// The custom backend and its conformance call, as the README writes them.
try {
  const mine = path.join(local, "mine.ts");
  writeFileSync(mine, localImports(block("// mine.ts")));
  const suite = path.join(local, "mine.test-suite.ts");
  writeFileSync(
    suite,
    localImports(block("import { createMine }")).replaceAll('"./mine.js"', JSON.stringify("./mine.ts")),
  );
  await import(suite);
} catch (e) {
  rmSync(local, { recursive: true, force: true }); // collection failed: afterAll never runs
  throw e;
}
