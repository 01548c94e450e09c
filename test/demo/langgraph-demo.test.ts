/**
 * `npm run demo:langgraph` end to end: the real demo program (built, or through
 * tsx when dist/ is older than src/) as a child process. A `StateGraph` with a
 * tool node, checkpointed by `DumplingsSaver` on SQLite, is SIGKILLed while a
 * tool runs and resumed by a new process from its last checkpoint; the kept
 * database is then read directly, so the printed timeline is checked against
 * what was stored.
 */
import { spawnSync } from "node:child_process";
import { rmSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { DumplingsSaver } from "../../src/langgraph/index.js";
import { programArgs, ROOT } from "../cli/run-cli.js";

describe("npm run demo:langgraph", () => {
  it("resumes a SIGKILLed graph from its last checkpoint with the uninterrupted run's messages and no repeated model call", async () => {
    const r = spawnSync(process.execPath, [...programArgs("demo/langgraph"), "--keep"], {
      cwd: ROOT,
      encoding: "utf8",
      timeout: 110_000,
    });
    const out = r.stdout;
    const db = /^ {4}kept: (\S+)$/m.exec(out)?.[1];
    try {
      expect(r.status, `${out}\n${r.stderr}`).toBe(0);
      expect(r.stderr).toBe("");
      expect(out).toMatch(/\[demo\] SIGKILL → child \d+ while tool call #3 is running/);
      expect(out).toMatch(/^ {4}child exited: SIGKILL$/m);
      expect(out).toMatch(/RESUME from checkpoint \S+ \(step 5, 6 messages, next: tools\)/);
      expect(out).toMatch(/^ {4}killed mid-run: yes$/m);
      expect(out).toMatch(/^ {4}resumed thread's messages equal the uninterrupted run's \(12 messages\): yes$/m);
      expect(out).toMatch(/^ {4}model requests: 6 across both processes, 6 uninterrupted — none repeated: yes$/m);
      // the timeline marks the kill after the last checkpoint the first process wrote
      const after = out.slice(out.indexOf("Timeline after resuming"));
      expect(after).toMatch(/# 5 {2}loop .* next=tools .*\n {4}── SIGKILL here;.*\n {4}# 6 {2}loop /);
      expect(after).toMatch(/#11 {2}loop .*12 msgs {2}next=END/);

      // what the checkpointer holds: the thread's last checkpoint has the final answer, its history every step
      expect(db).toBeDefined();
      const thread = /on thread (\S+) in a child process/.exec(out)?.[1] ?? "";
      const saver = new DumplingsSaver({ store: { sqlite: { path: db as string } } });
      try {
        const config = { configurable: { thread_id: thread } };
        const last = await saver.getTuple(config);
        const messages = last?.checkpoint.channel_values.messages as { content: unknown }[];
        expect(messages).toHaveLength(12);
        expect(String(messages.at(-1)?.content)).toMatch(/made the most tool calls/);
        const steps: number[] = [];
        for await (const t of saver.list(config)) steps.push(t.metadata?.step ?? Number.NaN);
        expect(steps).toEqual([11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, -1]);
      } finally {
        await saver.close();
      }
    } finally {
      if (db) rmSync(path.dirname(db), { recursive: true, force: true });
    }
  }, 120_000);
});
