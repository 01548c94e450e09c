/**
 * `npm run demo:workflow` end to end (through tsx, no server needed): the
 * child is SIGKILLed mid-run, resumed, and the demo itself checks the
 * resumed result against an uninterrupted run (exit code 0 only if equal).
 */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "./helpers.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

describe("workflow demo", () => {
  const tmp = tempDir("demo", { memory: true });
  afterAll(() => tmp.cleanup());

  it("kills the run mid-way, resumes it, and ends with the uninterrupted result on embedded SQLite", () => {
    const env: NodeJS.ProcessEnv = { ...process.env, DUMPLINGS_WORKFLOW_DIR: tmp.dir, DEMO_STEP_MS: "40" };
    delete env.REDIS_URL;
    const out = spawnSync(process.execPath, ["--import", "tsx", "src/demo/workflow.ts"], {
      cwd: ROOT,
      env,
      encoding: "utf8",
      timeout: 90_000,
    });
    expect(out.status, out.stderr).toBe(0);
    expect(out.stdout).toContain("killed mid-run: yes");
    expect(out.stdout).toContain("resumed result equals the uninterrupted run: yes");
    expect(out.stdout).toContain("report side effect executed exactly once: yes");
    expect(out.stdout).toMatch(/SIGKILL here/);
    expect(out.stdout).toMatch(/- conversations: \d+/);
  }, 120_000);
});
