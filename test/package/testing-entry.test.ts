/**
 * `dumplings-ai/testing` loads without vitest: the conformance suites take the
 * caller's test functions instead of importing a runner, so `startModelServer`,
 * the samples and the state builders work in any process.
 *
 * Two checks on the built package (`npm run build` first, as `npm test` does):
 * no module reachable from `dist/testing/index.js` imports vitest in its
 * emitted JavaScript; and a child `node` whose module resolution refuses
 * `vitest` (and `vite`, `@vitest/*`) imports the entry, starts the model
 * server, loads the samples and registers both suites (one skipped) with a recording
 * test API. A suite that imported vitest at top level fails both.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const entry = path.join(root, "dist/testing/index.js");
const mainEntry = path.join(root, "dist/index.js");

/** A module specifier that names vitest or its toolchain. */
const RUNNER = /^(?:vitest|vite|@vitest\/[^/]+)(?:\/.*)?$/;

/**
 * Every static import, re-export, dynamic import() and require() of a specifier literal in the
 * code of `js` (comments, such as a JSDoc example importing vitest, are left out).
 */
function specifiers(js: string): string[] {
  const code = js.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
  const out: string[] = [];
  const patterns = [
    /\b(?:import|export)\s[^;"'`]*?\bfrom\s*["']([^"']+)["']/g,
    /\bimport\s*["']([^"']+)["']/g,
    /\bimport\s*\(\s*["']([^"']+)["']\s*\)/g,
    /\brequire\s*\(\s*["']([^"']+)["']\s*\)/g,
  ];
  for (const re of patterns) for (const m of code.matchAll(re)) out.push(m[1] as string);
  return out;
}

/** The built modules reachable from `start` through relative imports, with the bare specifiers each imports. */
function moduleGraph(start: string): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const todo = [start];
  while (todo.length > 0) {
    const file = todo.pop() as string;
    if (graph.has(file)) continue;
    const specs = specifiers(readFileSync(file, "utf8"));
    graph.set(
      file,
      specs.filter((s) => !s.startsWith(".")),
    );
    for (const s of specs) if (s.startsWith(".")) todo.push(path.resolve(path.dirname(file), s));
  }
  return graph;
}

/**
 * Registered before the child's script runs: resolving vitest (ESM import or CommonJS
 * require) throws, as it would where vitest is not installed.
 */
const BLOCK_RUNNER = `
import Module, { register } from "node:module";
const blocked = ${RUNNER.toString()};
const hooks = \`export async function resolve(specifier, context, next) {
  if (${RUNNER.toString().replaceAll("\\", "\\\\")}.test(specifier)) {
    throw Object.assign(new Error("Cannot find package '" + specifier + "' (blocked by the test)"), { code: "ERR_MODULE_NOT_FOUND" });
  }
  return next(specifier, context);
}\`;
register("data:text/javascript," + encodeURIComponent(hooks));
const resolveFilename = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (blocked.test(request)) throw Object.assign(new Error("Cannot find module '" + request + "' (blocked by the test)"), { code: "MODULE_NOT_FOUND" });
  return resolveFilename.call(this, request, ...rest);
};
`;

/** Imports the testing entry, uses it, and registers each suite with a test API that records titles. */
const CHILD = `
let runnerBlocked = false;
try { await import("vitest"); } catch (e) { runnerBlocked = e.code === "ERR_MODULE_NOT_FOUND"; }
const t = await import(${JSON.stringify(pathToFileURL(entry).href)});
const { MemoryBackend } = await import(${JSON.stringify(pathToFileURL(mainEntry).href)});
const server = await t.startModelServer({ script: [{ text: "hi" }] });
const reply = await fetch(server.url + "/chat/completions", {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hello" }] }),
}).then((r) => r.json());
await server.close();
const titles = [];
const group = (name, body) => { titles.push("group: " + name); body(); };
group.skip = (name) => titles.push("skipped group: " + name);
const test = {
  describe: group,
  it: (name) => titles.push(name),
  expect: () => { throw new Error("expect is only called inside a test"); },
  beforeEach: () => undefined,
  afterEach: () => undefined,
};
t.runBackendConformance("memory", () => new MemoryBackend(), { test, samples: "bundled" });
t.runJournalConformance("none", () => { throw new Error("not called at registration"); }, { test });
t.runJournalConformance("skipped", () => { throw new Error("not called at registration"); }, { test, skip: "no store" });
console.log(JSON.stringify({
  runnerBlocked,
  samples: t.loadSampleConversations({ source: "bundled" }).length,
  reply: reply.choices?.[0]?.message?.content,
  titles,
}));
`;

describe("dumplings-ai/testing without vitest", () => {
  it("no module the built entry reaches imports vitest", () => {
    expect(existsSync(entry), "dist/testing/index.js missing: run npm run build").toBe(true);
    const graph = moduleGraph(entry);
    expect(graph.size).toBeGreaterThan(5);
    const suites = ["conformance.js", "journal-conformance.js"];
    for (const s of suites) expect([...graph.keys()]).toContain(path.join(root, "dist/testing", s));
    const offenders = [...graph].flatMap(([file, bare]) =>
      bare.filter((s) => RUNNER.test(s)).map((s) => `${path.relative(root, file)} imports ${s}`),
    );
    expect(offenders).toEqual([]);
  });

  it("the specifier scan sees every form of import", () => {
    const js = [
      'import { it } from "vitest";',
      'import * as v from "@vitest/runner";',
      'export { a } from "vite";',
      'import "vitest/globals";',
      'await import("vitest");',
      'require("vitest")',
      '/** @example import * as vitest from "vitest"; */',
      '// import { it } from "vitest";',
    ].join("\n");
    expect(specifiers(js).filter((s) => RUNNER.test(s))).toHaveLength(6);
  });

  it("imports, serves a model turn, loads samples and registers the suites where vitest cannot be resolved", () => {
    expect(existsSync(entry), "dist/testing/index.js missing: run npm run build").toBe(true);
    const child = spawnSync(
      process.execPath,
      ["--import", `data:text/javascript,${encodeURIComponent(BLOCK_RUNNER)}`, "--input-type=module", "-e", CHILD],
      { cwd: root, encoding: "utf8", timeout: 60_000 },
    );
    expect(child.stderr).toBe("");
    expect(child.status).toBe(0);
    const out = JSON.parse(child.stdout) as {
      runnerBlocked: boolean;
      samples: number;
      reply: string;
      titles: string[];
    };
    expect(out.runnerBlocked).toBe(true); // the child really cannot load vitest
    expect(out.samples).toBeGreaterThan(0);
    expect(out.reply).toBe("hi");
    expect(out.titles).toContain("group: backend conformance: memory");
    expect(out.titles).toContain("group: journal conformance: none");
    expect(out.titles).toContain("skipped group: journal conformance: skipped (skipped: no store)");
    expect(out.titles.length).toBeGreaterThan(30);
  });
});
