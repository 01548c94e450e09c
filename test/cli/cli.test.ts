/**
 * The `dumplings` CLI as a user runs it: a real child process per command,
 * against real temporary directories and SQLite databases, on the bundled
 * real conversations.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeState } from "../../src/core/codec/encode.js";
import { loadSampleConversations } from "../../src/testing/samples.js";
import { makeState } from "../../src/testing/states.js";
import { runCli, runJson } from "./run-cli.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-cli-"));
const dir = path.join(tmp, "sessions");
const db = path.join(tmp, "sessions.db");
const fileArgs = ["--dir", dir];
const sqliteArgs = ["--backend", "sqlite", "--db", db];
const samples = loadSampleConversations();
const manifest = JSON.parse(
  readFileSync(new URL("../../data/trajectories/manifest.json", import.meta.url), "utf8"),
) as { openai_file?: string; openai_tool_calls?: number }[];

afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** Asserts the one-line error contract: exit code, one stderr line starting with `dumplings:`, no stack. */
function expectError(r: { code: number | null; stderr: string; stdout: string }, code: number, pattern: RegExp): void {
  expect(r.code).toBe(code);
  const lines = r.stderr.trimEnd().split("\n");
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^dumplings: /);
  expect(lines[0]).toMatch(pattern);
  expect(r.stderr).not.toMatch(/\n\s+at /);
}

describe("dumplings CLI on the bundled conversations", () => {
  beforeAll(() => {
    const r = runCli(["import", ...samples.map((s) => s.file), ...fileArgs]);
    if (r.code !== 0) throw new Error(`import failed: ${r.stderr}`);
    // Not a terminal: progress comes as plain lines on stderr, one per file.
    expect(r.stderr.trimEnd().split("\n")).toHaveLength(samples.length);
    expect(r.stderr).toMatch(new RegExp(`^import 1/${samples.length} `));
    expect(r.stdout).toContain(`imported ${samples.length} sessions`);
  });

  it("ls lists every imported key, as text and as JSON", () => {
    const r = runCli(["ls", ...fileArgs]);
    expect(r.code).toBe(0);
    expect(r.stdout.trimEnd().split("\n")).toEqual(samples.map((s) => s.id).sort());
    const json = runJson<{ count: number; sessions: { key: string; messages: number; protocol: string }[] }>([
      "ls",
      "--long",
      ...fileArgs,
    ]);
    expect(json.count).toBe(samples.length);
    for (const s of samples) {
      const found = json.sessions.find((x) => x.key === s.id);
      expect(found?.messages).toBe(s.messages.length);
      expect(found?.protocol).toBe(s.protocol);
    }
  });

  it("show gives meta, counts by role and tool calls matching the data set's manifest", () => {
    const picked = [
      "spotter-tool_heavy",
      "spotter-ae4a77f8-aedd-4bc1-888f-c94edc91af04.anthropic",
      "taubench-airline-gpt-4o-task03-trial0",
    ];
    for (const s of samples.filter((x) => picked.includes(x.id))) {
      const json = runJson<{
        meta: { protocol: string; messageCount: number; class: string };
        messages: { total: number; byRole: Record<string, number> };
        toolCalls: { total: number; byName: Record<string, number> };
        last: { index: number; message: unknown }[];
      }>(["show", s.id, "--last", "2", ...fileArgs]);
      expect(json.meta.protocol).toBe(s.protocol);
      expect(json.meta.class).toBe(s.protocol === "openai" ? "dumplings-ai:BaseAgent" : "dumplings-ai:AnthropicAgent");
      expect(json.messages.total).toBe(s.messages.length);
      expect(Object.values(json.messages.byRole).reduce((a, b) => a + b, 0)).toBe(s.messages.length);
      expect(Object.values(json.toolCalls.byName).reduce((a, b) => a + b, 0)).toBe(json.toolCalls.total);
      expect(json.last.map((x) => x.message)).toEqual(s.messages.slice(-2));
      const listed = manifest.find((m) => m.openai_file === path.basename(s.file));
      if (listed?.openai_tool_calls !== undefined) expect(json.toolCalls.total).toBe(listed.openai_tool_calls);
    }
    const text = runCli(["show", "spotter-tool_heavy", ...fileArgs]);
    expect(text.code).toBe(0);
    expect(text.stdout).toContain("[META]");
    expect(text.stdout).toContain("[CONFIG]");
    expect(text.stdout).toMatch(/messages\s+13\s+\(/);
    expect(text.stdout).toMatch(/tool calls\s+6\s+\(Bash/);
    expect(text.stdout).toMatch(/last 5 messages/);
  });

  it("export writes .duas and .duas.gz that import back byte-identical into SQLite", () => {
    const key = "spotter-ae4a77f8-aedd-4bc1-888f-c94edc91af04.anthropic";
    const plain = path.join(tmp, "export.duas");
    const gz = path.join(tmp, "export.duas.gz");
    expect(runCli(["export", key, "-o", plain, ...fileArgs]).code).toBe(0);
    expect(runCli(["export", key, "-o", gz, ...fileArgs]).code).toBe(0);
    const text = readFileSync(plain, "utf8");
    expect(text.startsWith("# dumplingsAI Agent State File\n")).toBe(true);
    expect(gunzipSync(readFileSync(gz)).toString("utf8")).toBe(text);
    const stdout = runCli(["export", key, ...fileArgs]);
    expect(stdout.code).toBe(0);
    expect(stdout.stdout).toBe(text);
    // Into a directory that does not exist: a usage error naming it, not an ENOENT about a temp file.
    const missing = runCli(["export", key, "-o", path.join(tmp, "no-such-dir", "x.duas"), ...fileArgs]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`the directory ${path.join(tmp, "no-such-dir")} does not exist`);
    expect(missing.stderr).not.toMatch(/\.tmp|ENOENT/);

    const imported = runJson<{ imported: { key: string; kind: string; messages: number }[] }>([
      "import",
      gz,
      "--key",
      "from-gz",
      ...sqliteArgs,
    ]);
    expect(imported.imported).toEqual([expect.objectContaining({ key: "from-gz", kind: "duas", messages: 434 })]);
    const back = runCli(["export", "from-gz", ...sqliteArgs]);
    expect(back.code).toBe(0);
    expect(back.stdout).toBe(text);
  });

  it("imports a JSON message array as a new session keyed by the file stem", () => {
    const sample = samples.find((s) => s.id === "spotter-short");
    if (!sample) throw new Error("sample missing");
    const file = path.join(tmp, "chat-array.json");
    writeFileSync(file, JSON.stringify(sample.messages, null, 2));
    const json = runJson<{ imported: { key: string; kind: string; protocol: string }[] }>([
      "import",
      file,
      ...sqliteArgs,
    ]);
    expect(json.imported).toEqual([expect.objectContaining({ key: "chat-array", kind: "json", protocol: "openai" })]);
    const shown = runJson<{ last: { message: unknown }[]; meta: { agentName: string } }>([
      "show",
      "chat-array",
      "--last",
      "100",
      ...sqliteArgs,
    ]);
    expect(shown.last.map((x) => x.message)).toEqual(sample.messages);
    expect(shown.meta.agentName).toBe("chat-array");
    // Importing again without --overwrite refuses and changes nothing.
    const again = runCli(["import", file, ...sqliteArgs]);
    expectError(again, 1, /already exists.*--overwrite.*\(KEY_EXISTS\)$/);
    expect(runCli(["import", file, "--overwrite", ...sqliteArgs]).code).toBe(0);
  });

  it("convert copies file → SQLite → file and verifies every copy", () => {
    const toDb = path.join(tmp, "converted.db");
    const back = path.join(tmp, "converted-dir");
    const first = runJson<{ copied: number; verified: number; mismatches: unknown[] }>([
      "convert",
      "--from",
      `file:${dir}`,
      "--to",
      `sqlite:${toDb}`,
    ]);
    expect(first).toMatchObject({ copied: samples.length, verified: samples.length, mismatches: [] });
    const second = runCli(["convert", "--from", `sqlite:${toDb}`, "--to", `file:${back}`]);
    expect(second.code).toBe(0);
    expect(second.stderr).toMatch(/^convert 1\/\d+ \S+ ok$/m);
    const listed = runJson<{ sessions: { key: string; messages: number }[] }>(["ls", "--long", "--dir", back]);
    expect(listed.sessions).toEqual(
      samples
        .map((s) => ({ key: s.id, messages: s.messages.length }))
        .sort((a, b) => (a.key < b.key ? -1 : 1))
        .map((x) => expect.objectContaining(x)),
    );
    for (const key of ["spotter-subagent.anthropic", "miniswe-django__django-10097"]) {
      const a = runCli(["export", key, ...fileArgs]);
      const b = runCli(["export", key, "--dir", back]);
      expect(a.code).toBe(0);
      expect(b.stdout).toBe(a.stdout);
    }
  });

  it("ls -l lists every session even when one file is unreadable, marks it and exits 6", () => {
    const mixed = path.join(tmp, "mixed");
    expect(runCli(["import", samples[0]!.file, "--dir", mixed, "-q"]).code).toBe(0);
    writeFileSync(path.join(mixed, "broken.duas"), "garbage\n");
    const r = runCli(["ls", "-l", "--json", "--dir", mixed]);
    expect(r.code).toBe(6);
    const json = JSON.parse(r.stdout) as { sessions: { key: string; error?: string; messages?: number }[] };
    expect(json.sessions.map((x) => x.key)).toEqual(["broken", samples[0]!.id]);
    expect(json.sessions[0]?.error).toMatch(/FORMAT_ERROR/);
    expect(json.sessions[1]?.messages).toBe(samples[0]!.messages.length);
    expect(readFileSync(path.join(mixed, "broken.duas"), "utf8")).toBe("garbage\n"); // untouched
  });

  it("a mistyped file:/sqlite: source is a not-found error and creates nothing", () => {
    const missingDb = path.join(tmp, "typo", "nope.db");
    expectError(runCli(["convert", "--from", `sqlite:${missingDb}`, "--to", "memory:"]), 3, /\(INPUT_NOT_FOUND\)$/);
    expectError(runCli(["ls", "--backend", `sqlite:${missingDb}`]), 3, /\(INPUT_NOT_FOUND\)$/);
    expectError(
      runCli(["convert", "--from", `file:${path.join(tmp, "typo-dir")}`, "--to", "memory:"]),
      3,
      /\(INPUT_NOT_FOUND\)$/,
    );
    expect(existsSync(path.join(tmp, "typo"))).toBe(false);
    expect(existsSync(path.join(tmp, "typo-dir"))).toBe(false);
  });

  it("rm deletes, and a second rm is a not-found error", () => {
    const key = "taubench-airline-gpt-4o-task00-trial0";
    const copy = path.join(tmp, "rm-dir");
    const source = samples.find((s) => s.id === key);
    if (!source) throw new Error("sample missing");
    expect(runCli(["import", source.file, "--dir", copy]).code).toBe(0);
    const r = runCli(["rm", key, "--dir", copy]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(`deleted ${key}\n`);
    expect(runCli(["ls", "--dir", copy]).stdout).not.toContain(`${key}\n`);
    expectError(runCli(["rm", key, "--dir", copy]), 3, /no state stored under key.*\(STATE_NOT_FOUND\)$/);
    expect(runCli(["rm", key, "--force", "--dir", copy]).code).toBe(0);
  });
});

describe("dumplings gc", () => {
  it("deletes file sessions saved before the cut-off, and only those", () => {
    const gcDir = path.join(tmp, "gc-dir");
    const inputs = path.join(tmp, "gc-inputs");
    mkdirSync(inputs, { recursive: true });
    const history = [{ role: "user" as const, content: "hi" }];
    writeFileSync(
      path.join(inputs, "old.duas"),
      encodeState(makeState(history, { savedAt: "2020-01-01T00:00:00.000Z" })),
    );
    writeFileSync(path.join(inputs, "new.duas"), encodeState(makeState(history)));
    expect(runCli(["import", path.join(inputs, "old.duas"), path.join(inputs, "new.duas"), "--dir", gcDir]).code).toBe(
      0,
    );
    const dry = runJson<{ deleted: string[]; dryRun: boolean }>([
      "gc",
      "--older-than",
      "30d",
      "--dry-run",
      "--dir",
      gcDir,
    ]);
    expect(dry).toMatchObject({ deleted: ["old"], dryRun: true });
    expect(runCli(["ls", "--dir", gcDir]).stdout).toBe("new\nold\n");
    const done = runJson<{ deleted: string[]; count: number }>(["gc", "--older-than", "30d", "--dir", gcDir]);
    expect(done).toMatchObject({ deleted: ["old"], count: 1 });
    expect(runCli(["ls", "--dir", gcDir]).stdout).toBe("new\n");
  });

  it("uses the SQLite backend's own gc (by last write time)", async () => {
    const gcDb = path.join(tmp, "gc.db");
    const sample = samples.find((s) => s.id === "spotter-short");
    if (!sample) throw new Error("sample missing");
    expect(runCli(["import", sample.file, "--backend", "sqlite", "--db", gcDb]).code).toBe(0);
    const none = runJson<{ count: number }>(["gc", "--older-than", "30d", "--backend", "sqlite", "--db", gcDb]);
    expect(none.count).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const all = runJson<{ count: number }>([
      "gc",
      "--older-than",
      "10ms",
      "--vacuum",
      "--backend",
      "sqlite",
      "--db",
      gcDb,
    ]);
    expect(all.count).toBe(1);
    expect(runJson<{ count: number }>(["ls", "--backend", "sqlite", "--db", gcDb]).count).toBe(0);
  });
});

describe("dumplings options and errors", () => {
  it("honours DUMPLINGS_PERSISTENCE_BACKEND / _DB / _DIR", () => {
    const envDb = path.join(tmp, "env.db");
    const sample = samples.find((s) => s.id === "spotter-short");
    if (!sample) throw new Error("sample missing");
    const env = { DUMPLINGS_PERSISTENCE_BACKEND: "sqlite", DUMPLINGS_PERSISTENCE_DB: envDb };
    expect(runCli(["import", sample.file, "-q"], { env }).code).toBe(0);
    expect(runCli(["ls"], { env }).stdout).toBe("spotter-short\n");
    expect(runCli(["ls", "--backend", "sqlite", "--db", envDb]).stdout).toBe("spotter-short\n");
    expect(runCli(["ls"], { env: { DUMPLINGS_PERSISTENCE_DIR: dir } }).stdout).toContain("spotter-short\n");
  });

  it("fails with one line and a class-specific exit code", () => {
    expectError(runCli(["ls", "--bogus"]), 2, /unknown option '--bogus' \(USAGE\)$/);
    expectError(runCli(["show"]), 2, /missing required argument 'key' \(USAGE\)$/);
    expectError(
      runCli(["ls", "--backend", "nope"]),
      2,
      /unknown backend "nope"; known backends: .*file.*sqlite.*\(UNKNOWN_BACKEND\)$/,
    );
    expectError(runCli(["show", "../etc", ...fileArgs]), 2, /invalid state key.*\(INVALID_KEY\)$/);
    expectError(
      runCli(["show", "no-such-key", ...fileArgs]),
      3,
      /no state stored under key "no-such-key".*\(STATE_NOT_FOUND\)$/,
    );
    expectError(runCli(["gc", ...fileArgs]), 2, /--older-than.*\(USAGE\)$/);
    expectError(runCli(["gc", "--older-than", "soon", ...fileArgs]), 2, /invalid duration "soon".*\(USAGE\)$/);
    expectError(runCli(["import", path.join(tmp, "missing.jsonl"), ...fileArgs]), 3, /\(INPUT_NOT_FOUND\)$/);
    const a = path.join(tmp, "two-a.jsonl");
    writeFileSync(a, '{"role":"user","content":"x"}\n');
    expectError(runCli(["import", a, a, "--key", "k", ...fileArgs]), 2, /--key names one session.*\(USAGE\)$/);
    expectError(
      runCli(["convert", "--from", "ftp:x", "--to", `file:${dir}`]),
      2,
      /--from "ftp:x": unknown kind "ftp".*file:DIR, sqlite:PATH.*\(USAGE\)$/,
    );
  });

  it("rejects malformed inputs with the file and line, storing nothing", () => {
    const bad = path.join(tmp, "bad-import.duas");
    const good = encodeState(makeState([{ role: "user", content: "a" }]));
    writeFileSync(bad, good.replace("[CONFIG]", "[CONFIG]\nthis is not a key value line"));
    const badDir = path.join(tmp, "bad-dir");
    const r = runCli(["import", bad, "--dir", badDir]);
    expectError(r, 4, /bad-import\.duas:line \d+: .*\(FORMAT_ERROR\)$/);
    const jsonl = path.join(tmp, "bad-line.jsonl");
    writeFileSync(jsonl, '{"role":"user","content":"a"}\n{"role":"user",\n');
    expectError(runCli(["import", jsonl, "--dir", badDir]), 4, /bad-line\.jsonl:line 2: .*\(FORMAT_ERROR\)$/);
    // nothing was stored: not even the directory was created, so ls finds no store (exit 3)
    expect(existsSync(badDir)).toBe(false);
    expectError(runCli(["ls", "--dir", badDir]), 3, /no store at file:.*bad-dir.*\(INPUT_NOT_FOUND\)$/);
  });

  it("prints the stack only with DUMPLINGS_DEBUG=1", () => {
    const r = runCli(["show", "no-such-key", ...fileArgs], { env: { DUMPLINGS_DEBUG: "1" } });
    expect(r.code).toBe(3);
    expect(r.stderr.split("\n")[0]).toMatch(/^dumplings: .*STATE_NOT_FOUND/);
    expect(r.stderr).toMatch(/\n\s+at /);
  });

  it("prints help and version with exit 0", () => {
    const help = runCli(["--help"]);
    expect(help.code).toBe(0);
    for (const c of ["ls", "show", "export", "import", "rm", "convert", "gc"]) expect(help.stdout).toContain(c);
    expect(runCli(["--version"]).stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });
});
