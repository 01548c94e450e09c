/**
 * A `.duas` file the backend wrote, edited by hand (issue 25 item 8: "a file the backend wrote cannot
 * be edited by hand at all; the seed calls the format hand-editable"). Removing the two checksum lines
 * makes it a hand-written file: it loads with the edit, every history line counting (a line added
 * without raising `message_count` is a FormatError naming the line, never silently ignored), and the
 * next save seals it again. Removing only one checksum line is still an edited or cut file. Real files.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BaseAgent } from "../../src/agent/base-agent.js";
import { FileBackend } from "../../src/backends/file/index.js";
import { FormatError } from "../../src/core/errors.js";
import { iterHistory, loadState } from "../../src/persistence/api.js";
import { runCli } from "../cli/run-cli.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-hand-edit-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;

/** A session saved twice (an append: the file carries generation, history_bytes and prior_commit). */
async function saved(): Promise<{ backend: FileBackend; file: string }> {
  const base = path.join(dir, `b${n++}`);
  const backend = new FileBackend({ baseDir: base });
  const agent = new BaseAgent({ name: "x", modelName: "m", apiKeyEnv: "", history: [{ role: "user", content: "hi" }] });
  await agent.saveState("k", { backend });
  agent.history.push({ role: "assistant", content: "hello" });
  await agent.saveState("k", { backend });
  const file = path.join(base, readdirSync(base).find((f) => f.endsWith(".duas")) as string);
  expect(readFileSync(file, "utf8")).toMatch(/^prior_commit = /m);
  return { backend, file };
}

const edit = (file: string, change: (lines: string[]) => string[]) =>
  writeFileSync(file, change(readFileSync(file, "utf8").split("\n")).join("\n"));
const withoutChecksums = (lines: string[]) => lines.filter((l) => !/^(header_crc32|history_crc32) = /.test(l));

describe("a backend-written file edited by hand", () => {
  it("without its checksum lines it is a hand-written file: the edit loads, and the next save seals it again", async () => {
    const { backend, file } = await saved();
    edit(file, (lines) => withoutChecksums(lines).map((l) => l.replace('"hello"', '"hello, edited by hand"')));
    const agent = await loadState<BaseAgent>("k", { backend });
    expect(agent.history.map((m) => m.content)).toEqual(["hi", "hello, edited by hand"]);
    agent.history.push({ role: "user", content: "thanks" });
    expect(await agent.saveState("k", { backend })).toMatchObject({ written: 3, rewritten: true });
    expect(readFileSync(file, "utf8")).toMatch(/^header_crc32 = [0-9a-f]{8}/m);
    expect((await loadState<BaseAgent>("k", { backend })).history).toHaveLength(3);
  });

  it("a message added by hand counts: with message_count raised it loads; without, a FormatError names the line", async () => {
    const { backend, file } = await saved();
    const added = JSON.stringify({ role: "user", content: "added by hand" });
    edit(file, (lines) => {
      const out = withoutChecksums(lines);
      out.splice(out.findLastIndex((l) => l.startsWith("{")) + 1, 0, added);
      return out;
    });
    const error = await loadState("k", { backend }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FormatError);
    expect((error as FormatError).message).toMatch(/message_count is 2 but \[HISTORY\] holds 3 messages/);
    expect((error as FormatError).line).toBeGreaterThan(1);
    // every read path says so: the streaming one (iterHistory, dumplings show) too, never a silent drop
    const streamed = await (async () => {
      for await (const _ of iterHistory("k", { backend })) {
        // read it all
      }
    })().catch((e: unknown) => e);
    expect(streamed).toBeInstanceOf(FormatError);
    const shown = runCli(["show", "k", "--backend", `file:${path.dirname(file)}`]);
    expect(shown.code).toBe(4);
    expect(shown.stderr).toMatch(/message_count is 2 but \[HISTORY\] holds 3 messages/);
    edit(file, (lines) => lines.map((l) => l.replace(/^message_count = 2\b/, "message_count = 3")));
    const agent = await loadState<BaseAgent>("k", { backend });
    expect(agent.history.at(-1)).toEqual({ role: "user", content: "added by hand" });
  });

  it("with one checksum line removed and not the other, it is still an edited or cut file", async () => {
    const { backend, file } = await saved();
    edit(file, (lines) => lines.filter((l) => !l.startsWith("header_crc32 = ")));
    await expect(loadState("k", { backend })).rejects.toThrow(/edited or corrupted file/);
  });
});
