/**
 * Blobs kept outside the journal-backed stores (`blobDir`, an `FsBlobStore`): a delete, a prune, a
 * dropped month and `prune({ archiveDir })` delete the files only the deleted checkpoints held, keep
 * those a remaining checkpoint holds, and count them in `deletedBlobs`; on a real SQLite file and a
 * real PostgreSQL schema. Blobs kept by the journal itself are counted by `dropMonth` and by
 * `prune({ archiveDir })`'s dropped months too, and a missing one names the store's database.
 */
import { randomUUID } from "node:crypto";
import { readdirSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { blobRef } from "../../src/durable/checkpoints/blobs.js";
import {
  BlobError,
  CheckpointStore,
  type CheckpointStoreOptions,
  createWorkflowState,
  PostgresColdStore,
  SqliteColdStore,
  type WorkflowState,
} from "../../src/workflow/index.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { tempDir } from "./helpers.js";

const tmp = tempDir("external-blobs");
afterAll(() => tmp.cleanup());

/** A value above the test's threshold (64 bytes), distinct per seed. */
const big = (seed: string) => `${seed}: ${"x".repeat(200)}`;
const refOf = (value: string) => blobRef(Buffer.from(JSON.stringify(value)));
const OLD = Date.UTC(2025, 0, 10);

/** The references of the blob files in a directory (`dir/ab/<64 hex>`), sorted. */
function files(dir: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir, { recursive: true }) as string[];
  } catch {
    return [];
  }
  return names
    .map((n) => path.basename(n))
    .filter((n) => /^[0-9a-f]{64}$/.test(n))
    .map((n) => `sha256:${n}`)
    .sort();
}

/** Saves one checkpoint per entry: step i of `workflowId`, created at `at`, holding `memory`. */
async function steps(
  store: CheckpointStore,
  workflowId: string,
  entries: [at: number, memory: WorkflowState["sharedMemory"]][],
): Promise<void> {
  let s = createWorkflowState({ workflowId, sharedMemory: entries[0]![1], now: entries[0]![0] });
  await store.save(s, { expectedStep: null });
  for (let i = 1; i < entries.length; i++) {
    const [at, sharedMemory] = entries[i]!;
    s = { ...s, stepIndex: i, updatedAt: at, sharedMemory };
    await store.save(s, { expectedStep: i - 1 });
  }
}

interface Backend {
  kind: "sqlite" | "postgres";
  cold: () => SqliteColdStore | PostgresColdStore;
  destroy: () => Promise<void>;
}

async function backend(kind: "sqlite" | "postgres"): Promise<Backend> {
  if (kind === "sqlite") {
    const file = path.join(tmp.dir, `s-${randomUUID()}.db`);
    return { kind, cold: () => new SqliteColdStore({ path: file }), destroy: async () => {} };
  }
  const schema = `wf_extblob_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
  return {
    kind,
    cold: () => new PostgresColdStore({ url: DATABASE_URL, schema }),
    async destroy() {
      const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
      try {
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await pool.end();
      }
    },
  };
}

for (const kind of ["sqlite", "postgres"] as const) {
  describe(`${kind} with blobDir: deletes remove the files no checkpoint holds any more`, () => {
    let be: Backend;
    let dir: string;
    const stores: CheckpointStore[] = [];
    const open = async (extra: Partial<CheckpointStoreOptions> = {}) => {
      const store = await CheckpointStore.open({ cold: be.cold(), blobDir: dir, blobThreshold: 64, ...extra });
      stores.push(store);
      return store;
    };
    beforeEach(async (ctx) => {
      if (kind === "postgres") {
        const skip = await postgresSkipReason();
        if (skip) ctx.skip(skip);
      }
      be = await backend(kind);
      dir = path.join(tmp.dir, `blobs-${randomUUID()}`);
    });
    afterEach(async () => {
      for (const s of stores.splice(0)) await s.close();
      await be?.destroy();
    });

    it("prune deletes the files only old checkpoints held, keeps those still referenced, and counts them", async () => {
      const store = await open();
      const now = Date.now();
      // "p": three old checkpoints; v0 and x0 only in its first, v1 also in "q"'s recent one.
      await steps(store, "p", [
        [OLD, { doc: big("v0"), extra: big("x0") }],
        [OLD + 1, { doc: big("v1") }],
        [OLD + 2, { doc: big("v2") }],
      ]);
      await steps(store, "q", [[now, { doc: big("v1") }]]);
      // "k": `kept` in an old checkpoint and in its newest.
      await steps(store, "k", [
        [OLD, { kept: big("kept") }],
        [now, { kept: big("kept") }],
      ]);
      const all = ["v0", "x0", "v1", "v2", "kept"].map((v) => refOf(big(v)));
      expect(files(dir)).toEqual([...all].sort());
      const out = await store.prune({ olderThan: 60_000, keepLast: 1 });
      expect(out.deletedBlobs).toBe(2);
      expect(files(dir)).toEqual(["v1", "v2", "kept"].map((v) => refOf(big(v))).sort());
      expect((await store.loadLatest("p"))?.sharedMemory).toEqual({ doc: big("v2") });
      expect((await store.loadLatest("q"))?.sharedMemory).toEqual({ doc: big("v1") });
      expect((await store.loadLatest("k"))?.sharedMemory).toEqual({ kept: big("kept") });
      // Nothing more to delete: a second prune deletes no file.
      expect((await store.prune({ olderThan: 60_000, keepLast: 1 })).deletedBlobs).toBe(0);
      expect(files(dir)).toHaveLength(3);
    });

    it("delete removes the files of every record of the workflow (a step written twice too), not a shared one", async () => {
      const store = await open();
      const s = createWorkflowState({ workflowId: "a", sharedMemory: { doc: big("a1"), shared: big("S") } });
      await store.save(s, { expectedStep: null });
      // Step 0 written again (a plain save is an upsert): the journal keeps both records.
      await store.save({ ...s, sharedMemory: { doc: big("a2"), shared: big("S") } });
      await store.save(createWorkflowState({ workflowId: "b", sharedMemory: { shared: big("S") } }), {
        expectedStep: null,
      });
      expect(files(dir)).toEqual(["a1", "a2", "S"].map((v) => refOf(big(v))).sort());
      expect(await store.delete("a")).toBe(true);
      expect(files(dir)).toEqual([refOf(big("S"))]);
      expect((await store.loadLatest("b"))?.sharedMemory.shared).toBe(big("S"));
      expect(await store.delete("b")).toBe(true);
      expect(files(dir)).toEqual([]);
    });

    it("the default (blobs in the journal): a prune counts each blob it deleted once", async () => {
      const store = await open({ blobDir: undefined });
      await steps(store, "d", [
        [OLD, { doc: big("d0") }],
        [Date.now(), { doc: big("d1") }],
      ]);
      expect((await store.prune({ olderThan: 60_000 })).deletedBlobs).toBe(1);
      expect((await store.loadLatest("d"))?.sharedMemory).toEqual({ doc: big("d1") });
      expect(await store.delete("d")).toBe(true);
    });
  });
}

describe("SQLite months with blobs", () => {
  let n = 0;
  const FEB = Date.UTC(2025, 1, 10);
  /** A store on a new file: "p" has two January checkpoints and a recent one, "q" one January checkpoint. */
  async function seeded(extra: Partial<CheckpointStoreOptions> = {}) {
    const file = path.join(tmp.dir, `months-${n++}.db`);
    const store = await CheckpointStore.open({
      cold: new SqliteColdStore({ path: file }),
      blobThreshold: 64,
      ...extra,
    });
    await steps(store, "p", [
      [OLD, { doc: big("j0"), extra: big("jx") }],
      [OLD + 1, { doc: big("j1") }],
      [Date.now(), { doc: big("now") }],
    ]);
    // "q"'s only checkpoint is in January: carried (kept) by a drop, and with it j1.
    await steps(store, "q", [[OLD + 2, { doc: big("j1") }]]);
    // "f": February, left alone by a drop of January.
    await steps(store, "f", [[FEB, { doc: big("feb") }]]);
    return { store, file };
  }
  const journalBlobs = (file: string) => {
    const db = new Database(file, { readonly: true });
    try {
      return (db.prepare("SELECT 'sha256:' || ref AS ref FROM durable_blobs ORDER BY ref").all() as { ref: string }[])
        .map((r) => r.ref)
        .sort();
    } finally {
      db.close();
    }
  };
  const left = ["j1", "now", "feb"].map((v) => refOf(big(v))).sort();

  it("dropMonth with blobDir deletes the files only the dropped checkpoints held and counts them", async () => {
    const dir = path.join(tmp.dir, `month-blobs-${n}`);
    const { store } = await seeded({ blobDir: dir });
    try {
      expect(files(dir)).toHaveLength(5);
      const out = await store.dropMonth("2025-01", { keepLast: 1 });
      expect(out).toMatchObject({ month: "2025-01", deletedSnapshots: 2, carriedForward: 1, deletedBlobs: 2 });
      expect(files(dir)).toEqual(left);
      expect((await store.loadLatest("q"))?.sharedMemory).toEqual({ doc: big("j1") });
    } finally {
      await store.close();
    }
  });

  it("prune({ archiveDir }) with blobDir deletes the files of the months it drops and counts them", async () => {
    const dir = path.join(tmp.dir, `archive-blobs-${n}`);
    const { store } = await seeded({ blobDir: dir });
    try {
      const out = await store.prune({
        olderThan: new Date(Date.UTC(2025, 1, 1)),
        archiveDir: path.join(tmp.dir, `archive-${n}`),
      });
      expect(out.droppedMonths.map((m) => m.month)).toEqual(["2025-01"]);
      expect(out.deletedBlobs).toBe(2);
      expect(files(dir)).toEqual(left);
    } finally {
      await store.close();
    }
  });

  it("dropMonth counts the journal's blobs it deleted (blobs in the journal, the default)", async () => {
    const { store, file } = await seeded();
    try {
      expect(journalBlobs(file)).toHaveLength(5);
      const out = await store.dropMonth("2025-01", { keepLast: 1 });
      expect(out.deletedBlobs).toBe(2);
      expect(journalBlobs(file)).toEqual(left);
    } finally {
      await store.close();
    }
  });

  it("prune({ archiveDir }) counts the journal's blobs of the months it drops", async () => {
    const { store, file } = await seeded();
    try {
      const out = await store.prune({
        olderThan: new Date(Date.UTC(2025, 1, 1)),
        archiveDir: path.join(tmp.dir, `archive-j-${n}`),
      });
      expect(out.droppedMonths.map((m) => m.month)).toEqual(["2025-01"]);
      expect(out.deletedBlobs).toBe(2);
      expect(journalBlobs(file)).toEqual(left);
    } finally {
      await store.close();
    }
  });
});

describe("a missing blob names the store's database", () => {
  it("SQLite: the file, not an old table", async () => {
    const file = path.join(tmp.dir, `missing-${randomUUID()}.db`);
    const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }), legacyBlobDirs: [] });
    try {
      const ref = blobRef(new Uint8Array([1, 2, 3]));
      const err = await store.blobs.get(ref).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BlobError);
      expect((err as BlobError).message).toContain(`not in the sqlite cold store's database (${file})`);
      expect((err as BlobError).message).not.toMatch(/workflow_blobs/);
    } finally {
      await store.close();
    }
  });

  it("PostgreSQL: the schema", async (ctx) => {
    const skip = await postgresSkipReason();
    if (skip) ctx.skip(skip);
    const be = await backend("postgres");
    const store = await CheckpointStore.open({ cold: be.cold(), legacyBlobDirs: [] });
    try {
      const ref = blobRef(new Uint8Array([4, 5, 6]));
      const err = await store.blobs.get(ref).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BlobError);
      expect((err as BlobError).message).toMatch(
        /not in the postgres cold store's database \(postgres:wf_extblob_\w+\)/,
      );
      expect((err as BlobError).message).not.toMatch(/workflow_blobs/);
    } finally {
      await store.close();
      await be.destroy();
    }
  });
});
