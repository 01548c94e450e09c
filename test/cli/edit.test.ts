/**
 * `dumplings edit KEY`: the session opens in $EDITOR as .duas and the edit is saved back with every
 * check (strict decode, credential check, compare-and-set against the revision opened); a refused
 * edit writes nothing and keeps the edited text in a file it names (issue 25, item 8). The editor is
 * a small real program that edits the file as a person would. Its sibling, `dumplings import` of a
 * `.duas` file, applies the same credential check.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BaseAgent } from "../../src/agent/base-agent.js";
import { FileBackend } from "../../src/backends/file/index.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend } from "../../src/backends/types.js";
import { saveState } from "../../src/persistence/api.js";
import { programArgs, runCli } from "./run-cli.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-edit-test-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;

const EDITOR_SCRIPT = path.join(tmp, "editor.mjs");
writeFileSync(
  EDITOR_SCRIPT,
  `import { readFileSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
const file = process.argv[2];
let text = readFileSync(file, "utf8");
switch (process.env.EDIT_MODE) {
  case "model":
    text = text.replace(/^model_name = .*$/m, "model_name = edited-model").replace(/^prompt = .*$/m, 'prompt = "Be brief.\\\\nVery."');
    break;
  case "broken":
    text = text.replace("[CONFIG]\\n", "[CONFIG]\\nthis line is not key = value\\noops\\n");
    break;
  case "secret":
    text = text.replace(/^api_key_env = .*$/m, "api_key_env = sk-test-FAKE-0000000000000000");
    break;
  case "conflict":
    execFileSync(process.execPath, JSON.parse(process.env.EDIT_CLI), { stdio: "ignore" });
    text = text.replace(/^model_name = .*$/m, "model_name = late");
    break;
}
writeFileSync(file, text);
`,
);
const editor = `'${process.execPath}' '${EDITOR_SCRIPT}'`;

async function seeded(kind: "file" | "sqlite"): Promise<{ args: string[]; backend: StateBackend }> {
  const where = path.join(tmp, `${kind}-${n++}`);
  const backend = kind === "file" ? new FileBackend({ baseDir: where }) : new SQLiteBackend({ dbPath: `${where}.db` });
  await saveState(
    new BaseAgent({
      name: "weather",
      modelName: "gpt-4o-mini",
      apiKeyEnv: "OPENAI_API_KEY",
      history: [
        { role: "user", content: "hi" },
        { role: "assistant", content: "hello" },
      ],
    }),
    "weather",
    { backend },
  );
  return { backend, args: kind === "file" ? ["--dir", where] : ["--backend", "sqlite", "--db", `${where}.db`] };
}

const edit = (args: string[], mode: string, extra: Record<string, string> = {}) =>
  runCli(["edit", "weather", ...args], { env: { VISUAL: editor, EDITOR: editor, EDIT_MODE: mode, ...extra } });

describe.each(["file", "sqlite"] as const)("dumplings edit on the %s backend", (kind) => {
  it("saves the edit back: the new values load, the history is kept, the revision moves on", async () => {
    const { args, backend } = await seeded(kind);
    const before = await backend.read?.("weather");
    const r = edit([...args, "--json"], "model");
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { changed: boolean; revision: number };
    expect(out.changed).toBe(true);
    const after = await backend.read?.("weather");
    expect(after?.state.config.modelName).toBe("edited-model");
    expect(after?.state.config.prompt).toBe("Be brief.\nVery.");
    expect(after?.state.history).toEqual(before?.state.history);
    expect(out.revision).toBe(after?.revision);
    expect(after?.revision).toBeGreaterThan(before?.revision ?? 0);
    await backend.close?.();
  });

  it("an unchanged text writes nothing", async () => {
    const { args, backend } = await seeded(kind);
    const before = await backend.read?.("weather");
    const r = edit(args, "none");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain("no changes");
    expect((await backend.read?.("weather"))?.revision).toBe(before?.revision);
    await backend.close?.();
  });

  it.each([
    ["broken", 4, "FORMAT_ERROR"],
    ["secret", 2, "CREDENTIAL_REFUSED"],
  ] as const)("a %s edit is refused (exit %i, %s): nothing written, the text kept", async (mode, code, errorCode) => {
    const { args, backend } = await seeded(kind);
    const before = await backend.read?.("weather");
    const r = edit(args, mode);
    expect(r.code, r.stderr).toBe(code);
    expect(r.stderr).toContain(errorCode);
    const kept = /the edited text is kept in (\S+)/.exec(r.stderr)?.[1];
    expect(kept).toBeDefined();
    expect(readFileSync(kept as string, "utf8")).toContain(mode === "broken" ? "oops" : "sk-test-FAKE");
    rmSync(path.dirname(kept as string), { recursive: true, force: true });
    expect(await backend.read?.("weather")).toEqual(before);
    await backend.close?.();
  });

  it("a session deleted while it was being edited is a ConflictError, not brought back", async () => {
    const { args, backend } = await seeded(kind);
    const r = edit(args, "conflict", {
      EDIT_CLI: JSON.stringify([...programArgs("cli/index"), "rm", "weather", ...args]),
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("CONFLICT");
    expect(r.stderr).toContain("deleted while it was being edited");
    expect(await backend.read?.("weather")).toBeUndefined();
    await backend.close?.();
  });
});

it("dumplings import checks a .duas file's config as saveState does: a credential is refused, nothing written", async () => {
  const dir = path.join(tmp, `import-${n++}`);
  const file = path.join(tmp, `leaky-${n}.duas`);
  writeFileSync(
    file,
    new BaseAgent({ name: "leaky", apiKeyEnv: "OPENAI_API_KEY" })
      .exportStateString()
      .replace("api_key_env = OPENAI_API_KEY", "api_key_env = sk-test-FAKE-0000000000000000"),
  );
  const r = runCli(["import", file, "--dir", dir]);
  expect(r.code).toBe(2);
  expect(r.stderr).toContain("CREDENTIAL_REFUSED");
  expect(r.stderr).not.toContain("sk-test-FAKE");
  expect(await new FileBackend({ baseDir: dir }).listKeys()).toEqual([]);
});
