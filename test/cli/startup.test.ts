/**
 * `dumplings` starts without loading what it does not run (issue 23: every
 * command, `--help` included, took 1.7–2.4 s because the CLI imported every
 * command's module — backends, zod, the AI SDK, drivers — before parsing).
 * The root knows the commands from a table (src/cli/command-table.ts); this
 * checks the table against the real commands, and, with module hooks that
 * record every module a start loads, that `--help` loads no command module
 * and `ls` only its own, and that `ls` on an empty store loads no zod, codec,
 * table widths or other backend (what kept it above 300 ms). `npm run bench`
 * measures the start-up times.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { Help } from "commander";
import { afterAll, describe, expect, it } from "vitest";
import { COMMANDS, commandOnLine } from "../../src/cli/command-table.js";
import { durableCommands } from "../../src/cli/durable-commands.js";
import { programArgs, ROOT } from "./run-cli.js";

const rootUrl = pathToFileURL(ROOT).href.replace(/\/?$/, "/");
const work = mkdtempSync(path.join(tmpdir(), "dumplings-startup-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** The modules (file URLs below src/ or dist/, and packages) one CLI start loads. */
function modulesLoaded(args: string[]): { loaded: string[]; stdout: string; stderr: string } {
  const log = path.join(work, `loaded-${Math.random().toString(36).slice(2)}.txt`);
  const hooks = path.join(work, "hooks.mjs");
  writeFileSync(
    hooks,
    `import { appendFileSync } from "node:fs";
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  appendFileSync(${JSON.stringify(log)}, r.url + "\\n");
  return r;
}`,
  );
  const register = path.join(work, "register.mjs");
  writeFileSync(
    register,
    `import { register } from "node:module"; register(${JSON.stringify(pathToFileURL(hooks).href)});`,
  );
  writeFileSync(log, "");
  const r = spawnSync(
    process.execPath,
    ["--import", pathToFileURL(register).href, ...programArgs("cli/index"), ...args],
    {
      cwd: ROOT,
      encoding: "utf8",
    },
  );
  expect(r.status, r.stderr).toBe(0);
  const loaded = readFileSync(log, "utf8")
    .split("\n")
    .filter((u) => u.startsWith("file:"))
    .map((u) => u.replace(rootUrl, ""));
  return { loaded, stdout: r.stdout, stderr: r.stderr };
}

const heavy =
  /(^|\/)(src|dist)\/(cli\/commands|cli\/chat|cli\/ui|cli\/durable-commands|cli\/workflow-commands|cli\/backend|agent|backends|durable|workflow)\b|node_modules\/(zod|ai|@ai-sdk|better-sqlite3|ioredis|pg)\//;

describe("the command table", () => {
  it("lists every command with the term and description of the real command", async () => {
    const help = new Help();
    for (const entry of COMMANDS) {
      const real = await entry.load();
      expect(real.name()).toBe(entry.name);
      expect(help.subcommandTerm(real), entry.name).toBe(entry.term);
      expect(real.description()).toBe(entry.description);
    }
    const names = COMMANDS.map((c) => c.name);
    expect(new Set(names).size).toBe(names.length);
    for (const c of durableCommands()) expect(names).toContain(c.name());
  });

  it("finds the command on a command line", () => {
    expect(commandOnLine(["--help"])).toBeUndefined();
    expect(commandOnLine([])).toBeUndefined();
    expect(commandOnLine(["ls", "--dir", "x"])).toBe("ls");
    expect(commandOnLine(["help", "runs"])).toBe("runs");
    expect(commandOnLine(["-h", "workflows", "ls"])).toBe("workflows");
  });
});

describe("what a start loads", () => {
  it("--help loads no command module, store, zod or AI SDK, and lists every command", () => {
    const { loaded, stdout } = modulesLoaded(["--help"]);
    expect(loaded.some((u) => /cli\/index\.(js|ts)$/.test(u))).toBe(true);
    expect(loaded.filter((u) => heavy.test(u))).toEqual([]);
    for (const c of COMMANDS) expect(stdout).toMatch(new RegExp(`^  ${c.term.replace(/[[\]().*+?]/g, "\\$&")}  `, "m"));
  }, 60_000);

  it("ls on an empty store loads ls and the stores, not the other commands or the AI SDK", () => {
    const empty = mkdtempSync(path.join(work, "empty-"));
    const { loaded } = modulesLoaded(["ls", "--dir", empty]);
    expect(loaded.some((u) => heavy.test(u))).toBe(true); // the pattern above does see stores
    expect(loaded.some((u) => /cli\/commands\/ls\.(js|ts)$/.test(u))).toBe(true);
    const others =
      /cli\/(commands\/(show|export|import|rm|convert|gc)|chat|ui|durable-commands|workflow-commands)\.|node_modules\/(ai|@ai-sdk)\//;
    expect(loaded.filter((u) => others.test(u))).toEqual([]);
  }, 60_000);

  it("ls on an empty file store loads no zod, codec, table widths or other backend: about 20 modules", () => {
    // issue 23: zod (95 of the 139 modules `ls` loaded, through the codec's schemas), string-width and the
    // SQLite and memory backends took `ls` on an empty store past 300 ms; listing keys needs none of them.
    const empty = mkdtempSync(path.join(work, "empty-"));
    const { loaded, stderr } = modulesLoaded(["ls", "--dir", empty]);
    expect(stderr).toContain("no sessions in");
    expect(loaded.some((u) => /backends\/file\/index\.(js|ts)$/.test(u))).toBe(true);
    const unneeded =
      /node_modules\/(zod|string-width|better-sqlite3)\/|(src|dist)\/(core\/(codec\/|(state|messages)\.)|backends\/(sqlite|memory|registry|stored)\.)/;
    expect(loaded.filter((u) => unneeded.test(u))).toEqual([]);
    // A ceiling with room to spare (20 today, 139 before): a new static import of something heavy crosses it.
    // (tsx's own modules, when the CLI runs from src/, are not the CLI's.)
    const own = new Set(loaded.filter((u) => !/node_modules\/(tsx|esbuild)\//.test(u)));
    expect(own.size).toBeLessThanOrEqual(30);
  }, 60_000);

  it("ls --long on a stored session loads the codec (and zod) and the table widths when it reads", () => {
    const dir = mkdtempSync(path.join(work, "one-"));
    const from = path.join(work, "one.json");
    writeFileSync(from, JSON.stringify([{ role: "user", content: "hi" }]));
    const imported = spawnSync(process.execPath, [...programArgs("cli/index"), "import", from, "--dir", dir], {
      cwd: ROOT,
      encoding: "utf8",
    });
    expect(imported.status, imported.stderr).toBe(0);
    const { loaded, stdout } = modulesLoaded(["ls", "--long", "--dir", dir]);
    expect(stdout).toMatch(/^one\s+\S+\s+openai\s+1\s+/m);
    for (const m of [/core\/codec\//, /node_modules\/zod\//, /node_modules\/string-width\//]) {
      expect(
        loaded.some((u) => m.test(u)),
        String(m),
      ).toBe(true);
    }
  }, 60_000);
});
