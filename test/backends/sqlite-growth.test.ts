/**
 * pb-12 (checkpoint-growth-quadratic): saving after every step of a growing
 * conversation must cost bytes linear in the content, not turns × history.
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { Message } from "../../src/core/messages.js";
import { makeState } from "../../src/testing/states.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-sqlite-growth-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Bytes this process passed to write(2)/pwrite(2) so far (Linux /proc/self/io `wchar`). */
function bytesWritten(): number {
  const m = /wchar: (\d+)/.exec(readFileSync("/proc/self/io", "utf8"));
  if (!m) throw new Error("/proc/self/io has no wchar line");
  return Number(m[1]);
}

function text(bytes: number, seed: string): string {
  let s = "";
  let i = 0;
  while (s.length < bytes) s += `${seed}:${i++} lorem ipsum dolor sit amet `;
  return s.slice(0, bytes);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

describe("pb-12: storage grows with content, not with turns x history (SQLite)", () => {
  it("200 turns x 3 checkpoints with a 1 MB image: linear bytes, image stored once, exact load", async () => {
    const dbPath = path.join(dir, "long-12.db");
    const backend = new SQLiteBackend({ dbPath });
    const marker = "IMAGE-MARKER-5f3c2a";
    const image = `${marker}${"iVBORw0KGgo".repeat(Math.ceil(1048576 / 11))}`.slice(0, 1048576);
    const history: Message[] = [];
    let revision: number | null = null;
    let stored = 0;
    const perCheckpoint = new Map<number, number[]>();
    for (let turn = 1; turn <= 200; turn++) {
      const steps: (() => void)[] = [
        () => history.push({ role: "user", content: text(200, `u${turn}`) }),
        () => history.push({ role: "assistant", content: text(2000, `a${turn}`) }),
        () => {
          if (turn === 3) history.push({ role: "tool", tool_call_id: "call_img", content: image });
        },
      ];
      for (const step of steps) {
        step();
        const state = makeState(history, { name: "long-12", fields: { turn } });
        const before = bytesWritten();
        const r = await backend.write("long-12", state, { expectedRevision: revision, baseLength: stored });
        const cost = bytesWritten() - before;
        if (!perCheckpoint.has(turn)) perCheckpoint.set(turn, []);
        perCheckpoint.get(turn)?.push(cost);
        if (revision !== null) expect(r.rewritten).toBe(false);
        revision = r.revision;
        stored = history.length;
      }
    }
    const early = median([8, 9, 10, 11, 12].flatMap((t) => perCheckpoint.get(t) ?? []));
    const late = median([196, 197, 198, 199, 200].flatMap((t) => perCheckpoint.get(t) ?? []));
    const total = [...perCheckpoint.values()].flat().reduce((a, b) => a + b, 0);
    const loaded = backend.load("long-12");
    expect(loaded.history).toHaveLength(401);
    expect(loaded.history).toEqual(history);
    backend.close(); // checkpoints the WAL into the database file
    const rawJsonl = history.reduce((n, m) => n + Buffer.byteLength(JSON.stringify(m)) + 1, 0);
    const dbBytes = statSync(dbPath).size;
    const walBytes = (() => {
      try {
        return statSync(`${dbPath}-wal`).size;
      } catch {
        return 0;
      }
    })();
    const file = readFileSync(dbPath);
    let copies = 0;
    for (let at = file.indexOf(marker); at !== -1; at = file.indexOf(marker, at + 1)) copies++;
    console.log(
      `pb-12 sqlite: raw JSONL ${rawJsonl} B, db ${dbBytes} B (+wal ${walBytes}), written ${total} B,` +
        ` per checkpoint median turn~10 ${early} B, turn~200 ${late} B`,
    );
    expect(copies).toBe(1); // the image appears once in storage
    expect(dbBytes + walBytes).toBeLessThan(rawJsonl * 1.3 + 64 * 1024);
    expect(late / early).toBeLessThan(2);
    // A full snapshot per checkpoint would write ~730 MB here; appends write about 9x the content (4 KB WAL frames per save, then checkpoints).
    expect(total).toBeLessThan(20 * rawJsonl);
    const raw = new Database(dbPath, { readonly: true });
    const rows = "SELECT count(*) FROM messages WHERE (id >> 32) = (SELECT sid FROM sessions WHERE key = ?)";
    expect(raw.prepare(rows).pluck().get("long-12")).toBe(401);
    raw.close();
  });
});
