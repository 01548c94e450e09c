/**
 * Where a workflow's large values live: with the checkpoints. A workflow whose `sharedMemory`
 * holds a 300 KB value, written by one process, is resumed and shown (library and CLI) by
 * processes started in other directories, on a real SQLite file and a real PostgreSQL schema;
 * nothing is written to the working directories.
 */
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import Database from "better-sqlite3";
import pg from "pg";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { blobRef, ColdBlobStore, FsBlobStore } from "../../src/durable/checkpoints/blobs.js";
import type { ColdStore } from "../../src/durable/checkpoints/contract.js";
import { workflowJournalMigrations } from "../../src/durable/checkpoints/migrate.js";
import { sqlJournalMigrations } from "../../src/durable/journal-sql-schema.js";
import {
  BlobError,
  CheckpointStore,
  type CheckpointStoreOptions,
  createWorkflowState,
  PostgresColdStore,
  SqliteColdStore,
  type WorkflowState,
} from "../../src/workflow/index.js";
import { ROOT, runJson } from "../cli/run-cli.js";
import { bigDoc } from "../fixtures/workflow/big-doc.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { tempDir, unzipFixture } from "./helpers.js";

const CHILD = path.join(ROOT, "test", "fixtures", "workflow", "blob-child.ts");
const TSX = pathToFileURL(path.join(ROOT, "node_modules", "tsx", "dist", "loader.mjs")).href;

interface ChildOut {
  status: string;
  docBytes: number;
  docHead: string;
  published: number | null;
  cwdEntries: string[];
}

/** Runs the child fixture in `cwd` with its environment; returns its JSON line or throws with its stderr. */
function child(cwd: string, env: Record<string, string>): ChildOut {
  const r = spawnSync(process.execPath, ["--import", TSX, CHILD], {
    cwd,
    env: { ...process.env, ...env },
    encoding: "utf8",
  });
  if (r.status !== 0) throw new Error(`blob-child ${env.WF_ACTION} in ${cwd} exited ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split("\n").at(-1)!) as ChildOut;
}

const tmp = tempDir("blob-location");
afterAll(() => tmp.cleanup());

/** Two empty working directories (as two machines or a systemd unit started in `/` would have). */
function workingDirs(label: string): [string, string] {
  const a = path.join(tmp.dir, `${label}-cwd-a`);
  const b = path.join(tmp.dir, `${label}-cwd-b`);
  mkdirSync(a);
  mkdirSync(b);
  return [a, b];
}

describe("a workflow with a 300 KB value is resumed and shown from another working directory", () => {
  it("SQLite: written in one directory, resumed (library) and shown (CLI) from another", () => {
    const [a, b] = workingDirs("sqlite");
    const file = path.join(tmp.dir, "data", "workflows.db");
    const env = { WF_COLD: "sqlite", WF_SQLITE_PATH: file, WF_ID: "wf-sqlite", WF_SEED: "s1" };
    expect(child(a, { ...env, WF_ACTION: "start" })).toMatchObject({ status: "waiting", docBytes: 300_000 });
    const shown = runJson<{ history: { state: { sharedMemory: { doc?: string } } }[] }>(
      ["workflows", "show", "wf-sqlite", "--store", `sqlite:${file}`],
      { cwd: b },
    );
    expect(shown.history.at(-1)?.state.sharedMemory.doc?.length).toBe(300_000);
    const done = child(b, { ...env, WF_ACTION: "resume" });
    expect(done).toMatchObject({ status: "finished", docBytes: 300_000, published: 300_000 });
    expect(done.docHead).toMatch(/^s1: the quick brown fox/);
    // Nothing went to either working directory.
    expect(done.cwdEntries).toEqual([]);
    expect(child(a, { ...env, WF_ACTION: "load" }).cwdEntries).toEqual([]);
  });

  it("PostgreSQL: written in one directory, resumed (library) and shown (CLI) from another", async (ctx) => {
    const skip = await postgresSkipReason();
    if (skip) ctx.skip(skip);
    const [a, b] = workingDirs("postgres");
    const schema = `wf_blobloc_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
    try {
      const env = { WF_COLD: "postgres", WF_PG_URL: DATABASE_URL, WF_PG_SCHEMA: schema, WF_ID: "wf-pg", WF_SEED: "p1" };
      expect(child(a, { ...env, WF_ACTION: "start" })).toMatchObject({ status: "waiting", docBytes: 300_000 });
      const shown = runJson<{ history: { state: { sharedMemory: { doc?: string } } }[] }>(
        ["workflows", "show", "wf-pg", "--store", DATABASE_URL, "--schema", schema],
        { cwd: b },
      );
      expect(shown.history.at(-1)?.state.sharedMemory.doc?.length).toBe(300_000);
      const done = child(b, { ...env, WF_ACTION: "resume" });
      expect(done).toMatchObject({ status: "finished", docBytes: 300_000, published: 300_000 });
      expect(done.cwdEntries).toEqual([]);
      expect(child(a, { ...env, WF_ACTION: "load" }).cwdEntries).toEqual([]);
    } finally {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    }
  });
});

/**
 * A store on a fresh SQLite file or PostgreSQL schema, with a second connection to look at its tables.
 * SQLite keeps its workflows in the file's durable journal: blobs in `durable_blobs` (ref = the
 * sha256 hex), written only with a checkpoint that references them.
 */
interface Fixture {
  kind: "sqlite" | "postgres";
  cold: () => SqliteColdStore | PostgresColdStore;
  /** The CLI's `--store` arguments. */
  storeArgs: string[];
  /** References (`sha256:<hex>`) held by the blob table, sorted. */
  blobRows: () => Promise<string[]>;
  /** Whether a blob is stored only with a checkpoint that references it (a journal: `blobs.put` alone is refused). */
  blobsWithCheckpointsOnly: boolean;
  destroy: () => Promise<void>;
}

async function fixture(kind: "sqlite" | "postgres"): Promise<Fixture> {
  if (kind === "sqlite") {
    const file = path.join(tmp.dir, `store-${randomUUID()}.db`);
    let db: Database.Database | undefined;
    return {
      kind,
      cold: () => new SqliteColdStore({ path: file }),
      storeArgs: ["--store", `sqlite:${file}`],
      async blobRows() {
        db ??= new Database(file, { readonly: true });
        return (
          db.prepare("SELECT 'sha256:' || ref AS ref FROM durable_blobs ORDER BY ref").all() as { ref: string }[]
        ).map((r) => r.ref);
      },
      blobsWithCheckpointsOnly: true,
      async destroy() {
        db?.close();
      },
    };
  }
  const schema = `wf_blobs_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  return {
    kind,
    cold: () => new PostgresColdStore({ url: DATABASE_URL, schema }),
    storeArgs: ["--store", DATABASE_URL, "--schema", schema],
    async blobRows() {
      // The store is a journal: its blobs are the journal's (`durable_blobs`, the sha256 hex as the reference).
      const r = await pool.query(`SELECT 'sha256:' || ref AS ref FROM "${schema}".durable_blobs ORDER BY ref`);
      return r.rows.map((x: { ref: string }) => x.ref);
    },
    blobsWithCheckpointsOnly: true,
    async destroy() {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

const big = (seed: string) => bigDoc(seed);
const refOf = (value: string) => blobRef(Buffer.from(JSON.stringify(value)));
const next = (s: WorkflowState, sharedMemory: WorkflowState["sharedMemory"]): WorkflowState => ({
  ...s,
  stepIndex: s.stepIndex + 1,
  updatedAt: s.updatedAt + 1,
  sharedMemory,
});

for (const kind of ["sqlite", "postgres"] as const) {
  describe(`${kind}: blobs live and die with the checkpoints`, () => {
    let fx: Fixture;
    const stores: CheckpointStore[] = [];
    const open = async (extra: Partial<CheckpointStoreOptions> = {}) => {
      const store = await CheckpointStore.open({ cold: fx.cold(), ...extra });
      stores.push(store);
      return store;
    };
    beforeEach(async (ctx) => {
      if (kind === "postgres") {
        const skip = await postgresSkipReason();
        if (skip) ctx.skip(skip);
      }
      fx = await fixture(kind);
    });
    afterEach(async () => {
      for (const s of stores.splice(0)) await s.close();
      await fx?.destroy();
    });

    it("an unchanged 300 KB value is one blob row over many checkpoints, none in a directory", async () => {
      const store = await open();
      const doc = big("same");
      let s = createWorkflowState({ workflowId: "w", sharedMemory: { doc, n: 0 } });
      await store.save(s, { expectedStep: null });
      for (let i = 1; i <= 5; i++) {
        s = next(s, { doc, n: i });
        await store.save(s, { expectedStep: i - 1 });
      }
      expect(await fx.blobRows()).toEqual([refOf(doc)]);
      expect(store.blobs).toBeInstanceOf(ColdBlobStore);
      expect((await store.loadLatest("w"))?.sharedMemory).toEqual({ doc, n: 5 });
      const history = await store.history("w");
      expect(history.map((h) => h.state.sharedMemory.doc === doc)).toEqual([true, true, true, true, true, true]);
    });

    it("a blob of any bytes (not UTF-8, NUL bytes) round-trips through the store's blobs, verified on read", async () => {
      const store = await open();
      if (kind === "postgres") {
        // The store is a journal, which keeps a blob only with a checkpoint that references it.
        await expect(store.blobs.put(new Uint8Array([0, 255]))).rejects.toBeInstanceOf(BlobError);
        return;
      }
      const bytes = new Uint8Array([0, 255, 254, 0xc3, 0x28, 10, 0, 1]);
      const text = Buffer.from(JSON.stringify("naïve — 日本語 \u0000"));
      /** Stores bytes as the store's blobs: alone, or (a journal) with a checkpoint that references them. */
      const put = async (b: Uint8Array, step: number): Promise<string> => {
        if (!fx.blobsWithCheckpointsOnly) return store.blobs.put(b);
        const ref = blobRef(b);
        await expect(store.blobs.put(b)).rejects.toBeInstanceOf(BlobError);
        await store.cold.write(
          {
            workflowId: "bytes",
            sessionId: "bytes",
            stepIndex: step,
            nodeName: "n",
            stateJson: JSON.stringify({ sharedMemory: { v: { $dumplings_blob: ref } } }),
            createdAt: Date.now(),
            status: "running",
            currentNode: "n",
            parentWorkflowId: null,
            activeStep: step,
            blobRefs: [ref],
            blobs: new Map([[ref, b]]),
          },
          step === 0 ? null : step - 1,
        );
        return ref;
      };
      const ref = await put(bytes, 0);
      expect(ref).toBe(blobRef(bytes));
      expect(Buffer.from(await store.blobs.get(ref)).equals(Buffer.from(bytes))).toBe(true);
      expect(Buffer.from(await store.blobs.get(await put(text, 1))).equals(text)).toBe(true);
      const unknown = blobRef(new Uint8Array([1, 2, 3]));
      await expect(store.blobs.get(unknown)).rejects.toMatchObject({ code: "WORKFLOW_BLOB", ref: unknown });
    });

    it("`workflows rm` deletes the blobs nobody references and keeps one another workflow still references", async () => {
      const store = await open();
      const shared = big("shared");
      const own = big("own");
      await store.save(createWorkflowState({ workflowId: "a", sharedMemory: { shared, own } }), { expectedStep: null });
      await store.save(createWorkflowState({ workflowId: "b", sharedMemory: { shared } }), { expectedStep: null });
      expect(await fx.blobRows()).toEqual([refOf(shared), refOf(own)].sort());
      expect(runJson(["workflows", "rm", "a", ...fx.storeArgs])).toEqual({ deleted: "a" });
      expect(await fx.blobRows()).toEqual([refOf(shared)]);
      expect((await store.loadLatest("b"))?.sharedMemory.shared).toBe(shared);
      expect(runJson(["workflows", "rm", "b", ...fx.storeArgs])).toEqual({ deleted: "b" });
      expect(await fx.blobRows()).toEqual([]);
    });

    it("prune (and a step written again) delete the blobs only old checkpoints referenced", async () => {
      const store = await open();
      const v1 = big("v1");
      const v2 = big("v2");
      const kept = big("kept");
      // Old checkpoints (1970): v1 at steps 0-1, then v2; workflow "k" holds `kept` in a recent one and an old one.
      let s = createWorkflowState({ workflowId: "p", sharedMemory: { doc: v1 }, now: 1000 });
      await store.save(s, { expectedStep: null });
      s = next(s, { doc: v1 });
      await store.save(s, { expectedStep: 0 });
      s = next(s, { doc: v2 });
      await store.save(s, { expectedStep: 1 });
      const k = createWorkflowState({ workflowId: "k", sharedMemory: { kept }, now: 1000 });
      await store.save(k, { expectedStep: null });
      await store.save({ ...next(k, { kept }), updatedAt: Date.now() }, { expectedStep: 0 });
      // A blob put on its own (no checkpoint references it: a journal refuses it), and a referenced
      // one store.blobs.delete must keep.
      const alone = fx.blobsWithCheckpointsOnly
        ? undefined
        : await store.blobs.put(Buffer.from(JSON.stringify(big("alone"))));
      await store.blobs.delete?.(refOf(kept));
      expect((await fx.blobRows()).length).toBe(alone ? 4 : 3);
      const out = await store.prune({ olderThan: 60_000, keepLast: 1 });
      expect(out.deletedBlobs).toBe(alone ? 2 : 1);
      if (alone) expect(await fx.blobRows()).not.toContain(alone);
      expect(await fx.blobRows()).toEqual([refOf(v2), refOf(kept)].sort());
      expect((await store.loadLatest("p"))?.sharedMemory.doc).toBe(v2);
      expect((await store.loadLatest("k"))?.sharedMemory.kept).toBe(kept);
      // The newest step written again with another value: the value it held goes (a journal keeps the
      // step's earlier record, behind the newer one, until the next prune deletes it).
      const latest = (await store.loadLatest("p"))!;
      await store.save({ ...latest, sharedMemory: { doc: "small now" } });
      expect((await store.loadLatest("p"))?.sharedMemory).toEqual({ doc: "small now" });
      if (fx.blobsWithCheckpointsOnly) {
        expect(await fx.blobRows()).toEqual([refOf(v2), refOf(kept)].sort());
        expect((await store.prune({ olderThan: 60_000, keepLast: 1 })).deletedBlobs).toBe(1);
        expect((await store.history("p")).map((h) => [h.stepIndex, h.state.sharedMemory])).toEqual([
          [2, { doc: "small now" }],
        ]);
      }
      expect(await fx.blobRows()).toEqual([refOf(kept)]);
    });

    it("a workflow written with the old directory default still loads, from that directory and through the CLI", async () => {
      // What dumplings-ai 0.1 wrote: the snapshot in the store, the blob in <cwd>/.dumplingsAI_workflows/blobs.
      const [appDir, elsewhere] = workingDirs(`legacy-${kind}`);
      const oldDir = path.join(appDir, ".dumplingsAI_workflows", "blobs");
      const doc = big("legacy");
      const writer = await open({ blobDir: oldDir });
      await writer.save(createWorkflowState({ workflowId: "old", sharedMemory: { doc } }), { expectedStep: null });
      expect(await fx.blobRows()).toEqual([]);
      // The library from the application's directory reads it from there (read only).
      const fromApp = child(appDir, {
        ...(kind === "sqlite"
          ? { WF_COLD: "sqlite", WF_SQLITE_PATH: sqlitePath(fx) }
          : { WF_COLD: "postgres", WF_PG_URL: DATABASE_URL, WF_PG_SCHEMA: pgSchema(fx) }),
        WF_ID: "old",
        WF_ACTION: "load",
        WF_SEED: "unused",
      });
      expect(fromApp.docBytes).toBe(300_000);
      // Elsewhere, an explicit list of old directories (or --blobs for the CLI).
      const reader = await open({ legacyBlobDirs: [oldDir] });
      expect((await reader.loadLatest("old"))?.sharedMemory.doc).toBe(doc);
      const shown = runJson<{ history: { state: { sharedMemory: { doc?: string } } }[] }>(
        ["workflows", "show", "old", ...fx.storeArgs, "--blobs", oldDir],
        { cwd: elsewhere },
      );
      expect(shown.history[0]?.state.sharedMemory.doc).toBe(doc);
      // Without it, a typed error naming where it looked; nothing is lost or written.
      const missing = await (await open({ legacyBlobDirs: [] })).loadLatest("old").catch((e: unknown) => e);
      expect(missing).toBeInstanceOf(BlobError);
      expect(String((missing as BlobError).message)).toMatch(/not in the \w+ cold store's database \(.+\)$/);
      // The next checkpoint (a resume) writes the value into the store: then every process reads it.
      const latest = (await reader.loadLatest("old"))!;
      await reader.save(next(latest, { ...latest.sharedMemory, resumed: true }), { expectedStep: 0 });
      expect(await fx.blobRows()).toEqual([refOf(doc)]);
      expect((await (await open({ legacyBlobDirs: [] })).loadLatest("old"))?.sharedMemory.doc).toBe(doc);
      expect(readdirSync(oldDir, { recursive: true }).length).toBeGreaterThan(0); // never deleted from there
    });

    it("a checkpoint racing the deletion of another workflow that shares its blob never loses it", async () => {
      const writer = await open();
      const deleter = await open();
      const shared = big("race");
      let s = createWorkflowState({ workflowId: "keep", sharedMemory: { shared, n: 0 } });
      await writer.save(s, { expectedStep: null });
      for (let round = 0; round < 15; round++) {
        const gone = `gone-${round}`;
        await deleter.save(createWorkflowState({ workflowId: gone, sharedMemory: { shared } }), { expectedStep: null });
        // Remove the writer's references, so the blob's fate depends on who commits first.
        await writer.delete("keep");
        s = createWorkflowState({ workflowId: "keep", sharedMemory: { shared, n: round } });
        await Promise.all([writer.save(s, { expectedStep: null }), deleter.delete(gone)]);
        expect((await writer.loadLatest("keep"))?.sharedMemory.shared).toBe(shared);
        expect(await fx.blobRows()).toEqual([refOf(shared)]);
      }
    });
  });
}

describe("a store written by dumplings-ai 0.1 (blobs in a directory, no blob table)", () => {
  it("SQLite in ./.dumplingsAI_workflows: the CLI reads the blobs beside the file from anywhere, and moves the file into the journal", async () => {
    const [appDir, elsewhere] = workingDirs("v01");
    const home = path.join(appDir, ".dumplingsAI_workflows");
    const file = path.join(home, "workflows.db");
    const doc = big("v01");
    // Written by the previous release's tables, its blob in the directory beside the file, then left
    // as 0.1 left the file: no blob component in the ledger, no blob table. Fixtures made at commit
    // ab998f93 by that release's SQL cold store (`SqlColdStore`, since deleted) with
    // `blobDir: <home>/blobs`, saving workflow "v01" with `{ doc }`, then `DROP TABLE workflow_blobs`
    // and its ledger rows deleted: test/fixtures/workflow/prev-0.1-blobdir.db.gz (the file) and
    // prev-0.1-blobdir.blob.gz (the blob's bytes, kept at blobs/<2 hex>/<sha256 hex>).
    unzipFixture("prev-0.1-blobdir.db.gz", file);
    const hex = refOf(doc).slice("sha256:".length);
    const blobFile = unzipFixture("prev-0.1-blobdir.blob.gz", path.join(home, "blobs", hex.slice(0, 2), hex));
    expect(blobRef(readFileSync(blobFile))).toBe(refOf(doc));
    const shown = runJson<{ history: { state: { sharedMemory: { doc?: string } } }[] }>(
      ["workflows", "show", "v01", "--store", `sqlite:${file}`],
      { cwd: elsewhere },
    );
    expect(shown.history[0]?.state.sharedMemory.doc).toBe(doc);
    const after = new Database(file, { readonly: true });
    try {
      // Moved into the journal (ledger: journal, workflow 2), whose blob table it adds; the blob stays in the directory.
      const components = after
        .prepare(
          "SELECT component, MAX(version) AS version FROM dumplings_migrations GROUP BY component ORDER BY component",
        )
        .all();
      const latest = (migrations: { version: number }[]) => Math.max(...migrations.map((m) => m.version));
      expect(components).toContainEqual({
        component: "journal",
        version: latest(sqlJournalMigrations("durable_", { table: (n) => n, bigint: "INTEGER", keyed: "" })),
      });
      expect(components).toContainEqual({
        component: "workflow",
        version: latest(workflowJournalMigrations("durable_").migrations),
      });
      expect(after.prepare("SELECT COUNT(*) AS n FROM durable_blobs").get()).toEqual({ n: 0 });
      expect(after.prepare("SELECT name FROM sqlite_master WHERE name = 'workflow_blobs'").all()).toEqual([]);
      expect(readdirSync(path.join(home, "blobs"), { recursive: true }).length).toBeGreaterThan(0);
    } finally {
      after.close();
    }
  });
});

/** The SQLite file of a fixture (from its CLI arguments). */
const sqlitePath = (fx: Fixture) => fx.storeArgs[1]!.slice("sqlite:".length);
/** The PostgreSQL schema of a fixture (from its CLI arguments). */
const pgSchema = (fx: Fixture) => fx.storeArgs[3]!;

describe("blob options", () => {
  it("blobDir is resolved once, when the store is opened; blobs and blobDir together are refused", async () => {
    const dir = path.join(tmp.dir, "options");
    mkdirSync(dir);
    const cold = new SqliteColdStore({ path: path.join(dir, "o.db") });
    const store = await CheckpointStore.open({ cold, blobDir: "relative/blobs" });
    try {
      expect((store.blobs as FsBlobStore).dir).toBe(path.resolve("relative/blobs"));
    } finally {
      await store.close();
    }
    const again = () => new SqliteColdStore({ path: path.join(dir, "o.db") });
    for (const [options, option] of [
      [{ blobs: new FsBlobStore(dir), blobDir: dir }, "blobDir"],
      [{ blobDir: dir, legacyBlobDirs: [dir] }, "legacyBlobDirs"],
      [{ legacyBlobDirs: "dir" }, "legacyBlobDirs"],
      [{ blobDir: "" }, "blobDir"],
      [{ blobs: {} }, "blobs"],
    ] as const) {
      const c = again();
      await expect(CheckpointStore.open({ cold: c, ...(options as object) })).rejects.toMatchObject({
        code: "INVALID_OPTION",
        option,
      });
      await c.close();
    }
  });

  it("a cold store that keeps no blobs: a large value is a BlobError naming the options, nothing written", async () => {
    const dir = path.join(tmp.dir, "custom");
    mkdirSync(dir);
    const inner = new SqliteColdStore({ path: path.join(dir, "c.db") });
    // A user's own cold store: the contract without the optional blob methods.
    const cold: ColdStore = {
      name: "custom",
      init: () => inner.init(),
      write: (row, expected) => inner.write(row, expected),
      read: (id, step) => inner.read(id, step),
      latest: (id) => inner.latest(id),
      summary: (id) => inner.summary(id),
      history: (id) => inner.history(id),
      list: (q) => inner.list(q),
      explainList: (st) => inner.explainList(st),
      deleteWorkflow: (id) => inner.deleteWorkflow(id),
      prune: (c, k, o) => inner.prune(c, k, o),
      recordError: (r) => inner.recordError(r),
      errors: (id) => inner.errors(id),
      idempotencyBegin: (k, i) => inner.idempotencyBegin(k, i),
      idempotencyFinish: (k, r, n) => inner.idempotencyFinish(k, r, n),
      idempotencyAbandon: (k) => inner.idempotencyAbandon(k),
      close: () => inner.close(),
    };
    const store = await CheckpointStore.open({ cold, legacyBlobDirs: [] });
    try {
      const err = await store
        .save(createWorkflowState({ workflowId: "c", sharedMemory: { doc: big("c") } }), { expectedStep: null })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BlobError);
      expect((err as Error).message).toMatch(/keeps no blobs.*blobDir/);
      expect(await store.loadLatest("c")).toBeUndefined();
      await store.save(createWorkflowState({ workflowId: "small" }), { expectedStep: null }); // small values are fine
    } finally {
      await store.close();
    }
  });
});
