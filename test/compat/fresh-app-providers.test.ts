/**
 * Fresh applications (issue 23): the packed library installed beside the `ai`
 * major an app uses, on the Node it runs — Node 20 + ai@6, Node 22 + ai@6 and
 * Node 22 + ai@7 (Node 22 from the compat/ai7 bed, scripts/compat-ai7.sh).
 * Each app runs test/compat/fresh-app/app.mjs: `BaseAgent` against the
 * project's local model server with a tool whose parameters are the app's
 * zod 3 schema, then its zod 4 schema (a zod 4 that is not the library's
 * copy), and an `AnthropicAgent` whose provider package is missing or of the
 * major the app's `ai` cannot call: a typed error naming the install command,
 * with no request sent.
 *
 * The tarball is `npm pack` of the built worktree (`npm run build` first);
 * each app is installed once (`--prefer-offline`, no install scripts: no
 * native driver is used here).
 */
import { execFile } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SERVICES_REQUIRED } from "../helpers/services.js";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "../..");
const node22 = path.join(root, "compat/ai7/node_modules/.bin/node");
const ai7Ready = existsSync(node22) && existsSync(path.join(root, "compat/ai7/node_modules/ai/package.json"));
const npm = process.platform === "win32" ? "npm.cmd" : "npm";

interface AppOutput {
  node: string;
  ai: string;
  zod: string;
  zod3: { text: string; calls: unknown[]; sent: Record<string, unknown> };
  zod4: { text: string; calls: unknown[]; sent: Record<string, unknown> };
  anthropic: { name?: string; code?: string; message?: string; requests?: number; ok?: string };
}

interface App {
  /** The Node binary the app runs on. */
  node: string;
  /** Its dependencies besides the library, zod 3 and zod 4. */
  deps: Record<string, string>;
}

const apps = {
  "node20-ai6": { node: process.execPath, deps: { ai: "^6.0.0", "@ai-sdk/openai-compatible": "^2.0.0" } },
  // a provider of the newest major beside ai@6: the mismatch npm used to install by itself
  "node22-ai6": {
    node: node22,
    deps: { ai: "^6.0.0", "@ai-sdk/openai-compatible": "^2.0.0", "@ai-sdk/anthropic": "^4.0.0" },
  },
  "node22-ai7": { node: node22, deps: { ai: "^7.0.0", "@ai-sdk/openai-compatible": "^3.0.0" } },
} satisfies Record<string, App>;
type AppName = keyof typeof apps;

let work: string;
const installed = new Map<AppName, Promise<string>>();

async function install(name: AppName, tarball: string): Promise<string> {
  const dir = path.join(work, name);
  mkdirSync(dir);
  writeFileSync(
    path.join(dir, "package.json"),
    JSON.stringify({
      name: `fresh-${name}`,
      private: true,
      type: "module",
      dependencies: { "dumplings-ai": `file:${tarball}`, ...apps[name].deps, zod: "^3.25.0", zod4: "npm:zod@^4.1.0" },
    }),
  );
  copyFileSync(path.join(root, "test/compat/fresh-app/app.mjs"), path.join(dir, "app.mjs"));
  await run(npm, ["install", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"], {
    cwd: dir,
    timeout: 300_000,
  });
  return dir;
}

async function runApp(name: AppName): Promise<AppOutput> {
  const dir = await (installed.get(name) as Promise<string>);
  const { stdout } = await run(apps[name].node, ["app.mjs"], { cwd: dir, timeout: 60_000 });
  return JSON.parse(stdout.trim().split("\n").at(-1) ?? "") as AppOutput;
}

beforeAll(async () => {
  work = mkdtempSync(path.join(tmpdir(), "dumplings-fresh-"));
  const pack = path.join(work, "pack");
  mkdirSync(pack);
  // the built dist as published (no prepare: the build is the caller's, as in ai-sdk-majors.test.ts)
  await run(npm, ["pack", "--ignore-scripts", "--pack-destination", pack, "--loglevel=error"], {
    cwd: root,
    timeout: 120_000,
  });
  const tarball = path.join(pack, readdirSync(pack).find((f) => f.endsWith(".tgz")) as string);
  for (const name of Object.keys(apps) as AppName[]) {
    if (apps[name].node === node22 && !ai7Ready) continue;
    const pending = install(name, tarball);
    pending.catch(() => {}); // reported by the test that awaits it
    installed.set(name, pending);
  }
  await Promise.allSettled(installed.values());
}, 600_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

function expectToolsCalled(out: AppOutput, ai: string, node: string): void {
  expect(out.ai.split(".")[0]).toBe(ai);
  expect(out.node.split(".")[0]).toBe(node);
  expect(out.zod.split(".")[0]).toBe("3");
  expect(out.zod3.text).toBe("zod 3 ok");
  expect(out.zod3.calls).toEqual([{ city: "Oslo", days: 2 }]);
  expect(out.zod4.text).toBe("zod 4 ok");
  expect(out.zod4.calls).toEqual([{ city: "Bergen", days: 3 }]);
  // the model was sent a JSON Schema, not zod's internals
  for (const sent of [out.zod3.sent, out.zod4.sent]) {
    expect(sent).toMatchObject({
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city", "days"],
    });
    expect(JSON.stringify(sent)).not.toContain("_def");
  }
}

describe("a fresh app with the packed library", () => {
  it("Node 20 + ai@6: zod 3 and zod 4 tools are called with their arguments; a missing provider names its install", async () => {
    const out = await runApp("node20-ai6");
    expectToolsCalled(out, "6", "v20");
    expect(out.anthropic).toEqual({
      name: "MissingPeerError",
      code: "MISSING_PEER",
      message: expect.stringContaining("npm i @ai-sdk/anthropic@3"),
      requests: 0,
    });
  }, 600_000);

  if (!ai7Ready && SERVICES_REQUIRED) {
    it("Node 22: the compat/ai7 bed is installed", () => {
      throw new Error("compat/ai7 is not installed: run `bash scripts/compat-ai7.sh` (.ci/run does)");
    });
  }

  it.skipIf(!ai7Ready)(
    "Node 22 + ai@6: the tools work; @ai-sdk/anthropic@4 (spec v4) is a ProviderVersionError naming @3",
    async () => {
      const out = await runApp("node22-ai6");
      expectToolsCalled(out, "6", "v22");
      expect(out.anthropic).toMatchObject({ name: "ProviderVersionError", code: "PROVIDER_VERSION", requests: 0 });
      expect(out.anthropic.message).toMatch(/@ai-sdk\/anthropic@4\.\S+ implements model specification v4/);
      expect(out.anthropic.message).toMatch(/ai@6\.\S+ cannot call/);
      expect(out.anthropic.message).toContain("npm i @ai-sdk/anthropic@3");
    },
    600_000,
  );

  it.skipIf(!ai7Ready)(
    "Node 22 + ai@7: the tools work; a missing provider names the ai@7 major",
    async () => {
      const out = await runApp("node22-ai7");
      expectToolsCalled(out, "7", "v22");
      expect(out.anthropic).toMatchObject({ name: "MissingPeerError", code: "MISSING_PEER", requests: 0 });
      expect(out.anthropic.message).toContain("npm i @ai-sdk/anthropic@4");
    },
    600_000,
  );
});
