/**
 * Keys Windows cannot name a file after. On Windows the file backend refuses
 * them (an `InvalidKeyError` saying why, before any file system access):
 * `user:42.duas` would be the hidden stream `42.duas` of a file `user`, which
 * no listing shows, and `NUL.duas` the null device, where a save is lost.
 * Elsewhere they are ordinary keys (Linux and macOS file names hold them).
 */
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { windowsFileNameProblem } from "../../src/backends/keys.js";
import { BaseAgent, loadState } from "../../src/index.js";

const root = mkdtempSync(path.join(tmpdir(), "duas-keys-windows-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("keys Windows cannot name a file after", () => {
  it.each([
    ["user:42", ":"],
    ['say"hi"', '"'],
    ["a|b", "|"],
    ["what?", "?"],
    ["glob*", "*"],
    ["<tag>", "<"],
  ])("%s: refused for its %s", (key, char) => {
    expect(windowsFileNameProblem(key)).toContain(JSON.stringify(char));
  });

  it.each(["CON", "con", "nul", "NUL.backup", "Aux", "prn", "COM1", "com9", "LPT3", "lpt\u00b9", "nul .x"])(
    "%s: a device name, with any extension",
    (key) => {
      expect(windowsFileNameProblem(key)).toMatch(/Windows device name/);
    },
  );

  it.each(["console", "nullable", "com10", "lpt", "auxiliary", "a.con", "user-42", "café", "Alice"])(
    "%s: a file name on Windows too",
    (key) => {
      expect(windowsFileNameProblem(key)).toBeUndefined();
    },
  );

  it.skipIf(process.platform === "win32")("are ordinary keys of the file backend elsewhere", async () => {
    const backend = new FileBackend({ baseDir: root });
    for (const key of ["user:42", "nul", "what?"]) {
      const agent = new BaseAgent({ name: key });
      agent.history.push({ role: "user", content: key });
      await agent.saveState(key, { backend });
      expect((await loadState(key, { backend })).history).toEqual(agent.history);
    }
    expect(
      readdirSync(root)
        .filter((f) => f.endsWith(".duas"))
        .sort(),
    ).toEqual(["nul.duas", "user:42.duas", "what?.duas"]);
  });
});
