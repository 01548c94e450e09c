/**
 * What a user gets from npm: the project is packed (`npm pack` of the built
 * dist) and the tarball installed with real npm into a new app in a temporary
 * directory, with none of the optional peers. One app, installed once, serves
 * every case:
 * - the install compiles nothing and brings no database driver; the README's
 *   first example (file backend) runs;
 * - opening SQLite without better-sqlite3 is a MissingPeerError naming the
 *   install command; after `npm i better-sqlite3@<tested version>` the
 *   README's SQLite variant runs;
 * - `require()` of every entry works from a `.cjs` file (Node >= 20.19);
 * - the README's examples and every entry whose peers are installed
 *   type-check with `strict` and `skipLibCheck: false`, with the project's
 *   TypeScript and no optional peer's types.
 * Needs the npm registry (or npm's cache): `npm install --prefer-offline`.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const requireRoot = createRequire(path.join(root, "package.json"));
const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as {
  exports: Record<string, unknown>;
  peerDependencies: Record<string, string>;
  peerDependenciesMeta: Record<string, { optional?: boolean }>;
};
const lock = JSON.parse(readFileSync(path.join(root, "package-lock.json"), "utf8")) as {
  packages: Record<string, { version?: string }>;
};
/** The versions CI tests: the app installs these. */
const locked = (name: string): string => {
  const v = lock.packages[`node_modules/${name}`]?.version;
  if (!v) throw new Error(`${name} is not in package-lock.json`);
  return v;
};
const SQLITE_VERSION = locked("better-sqlite3");
const optionalPeers = Object.keys(pkg.peerDependencies).filter((n) => pkg.peerDependenciesMeta[n]?.optional);
const DRIVERS = ["better-sqlite3", "pg", "ioredis", "bullmq", "hono", "@hono/node-server"];

let work: string;
let app: string;
let installLog = "";

/** Runs npm in `cwd`; returns its stdout and stdout + stderr, throws with them on failure. */
function npm(cwd: string, args: string[], timeoutMs = 600_000): { stdout: string; out: string } {
  const r = spawnSync("npm", args, { cwd, encoding: "utf8", timeout: timeoutMs, env: { ...process.env, CI: "1" } });
  const out = `${r.stdout ?? ""}${r.stderr ?? ""}`;
  if (r.status !== 0) throw new Error(`npm ${args.join(" ")} failed (${r.status ?? r.signal}):\n${out}`);
  return { stdout: r.stdout ?? "", out };
}

/** Runs a script of the app with node. */
function run(file: string, env: NodeJS.ProcessEnv = {}): { status: number | null; out: string } {
  const r = spawnSync(process.execPath, [file], {
    cwd: app,
    encoding: "utf8",
    timeout: 60_000,
    env: { ...process.env, ...env },
  });
  return { status: r.status, out: `${r.stdout ?? ""}${r.stderr ?? ""}` };
}

/**
 * better-sqlite3 downloads a prebuilt addon (prebuild-install) and compiles
 * from source (node-gyp, minutes) only when the download fails, as on a
 * machine without access to GitHub's release files. prebuild-install looks in
 * npm's cache (`<cache>/_prebuilds`) first: put there the addon the project's
 * own `npm ci` built, same version and platform, so the install below takes
 * the download path a user with network access takes, in seconds.
 */
function seedSqlitePrebuild(): void {
  const addon = path.join(root, "node_modules", "better-sqlite3", "build", "Release", "better_sqlite3.node");
  if (!existsSync(addon)) return;
  const util = requireRoot("prebuild-install/util") as {
    getDownloadUrl(opts: object): string;
    cachedPrebuild(url: string): string;
  };
  const cache = execFileSync("npm", ["config", "get", "cache"], { encoding: "utf8" }).trim();
  const previous = process.env.npm_config_cache;
  process.env.npm_config_cache = cache;
  try {
    const url = util.getDownloadUrl({
      pkg: requireRoot("better-sqlite3/package.json"),
      runtime: "node",
      abi: process.versions.modules,
      platform: process.platform,
      arch: process.arch,
      libc: "",
      "tag-prefix": "v",
    });
    const target = util.cachedPrebuild(url);
    if (existsSync(target)) return;
    mkdirSync(path.dirname(target), { recursive: true });
    execFileSync("tar", [
      "-czf",
      target,
      "-C",
      path.join(root, "node_modules", "better-sqlite3"),
      "build/Release/better_sqlite3.node",
    ]);
  } finally {
    if (previous === undefined) delete process.env.npm_config_cache;
    else process.env.npm_config_cache = previous;
  }
}

beforeAll(() => {
  if (!existsSync(path.join(root, "dist", "index.js"))) throw new Error("dist/ is missing: run npm run build");
  work = mkdtempSync(path.join(tmpdir(), "dumplings-fresh-"));
  const packed = JSON.parse(npm(root, ["pack", "--json", "--ignore-scripts", "--pack-destination", work]).stdout) as {
    filename: string;
  }[];
  const tarball = path.join(work, packed[0]!.filename);
  app = path.join(work, "app");
  mkdirSync(app);
  writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "fresh-app", private: true, type: "module" }));
  // the tarball and the Node types a TypeScript app has; nothing else
  installLog = npm(app, [
    "install",
    "--prefer-offline",
    "--no-audit",
    "--no-fund",
    "--foreground-scripts",
    tarball,
    `@types/node@${locked("@types/node")}`,
  ]).out;
}, 900_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

/** The README's first example, as written (file backend, the default). */
const FILE_QUICK_START = (() => {
  const readme = readFileSync(path.join(root, "README.md"), "utf8");
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
  const found = blocks.filter((b) => b.includes('await agent.saveState("support-42");'));
  if (found.length !== 1) throw new Error(`README: ${found.length} ts blocks hold the first example`);
  return found[0]!;
})();

/** The README's SQLite variant of it (the sentence below the example). */
const SQLITE_QUICK_START = `import { BaseAgent, loadState, saveState, StateNotFoundError } from "dumplings-ai";

let agent: BaseAgent;
try {
  agent = await loadState("support-42", { backend: "sqlite" });
} catch (e) {
  if (!(e instanceof StateNotFoundError)) throw e;
  agent = new BaseAgent({ name: "support", apiKeyEnv: "OPENAI_API_KEY", modelName: "gpt-4o-mini" });
}
agent.history.push({ role: "user", content: agent.history.length === 0 ? "hi" : "still there?" });
await saveState(agent, "support-42", { backend: "sqlite" });
console.log(\`support-42 holds \${agent.history.length} messages in SQLite\`);
`;

const SQLITE_BACKEND = `import { SQLiteBackend } from "dumplings-ai/sqlite";
import { MissingPeerError } from "dumplings-ai";

try {
  const backend = new SQLiteBackend({ path: "sub/agents.db" });
  backend.close();
  console.log("opened");
} catch (e) {
  if (!(e instanceof MissingPeerError)) throw e;
  console.log(JSON.stringify({ code: e.code, package: e.package, install: e.install, message: e.message }));
}
`;

describe("a fresh app installing the packed tarball", () => {
  it("installs no optional peer and compiles nothing", () => {
    const nm = path.join(app, "node_modules");
    for (const name of DRIVERS) expect(existsSync(path.join(nm, name)), `${name} installed`).toBe(false);
    for (const name of optionalPeers) expect(existsSync(path.join(nm, name)), `${name} installed`).toBe(false);
    // node-gyp leaves build/config.gypi in a package it compiled, and prints "gyp" with --foreground-scripts
    const compiled = readdirSync(nm, { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith("config.gypi"));
    expect(compiled).toEqual([]);
    expect(installLog).not.toMatch(/\bgyp\b/);
    // the tarball has no source maps and no demo
    const dist = path.join(nm, "dumplings-ai", "dist");
    const files = readdirSync(dist, { recursive: true, encoding: "utf8" });
    expect(files.filter((f) => f.endsWith(".map"))).toEqual([]);
    expect(existsSync(path.join(dist, "demo"))).toBe(false);
  });

  it("runs the README's first example (file backend), twice", () => {
    writeFileSync(path.join(app, "quick-start.mjs"), stripTypes(FILE_QUICK_START));
    const first = run("quick-start.mjs");
    expect(first.out).toContain("support-42 holds 1 messages");
    expect(first.status).toBe(0);
    const second = run("quick-start.mjs");
    expect(second.out).toContain("support-42 holds 2 messages");
    expect(existsSync(path.join(app, ".dumplingsAI_sessions", "support-42.duas"))).toBe(true);
  });

  it("opening SQLite without better-sqlite3 is a MissingPeerError naming the install command, and creates nothing", () => {
    writeFileSync(path.join(app, "sqlite-backend.mjs"), SQLITE_BACKEND);
    const r = run("sqlite-backend.mjs");
    expect(r.status, r.out).toBe(0);
    const e = JSON.parse(r.out.trim().split("\n").at(-1)!) as Record<string, string>;
    expect(e.code).toBe("MISSING_PEER");
    expect(e.package).toBe("better-sqlite3");
    expect(e.install).toBe(`npm i better-sqlite3@${pkg.peerDependencies["better-sqlite3"]}`);
    expect(e.message).toContain(e.install);
    expect(existsSync(path.join(app, "sub"))).toBe(false);
  });

  it("the CLI works on .duas files; a command needing a missing driver names the install command", () => {
    const cli = (args: string[]) => {
      const r = spawnSync(path.join(app, "node_modules", ".bin", "dumplings"), args, {
        cwd: app,
        encoding: "utf8",
        timeout: 60_000,
      });
      return { status: r.status, out: `${r.stdout ?? ""}${r.stderr ?? ""}` };
    };
    const ls = cli(["ls"]);
    expect(ls.status, ls.out).toBe(0);
    expect(ls.out).toContain("support-42");
    writeFileSync(path.join(app, "cli.db"), ""); // a store that exists: the command gets as far as the driver
    const sqlite = cli(["ls", "--backend", "sqlite:./cli.db"]);
    expect(sqlite.status).not.toBe(0);
    expect(sqlite.out).toContain(`npm i better-sqlite3@${pkg.peerDependencies["better-sqlite3"]}`);
    const ui = cli(["ui", "--no-open", "--port", "0"]);
    expect(ui.status).not.toBe(0);
    expect(ui.out).toContain(`npm i hono@${pkg.peerDependencies.hono}`);
  });

  it("require() loads every entry from a .cjs file", () => {
    const subpaths = Object.keys(pkg.exports).filter((s) => s !== "./package.json");
    const names = subpaths.map((s) => (s === "." ? "dumplings-ai" : `dumplings-ai/${s.slice(2)}`));
    writeFileSync(
      path.join(app, "require.cjs"),
      `const out = {};
for (const name of ${JSON.stringify(names)}) {
  try { out[name] = Object.keys(require(name)).length; }
  catch (e) { out[name] = { code: e.code, message: String(e.message).split("\\n")[0] }; }
}
console.log(JSON.stringify(out));
`,
    );
    const r = run("require.cjs");
    expect(r.status, r.out).toBe(0);
    const out = JSON.parse(r.out.trim().split("\n").at(-1)!) as Record<
      string,
      number | { code: string; message: string }
    >;
    for (const name of names) {
      const got = out[name];
      if (typeof got === "number") {
        expect(got, name).toBeGreaterThan(0);
        continue;
      }
      // only an entry built on an optional peer that is not installed may fail, and only by naming it
      const peer = optionalPeers.find((p) => got?.message.includes(`'${p}'`) || got?.message.includes(`"${p}"`));
      expect(got?.code, `${name}: ${got?.message}`).toMatch(/MODULE_NOT_FOUND/);
      expect(peer, `${name}: ${got?.message}`).toBeDefined();
    }
    expect(out["dumplings-ai"]).toBeGreaterThan(0);
    expect(out["dumplings-ai/sqlite"]).toBeGreaterThan(0);
  });

  it("type-checks the README's examples and the entries under strict and skipLibCheck: false", () => {
    writeFileSync(path.join(app, "quick-start.ts"), FILE_QUICK_START);
    writeFileSync(path.join(app, "quick-start-sqlite.ts"), SQLITE_QUICK_START);
    writeFileSync(path.join(app, "sqlite-backend.ts"), SQLITE_BACKEND);
    // every entry whose peers the app has (langgraph, openai-agents and testing are for apps with their framework)
    const entries = ["", "/sqlite", "/redis", "/postgres", "/workflow", "/durable", "/ai-sdk"];
    writeFileSync(
      path.join(app, "entries.ts"),
      `${entries.map((e, i) => `import * as e${i} from "dumplings-ai${e}";`).join("\n")}\nexport const all = [${entries.map((_, i) => `e${i}`).join(", ")}];\n`,
    );
    writeFileSync(
      path.join(app, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          skipLibCheck: false,
          module: "nodenext",
          moduleResolution: "nodenext",
          target: "es2023",
          lib: ["es2023"],
          types: ["node"],
          noEmit: true,
        },
        include: ["*.ts"],
      }),
    );
    const tsc = requireRoot.resolve("typescript/bin/tsc");
    const r = spawnSync(process.execPath, [tsc, "-p", "tsconfig.json"], {
      cwd: app,
      encoding: "utf8",
      timeout: 300_000,
    });
    const errors = `${r.stdout}${r.stderr}`.split("\n").filter((l) => /error TS\d+/.test(l));
    // The AI SDK's own declarations (reached through the main entry while it names `ai`'s types) need
    // lib "dom" and @types/json-schema under skipLibCheck: false: their packaging, not ours. Everything
    // else, ours and the app's, must compile.
    const foreign = /^node_modules\/(ai|@ai-sdk\/[^/]+)\//;
    expect(errors.filter((l) => !foreign.test(l))).toEqual([]);
    expect(r.status === 0 || errors.length > 0).toBe(true);
  });

  it("after `npm i better-sqlite3@<tested version>`, the README's SQLite variant runs", () => {
    seedSqlitePrebuild();
    const log = npm(app, [
      "install",
      "--prefer-offline",
      "--no-audit",
      "--no-fund",
      `better-sqlite3@${SQLITE_VERSION}`,
    ]).out;
    expect(log).not.toMatch(/npm error/);
    writeFileSync(path.join(app, "quick-start-sqlite.mjs"), stripTypes(SQLITE_QUICK_START));
    const first = run("quick-start-sqlite.mjs");
    expect(first.out).toContain("support-42 holds 1 messages in SQLite");
    expect(first.status).toBe(0);
    expect(run("quick-start-sqlite.mjs").out).toContain("support-42 holds 2 messages in SQLite");
    expect(run("sqlite-backend.mjs").out.trim()).toBe("opened");
  }, 900_000);
});

/** The examples' only TypeScript is `let agent: BaseAgent;`: the JavaScript the app runs. */
function stripTypes(ts: string): string {
  return ts.replace("let agent: BaseAgent;", "let agent;");
}
