import { spawnSync } from "node:child_process";
import path from "node:path";
import { describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");

describe("npm run demo:agent", () => {
  it("replays a recorded conversation, survives a SIGKILL mid tool call, and ends equal to the recording", () => {
    const run = spawnSync(process.execPath, ["--import", "tsx", path.join(root, "src/demo/agent.ts")], {
      cwd: root,
      encoding: "utf8",
      timeout: 120_000,
    });
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toMatch(/SIGKILL while tool/);
    expect(run.stdout).toMatch(/tool call\(s\) without result: .* repaired on resume/);
    expect(run.stdout).toMatch(/run again/);
    expect(run.stdout).toMatch(/OK: the resumed session's history equals the recording/);
  }, 130_000);
});
