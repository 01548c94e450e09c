/**
 * SQLiteBackend.iterHistory while the session is being saved: a stream is the
 * history as it started, never a mix of two.
 *
 * - A file (WAL): the pages after the first come from a snapshot, so saves of
 *   another process between pages — appends, a rewrite, a truncation and
 *   appends, a delete, a delete and a new save under the same key (which
 *   takes the same `sid`) — are not seen.
 * - In memory (no second connection): appends are not seen; a save that
 *   replaces messages, or a delete, is a ConflictError.
 * - An injected database not in WAL mode: any save between pages is a
 *   ConflictError (a reader's lock there would block the writers).
 * - The snapshot is held until the stream ends, `return()`s, the backend
 *   closes, or an unfinished stream is garbage-collected.
 */
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { WriteOptions } from "../../src/backends/types.js";
import { BackendError, ConflictError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import { makeState } from "../../src/testing/states.js";

const CHILD = fileURLToPath(new URL("../fixtures/sqlite/writer-child.ts", import.meta.url));
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-sqlite-iter-"));
const children: ChildProcessWithoutNullStreams[] = [];
afterAll(() => {
  for (const child of children) child.kill();
  rmSync(dir, { recursive: true, force: true });
});
let n = 0;
const freshPath = () => path.join(dir, `s${n++}.db`);

const msgs = (count: number, seed: string): Message[] =>
  Array.from({ length: count }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `${seed} ${i}` }) as Message);

/** A writer in a process of its own, saving to `dbPath` through its own SQLiteBackend (test/fixtures/sqlite/writer-child.ts). */
async function otherProcess(dbPath: string) {
  const child = spawn(process.execPath, ["--import", "tsx", CHILD, dbPath]);
  children.push(child);
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const reply = async () => {
    const line = await lines.next();
    if (line.done) throw new Error(`the writer process ended: ${stderr}`);
    return line.value;
  };
  expect(await reply()).toBe("ready");
  const send = async (command: object): Promise<string> => {
    child.stdin.write(`${JSON.stringify(command)}\n`);
    const line = await reply();
    if (!line.startsWith("ok ")) throw new Error(`the writer process failed: ${line}`);
    return line.slice(3);
  };
  return {
    write: async (key: string, history: Message[], options: WriteOptions) =>
      Number(await send({ op: "write", key, history, options })),
    delete: (key: string) => send({ op: "delete", key }),
    end: () => child.stdin.end(),
  };
}

/** Reads the whole stream, calling `between(count)` after each message; returns the messages, or the error that ended it. */
async function drain(
  stream: AsyncIterable<Message>,
  between: (count: number) => Promise<unknown> = async () => undefined,
): Promise<{ got: Message[]; error?: unknown }> {
  const got: Message[] = [];
  try {
    for await (const m of stream) {
      got.push(m);
      await between(got.length);
    }
  } catch (error) {
    return { got, error };
  }
  return { got };
}

/** Whether a connection of its own can reset the WAL of `dbPath`: not while a read transaction (a snapshot) is open on it. */
function walResets(dbPath: string): boolean {
  const db = new Database(dbPath, { timeout: 0 });
  try {
    const [row] = db.pragma("wal_checkpoint(TRUNCATE)") as { busy: number }[];
    return row?.busy === 0;
  } finally {
    db.close();
  }
}

describe("SQLiteBackend.iterHistory: a stream is the history as it started", () => {
  it("another process appending between pages changes nothing; nor does a rewrite, a truncation, a delete or a delete and a new save", async () => {
    const dbPath = freshPath();
    const backend = new SQLiteBackend({ dbPath });
    const writer = await otherProcess(dbPath);
    try {
      const old = msgs(1500, "old"); // three pages of 512
      const other = msgs(1600, "new");
      const start = await backend.write("live", makeState(old), { expectedRevision: null });
      let revision = start.revision;
      let stored = old.length;
      const grown = msgs(1700, "old");
      // Appends before the second message and past the first and second pages, as a live agent saves.
      const appended = await drain(backend.iterHistory("live"), async (count) => {
        if (count === 1 || count === 600 || count === 1100) {
          revision = await writer.write("live", grown.slice(0, stored + 40), {
            expectedRevision: revision,
            baseLength: stored,
          });
          stored += 40;
        }
      });
      expect(appended.error).toBeUndefined();
      expect(appended.got).toEqual(old);
      expect(revision).toBe(start.revision + 3);
      expect(backend.load("live").history).toEqual(grown.slice(0, stored));

      const changes: [string, (key: string, revision: number) => Promise<unknown>][] = [
        ["a rewrite", (key, rev) => writer.write(key, other, { expectedRevision: rev })],
        [
          "a truncation and appends",
          (key, rev) =>
            writer.write(key, [...old.slice(0, 700), ...other.slice(700)], { expectedRevision: rev, baseLength: 700 }),
        ],
        ["a delete", (key) => writer.delete(key)],
        [
          "a delete and a new save under the same key",
          async (key) => {
            await writer.delete(key);
            await writer.write(key, other, { expectedRevision: null });
          },
        ],
      ];
      for (const [label, change] of changes) {
        // One session in the file: a session saved again after a delete takes the same `sid`.
        for (const k of backend.listKeys()) backend.delete(k);
        const { revision: rev } = await backend.write("k", makeState(old), { expectedRevision: null });
        const read = await drain(backend.iterHistory("k"), async (count) => {
          if (count === 1) await change("k", rev);
        });
        expect(read.error, label).toBeUndefined();
        expect(read.got, label).toEqual(old);
      }
    } finally {
      writer.end();
      backend.close();
    }
  });

  it("a save of this backend between pages is not seen either, and a pinned revision is kept", async () => {
    const backend = new SQLiteBackend({ dbPath: freshPath() });
    const old = msgs(1200, "old");
    const first = await backend.write("k", makeState(old), { expectedRevision: null });
    const read = await drain(backend.iterHistory("k", { revision: first.revision }), async (count) => {
      if (count === 1)
        await backend.write("k", makeState(msgs(1300, "old")), { expectedRevision: first.revision, baseLength: 1200 });
      if (count === 2) await backend.save("k", makeState(msgs(10, "new")));
    });
    expect(read.error).toBeUndefined();
    expect(read.got).toEqual(old);
    // The next streams (their snapshot connection is the one kept from the last) see every save before them.
    const now = msgs(1100, "now");
    for (const history of [now, [...now, ...msgs(5, "more")]]) {
      const { revision } = (await backend.read("k")) ?? { revision: 0 };
      await backend.write("k", makeState(history), { expectedRevision: revision });
      expect((await drain(backend.iterHistory("k"))).got).toEqual(history);
    }
    backend.close();
  });

  it("in memory: appends between pages are not seen; a rewrite, a truncation or a delete is a ConflictError, never mixed in", async () => {
    const backend = new SQLiteBackend({ dbPath: ":memory:" });
    const old = msgs(1500, "old");
    const other = msgs(1600, "new");
    let { revision } = await backend.write("k", makeState(old), { expectedRevision: null });
    let stored = old.length;
    const appended = await drain(backend.iterHistory("k"), async (count) => {
      if (count === 1 || count === 600) {
        revision = (
          await backend.write("k", makeState(msgs(stored + 40, "old")), {
            expectedRevision: revision,
            baseLength: stored,
          })
        ).revision;
        stored += 40;
      }
    });
    expect(appended.error).toBeUndefined();
    expect(appended.got).toEqual(old);

    const changes: [string, (revision: number) => Promise<unknown>][] = [
      ["a rewrite", (rev) => backend.write("k", makeState(other), { expectedRevision: rev })],
      [
        "a truncation and appends",
        (rev) =>
          backend.write("k", makeState([...old.slice(0, 700), ...other.slice(700)]), {
            expectedRevision: rev,
            baseLength: 700,
          }),
      ],
      ["a delete", async () => backend.delete("k")],
      [
        "a delete and a new save under the same key",
        async () => {
          backend.delete("k");
          await backend.write("k", makeState(other), { expectedRevision: null });
        },
      ],
    ];
    for (const [label, change] of changes) {
      backend.delete("k");
      const { revision: rev } = await backend.write("k", makeState(old), { expectedRevision: null });
      const read = await drain(backend.iterHistory("k"), async (count) => {
        if (count === 1) await change(rev);
      });
      expect(read.error, label).toBeInstanceOf(ConflictError);
      expect(read.got, label).toEqual(old.slice(0, 512));
    }
    // Another key's rewrite does not stop a stream.
    backend.delete("k");
    ({ revision } = await backend.write("k", makeState(old), { expectedRevision: null }));
    await backend.write("j", makeState(old), { expectedRevision: null });
    const beside = await drain(backend.iterHistory("k"), async (count) => {
      if (count === 1) {
        await backend.write("k", makeState(msgs(1501, "old")), { expectedRevision: revision, baseLength: 1500 });
        backend.save("j", makeState(other));
      }
    });
    expect(beside.error).toBeUndefined();
    expect(beside.got).toEqual(old);
    backend.close();
  });

  it("an injected database not in WAL mode: a save between pages is a ConflictError, and a stream never blocks the writer", async () => {
    const dbPath = freshPath();
    const database = new Database(dbPath);
    expect(String(database.pragma("journal_mode", { simple: true })).toLowerCase()).toBe("delete");
    const backend = new SQLiteBackend({ database });
    const old = msgs(1500, "old");
    const { revision } = await backend.write("k", makeState(old), { expectedRevision: null });
    // Another connection (injected too: opened by path, a backend would turn the file to WAL).
    const second = new Database(dbPath);
    const writer = new SQLiteBackend({ database: second, busyTimeoutMs: 0 });
    const read = await drain(backend.iterHistory("k"), async (count) => {
      if (count === 1)
        await writer.write("k", makeState(msgs(1501, "old")), { expectedRevision: revision, baseLength: 1500 });
    });
    expect(read.error).toBeInstanceOf(ConflictError);
    expect(read.got).toEqual(old.slice(0, 512));
    writer.close();
    backend.close();
    second.close();
    database.close();
  });
});

describe("SQLiteBackend.iterHistory: the snapshot is released", () => {
  const setUp = async () => {
    const dbPath = freshPath();
    const backend = new SQLiteBackend({ dbPath });
    const { revision } = await backend.write("k", makeState(msgs(1500, "m")), { expectedRevision: null });
    // Saves after the stream started: the WAL cannot be reset while its snapshot is open.
    const save = () => backend.write("k", makeState(msgs(1501, "m")), { expectedRevision: revision, baseLength: 1500 });
    return { dbPath, backend, save };
  };

  it("when the stream ends, returns or the backend closes", async () => {
    const { dbPath, backend, save } = await setUp();
    const ended = await drain(backend.iterHistory("k"));
    expect(ended.got).toHaveLength(1500);
    expect(walResets(dbPath)).toBe(true);

    for await (const _ of backend.iterHistory("k")) break; // return()
    expect(walResets(dbPath)).toBe(true);

    const stream = backend.iterHistory("k")[Symbol.asyncIterator]();
    expect((await stream.next()).value).toEqual(msgs(1, "m")[0]);
    await save();
    expect(walResets(dbPath)).toBe(false);
    backend.close();
    expect(walResets(dbPath)).toBe(true);
    let error: unknown;
    try {
      for (let i = 0; i < 600; i++) await stream.next();
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(BackendError);
    expect(String(error)).toContain("closed");
  });

  it("when an unfinished stream is garbage-collected", async () => {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const dropped = await setUp();
    const kept = await setUp();
    await (async () => {
      const stream = dropped.backend.iterHistory("k")[Symbol.asyncIterator]();
      await stream.next();
    })();
    const stream = kept.backend.iterHistory("k")[Symbol.asyncIterator]();
    await stream.next();
    await dropped.save();
    await kept.save();
    let reset = walResets(dropped.dbPath);
    for (let i = 0; i < 20 && !reset; i++) {
      gc();
      await new Promise((r) => setTimeout(r, 10));
      reset = walResets(dropped.dbPath);
    }
    expect(reset).toBe(true);
    // The stream still referenced keeps its snapshot, and goes on with it.
    expect(walResets(kept.dbPath)).toBe(false);
    const rest: Message[] = [];
    for (let r = await stream.next(); !r.done; r = await stream.next()) rest.push(r.value);
    expect(rest).toEqual(msgs(1500, "m").slice(1));
    expect(walResets(kept.dbPath)).toBe(true);
    dropped.backend.close();
    kept.backend.close();
  });
});
