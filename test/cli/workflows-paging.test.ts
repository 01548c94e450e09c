/**
 * `dumplings workflows ls` pages (a real process per page, as a user runs it): following the printed
 * cursor lists each workflow exactly once while workflows take steps and start between the pages;
 * a cursor of an earlier release (update order) is a usage error that says to start again.
 */
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createWorkflowState, type WorkflowState } from "../../src/workflow/state.js";
import { sqliteStore, tempDir } from "../workflow/helpers.js";
import { runCli } from "./run-cli.js";

const tmp = tempDir("cli-paging");
afterAll(() => tmp.cleanup());

describe("dumplings workflows ls --cursor", () => {
  it("lists each workflow once while workflows change between the pages; an old cursor is refused (exit 2)", async () => {
    const store = await sqliteStore(tmp.dir);
    const spec = `sqlite:${path.join(tmp.dir, "checkpoints.db")}`;
    try {
      const ids = Array.from({ length: 7 }, (_, i) => `wf-${i}`);
      const states = new Map<string, WorkflowState>();
      for (const id of ids) {
        const s: WorkflowState = { ...createWorkflowState({ workflowId: id }), status: "waiting" };
        await store.save(s, { expectedStep: null });
        states.set(id, s);
        await new Promise((r) => setTimeout(r, 2));
      }
      const seen: string[] = [];
      let cursor: string | undefined;
      for (let n = 0; n < 10; n++) {
        const r = runCli([
          "workflows",
          "ls",
          "--store",
          spec,
          "--limit",
          "3",
          "--json",
          ...(cursor ? ["--cursor", cursor] : []),
        ]);
        expect(r.code, r.stderr).toBe(0);
        const page = JSON.parse(r.stdout) as { items: { workflowId: string }[]; nextCursor?: string };
        seen.push(...page.items.map((w) => w.workflowId));
        cursor = page.nextCursor;
        if (cursor === undefined) break;
        // the oldest workflow not listed yet runs a node and waits again (it changed last); a new one starts
        const oldest = ids.filter((id) => !seen.includes(id)).at(-1);
        if (oldest !== undefined) {
          let s = states.get(oldest) as WorkflowState;
          for (const status of ["running", "waiting"] as const) {
            const next: WorkflowState = { ...s, stepIndex: s.stepIndex + 1, status };
            await store.save(next, { expectedStep: s.stepIndex });
            s = next;
          }
          states.set(oldest, s);
        }
        await store.save(
          { ...createWorkflowState({ workflowId: `new-${n}` }), status: "waiting" },
          { expectedStep: null },
        );
      }
      for (const id of ids)
        expect(
          seen.filter((x) => x === id),
          id,
        ).toHaveLength(1);
      expect(new Set(seen).size).toBe(seen.length);
      // the table says when each was created (the order) and updated
      const table = runCli(["workflows", "ls", "--store", spec, "--limit", "2"]);
      expect(table.stdout).toMatch(/workflow\s+status\s+step\s+next\s+created\s+updated/);
      // a cursor of an earlier release: [updatedAt, workflowId]
      const old = Buffer.from(JSON.stringify([Date.now(), "wf-3"]), "utf8").toString("base64url");
      const refused = runCli(["workflows", "ls", "--store", spec, "--cursor", old]);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(/--cursor .*earlier release.*first page/);
      const garbage = runCli(["workflows", "ls", "--store", spec, "--cursor", "garbage"]);
      expect(garbage.code).toBe(2);
      expect(garbage.stderr).toMatch(/--cursor "garbage" is not a cursor/);
    } finally {
      await store.close();
    }
  }, 60_000);
});
