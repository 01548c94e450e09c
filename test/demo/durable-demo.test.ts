/**
 * `npm run demo:durable` end to end: the real demo program (built, or through
 * tsx when dist/ is older than src/) as a child process, local mode (SQLite
 * journal, worker processes, the local model server; no Redis). It must
 * survive the SIGKILL, resume a run paused under v1 with program v2 and
 * complete it without a duplicated model call (drift printed), and cancel a
 * second run whose late approval is refused. The kept journal is then read
 * directly, so the printed lines are checked against what was stored.
 */
import { spawnSync } from "node:child_process";
import { rmSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { approvalSignalName } from "../../src/durable/signals.js";
import { programArgs, ROOT } from "../cli/run-cli.js";

describe("npm run demo:durable", () => {
  it("resumes a v1 run under v2 with drift and no duplicated model call, and cancels a second run", async () => {
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && k !== "REDIS_URL") env[k] = v;
    const r = spawnSync(process.execPath, [...programArgs("demo/durable"), "--local"], {
      cwd: ROOT,
      env,
      encoding: "utf8",
      timeout: 150_000,
    });
    const out = r.stdout;
    const db = /^journal: SQLite (\S+);/m.exec(out)?.[1];
    try {
      expect(r.status, `${out}\n${r.stderr}`).toBe(0);
      expect(r.stderr).toBe("");
      // the crash and the approval, as before
      expect(out).toMatch(/demo: SIGKILL worker #1 while tool \S+ \S+ is running/);
      expect(out).toMatch(/^final messages equal the recording \(\d+ messages\)$/m);

      // the deploy: v2's patch is skipped by the v1 run and taken by the new one
      expect(out).toMatch(/^\[4\] deploy while the run waits: program v2 replaces v1/m);
      expect(out).toMatch(/^ {4}worker#3: PATCH fraud-screen-v2 false /m);
      expect(out).toMatch(/^ {4}worker#4: PATCH fraud-screen-v2 true /m);
      expect(out).toMatch(
        /^deploy: the run paused under v1 completed under v2 with 1 model request\(s\) after the deploy for 1 new llm step\(s\); the last request carried the v2 prompt and \d+ tools: yes$/m,
      );
      const served =
        /^model requests served: (\d+) for (\d+) llm steps \(\d+ attempts\) — no duplicated paid call: yes$/m.exec(out);
      expect(served?.[1]).toBeDefined();
      expect(served?.[1]).toBe(served?.[2]);
      const drift = /^drift the journal recorded \((\d+) step_drift events;/m.exec(out);
      const driftCount = Number(drift?.[1]);
      expect(driftCount).toBeGreaterThan(0);
      expect(out).toMatch(
        /^ {4}drift at step 0 \(llm\): input changed: [0-9a-f]{12} → [0-9a-f]{12}; the recorded result was used$/m,
      );

      // the cancel
      const cancelled = /^\$ dumplings cancel (\S+) --by demo-operator --reason "([^"]+)"/m.exec(out);
      const runB = cancelled?.[1] ?? "";
      const reason = cancelled?.[2] ?? "";
      expect(runB).not.toBe("");
      expect(out).toContain(`${runB} is cancelled (cancel by demo-operator)`);
      expect(out).toMatch(new RegExp(`^cancelled by demo-operator at \\S+: ${reason}$`, "m"));
      expect(out).toMatch(
        new RegExp(
          `^refused: \\[dumplings:durable\\] run "${runB}" is cancelled: it waits for nothing, so signal "approval:\\S+" was not recorded`,
          "m",
        ),
      );
      expect(out).toMatch(/^ {4}worker#5: RESULT \{"status":"cancelled"\}$/m);
      expect(out).toMatch(
        /^cancel: .* the late approval was not recorded; a worker resuming it gets status cancelled: ok$/m,
      );

      // what the journal holds
      expect(db).toBeDefined();
      const journal = new SqliteJournal({ path: db as string });
      try {
        const runA = runB.replace(/-b$/, "");
        expect((await journal.getRun(runA))?.status).toBe("completed");
        const eventsA = await journal.readEvents(runA);
        expect(eventsA.filter((e) => e.type === "step_drift")).toHaveLength(driftCount);
        const stepsA = await journal.readSteps(runA);
        expect(stepsA.map((s) => s.name)).not.toContain("fraud-screen");
        expect(stepsA.filter((s) => s.name === "llm")).toHaveLength(Number(served?.[2]));

        const b = await journal.getRun(runB);
        expect(b?.status).toBe("cancelled");
        const stepsB = await journal.readSteps(runB);
        expect(stepsB.slice(0, 2).map((s) => s.name)).toEqual(["patch:fraud-screen-v2", "fraud-screen"]);
        const cancel = (await journal.readEvents(runB)).filter((e) => e.type === "run_cancelled");
        expect(cancel).toHaveLength(1);
        expect(cancel[0]?.by).toBe("demo-operator");
        expect(cancel[0]?.detail).toBe(reason);
        const wait = stepsB.find((s) => s.name.startsWith("signal:approval:"));
        expect(wait?.status).toBe("waiting");
        const call = wait?.name.slice("signal:approval:".length) ?? "";
        expect(await journal.getSignal(runB, approvalSignalName(call))).toBeUndefined();
      } finally {
        await journal.close();
      }
    } finally {
      if (db) rmSync(path.dirname(db), { recursive: true, force: true });
    }
  }, 160_000);
});
