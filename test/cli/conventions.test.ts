/**
 * Command-line conventions (issue 11, item 17): with `--json`, an error is
 * one JSON document on stdout carrying its code (the usual line stays on
 * stderr); `import -` reads stdin and `export -o -` writes stdout; the demo
 * scripts rebuild `dist/` only when `src/` is newer.
 */
import { spawnSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeState } from "../../src/core/codec/encode.js";
import { makeState } from "../../src/testing/states.js";
import { ROOT, runCli } from "./run-cli.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-cli-conv-"));
const dir = path.join(tmp, "sessions");
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const state = makeState([
  { role: "user", content: "line one\nline two = [x] # not a comment" },
  { role: "assistant", content: "ünïcödé ✓" },
]);

beforeAll(() => {
  const file = path.join(tmp, "seed.duas");
  writeFileSync(file, encodeState(state));
  const r = runCli(["import", file, "--dir", dir, "-q"]);
  if (r.code !== 0) throw new Error(r.stderr);
});

/** One JSON document on stdout holding `{ error: { code, exitCode } }`, and the one line on stderr. */
function expectJsonError(r: { code: number | null; stdout: string; stderr: string }, code: string, exit: number): void {
  expect(r.code, r.stderr).toBe(exit);
  const doc = JSON.parse(r.stdout) as { error: { code: string; message: string; exitCode: number } };
  expect(doc.error).toMatchObject({ code, exitCode: exit });
  expect(doc.error.message.length).toBeGreaterThan(0);
  expect(r.stderr.trimEnd().split("\n")).toHaveLength(1);
  expect(r.stderr).toMatch(new RegExp(`\\(${code}\\)$`, "m"));
}

describe("--json errors", () => {
  it("are JSON on stdout with the code, for every kind of failure", () => {
    expectJsonError(runCli(["show", "no-such-key", "--dir", dir, "--json"]), "STATE_NOT_FOUND", 3);
    expectJsonError(runCli(["ls", "--dir", path.join(tmp, "nope"), "--json"]), "INPUT_NOT_FOUND", 3);
    expectJsonError(runCli(["ls", "--dir", dir, "--json", "--bogus-option"]), "USAGE", 2);
    expectJsonError(runCli(["gc", "--older-than", "soon", "--dir", dir, "--json"]), "USAGE", 2);
    expectJsonError(runCli(["runs", "--journal", "sqlite:nope.db", "--json"], { cwd: tmp }), "INPUT_NOT_FOUND", 3);
    expectJsonError(runCli(["workflows", "ls", "--store", "ftp:x", "--json"]), "USAGE", 2);
  });

  it("a command that reports and fails prints one JSON document (rm of a missing key)", () => {
    const r = runCli(["rm", "missing-key", "--dir", dir, "--json"]);
    expect(r.code).toBe(3);
    expect(JSON.parse(r.stdout)).toMatchObject({
      deleted: [],
      missing: ["missing-key"],
      error: { code: "STATE_NOT_FOUND" },
    });
  });

  it("without --json, stdout stays empty on an error", () => {
    const r = runCli(["show", "no-such-key", "--dir", dir]);
    expect(r.code).toBe(3);
    expect(r.stdout).toBe("");
  });
});

describe("stdin and stdout as files", () => {
  it("export -o - writes the .duas text to stdout, and import - --key reads it back identical", () => {
    const exported = runCli(["export", "seed", "--dir", dir, "-o", "-"]);
    expect(exported.code, exported.stderr).toBe(0);
    expect(exported.stdout).toBe(runCli(["export", "seed", "--dir", dir]).stdout);
    expect(existsSync(path.join(ROOT, "-"))).toBe(false);
    const imported = runCli(["import", "-", "--key", "from-stdin", "--dir", dir, "-q"], { input: exported.stdout });
    expect(imported.code, imported.stderr).toBe(0);
    expect(runCli(["export", "from-stdin", "--dir", dir, "-o", "-"]).stdout).toBe(exported.stdout);
  });

  it("import - takes JSONL and a JSON message array from stdin", () => {
    const jsonl = '{"role":"user","content":"hi"}\n{"role":"assistant","content":"hello"}\n';
    const a = runCli(["import", "-", "--key", "stdin-jsonl", "--dir", dir, "--json"], { input: jsonl });
    expect(a.code, a.stderr).toBe(0);
    expect(JSON.parse(a.stdout)).toMatchObject({ imported: [{ key: "stdin-jsonl", kind: "jsonl", messages: 2 }] });
    const array = JSON.stringify([{ role: "user", content: "hi" }]);
    const b = runCli(["import", "-", "--key", "stdin-json", "--dir", dir, "--json"], { input: array });
    expect(JSON.parse(b.stdout)).toMatchObject({ imported: [{ key: "stdin-json", kind: "json", messages: 1 }] });
  });

  it("import - needs --key and stands alone", () => {
    const r = runCli(["import", "-", "--dir", dir], { input: "{}" });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/import - reads one session from stdin: give it alone, with --key <key> \(USAGE\)$/m);
  });
});

describe("npm run demo* rebuilds only when src is newer than dist", () => {
  const project = path.join(tmp, "project");
  const marker = path.join(project, "tsc-ran");
  const past = new Date(Date.now() - 3600_000);
  const run = () => {
    rmSync(marker, { force: true });
    const r = spawnSync(process.execPath, [path.join(project, "scripts", "build-if-stale.mjs")], { encoding: "utf8" });
    return { code: r.status, ran: existsSync(marker), stderr: r.stderr };
  };

  beforeAll(() => {
    // A project of two files and a stand-in for tsc that only records that it ran (the build tool is not
    // under test here; the script's decision is).
    mkdirSync(path.join(project, "scripts"), { recursive: true });
    copyFileSync(path.join(ROOT, "scripts", "build-if-stale.mjs"), path.join(project, "scripts", "build-if-stale.mjs"));
    mkdirSync(path.join(project, "node_modules", "typescript", "bin"), { recursive: true });
    writeFileSync(
      path.join(project, "node_modules", "typescript", "bin", "tsc"),
      `require("node:fs").writeFileSync(${JSON.stringify(marker)}, "");\n`,
    );
    writeFileSync(path.join(project, "node_modules", "typescript", "package.json"), '{"type":"commonjs"}');
    writeFileSync(path.join(project, "package.json"), '{"type":"module"}');
    writeFileSync(path.join(project, "tsconfig.json"), "{}");
    writeFileSync(path.join(project, "tsconfig.build.json"), "{}");
    mkdirSync(path.join(project, "src", "cli"), { recursive: true });
    mkdirSync(path.join(project, "dist", "cli"), { recursive: true });
    writeFileSync(path.join(project, "src", "a.ts"), "export {};\n");
    writeFileSync(path.join(project, "src", "cli", "b.ts"), "export {};\n");
    for (const f of ["src/a.ts", "src/cli/b.ts", "package.json", "tsconfig.json", "tsconfig.build.json"]) {
      utimesSync(path.join(project, f), past, past);
    }
    writeFileSync(path.join(project, "dist", "a.js"), "");
    writeFileSync(path.join(project, "dist", "cli", "b.js"), "");
  });

  it("does nothing when every output is newer than its source", () => {
    expect(run()).toMatchObject({ code: 0, ran: false });
  });

  it("runs tsc when a source file changed, and when an output is missing", () => {
    utimesSync(path.join(project, "src", "cli", "b.ts"), new Date(), new Date(Date.now() + 1000));
    const changed = run();
    expect(changed).toMatchObject({ code: 0, ran: true });
    expect(changed.stderr).toMatch(/src\/cli\/b\.ts changed since the last build/);
    utimesSync(path.join(project, "src", "cli", "b.ts"), past, past);
    expect(run().ran).toBe(false);
    rmSync(path.join(project, "dist", "a.js"));
    expect(run()).toMatchObject({ ran: true });
  });

  it("is what every demo script of package.json runs, instead of a build", () => {
    const scripts = (
      JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> }
    ).scripts;
    const demos = Object.entries(scripts).filter(([name]) => name === "demo" || name.startsWith("demo:"));
    expect(demos.length).toBeGreaterThanOrEqual(4);
    for (const [, command] of demos) {
      expect(command).toMatch(/^node scripts\/build-if-stale\.mjs && node dist\/demo\/\w+\.js$/);
    }
  });
});
