/**
 * `CheckpointStore`: workflow snapshots in two tiers — a cold store that is
 * the source of truth (SQLite or PostgreSQL, one row per step) and an
 * optional Redis hot tier holding each workflow's latest snapshot with a TTL.
 *
 * `save` writes cold first (a failure throws: the runner stops without
 * advancing), then hot (a failure is logged and counted in
 * {@link CheckpointStore.stats}, never thrown). `loadLatest` reads the hot
 * entry and the cold summary's latest step together; the hot entry is used
 * only when it is the newest step, else (missing, expired, stale, Redis down)
 * the cold row is read and the hot tier refilled. Large `sharedMemory`
 * values go to a content-addressed blob store: by default a table of the
 * cold store's own database, written in the checkpoint's transaction, so
 * they live (and are deleted) with the checkpoints. Snapshots carry a
 * `schemaVersion`; registered migrations upgrade old ones on load, and every
 * load validates strictly.
 *
 * The two-tier layout follows the "hot cache + durable archive" split common
 * to LangGraph's Redis/Postgres checkpointers; the compare-and-set on the
 * step index is ours.
 *
 * @module
 */
import type { z } from "zod";
import { InvalidOptionError } from "../core/errors.js";
import { assertJson, isJsonObject, type JsonValue } from "../core/json.js";
import { checkLogger, currentLogger, type Logger, log } from "../core/logger.js";
import { checkOptions, optionKeys, shownValue } from "../core/options.js";
import {
  type BlobStore,
  blobRef,
  ColdBlobStore,
  DEFAULT_BLOB_THRESHOLD,
  externalizeBlobs,
  FsBlobStore,
  internalizeBlobs,
  JsonChunks,
  legacyBlobDirs,
} from "../durable/checkpoints/blobs.js";
import {
  type ColdStore,
  type DropMonthResult,
  decodeCursor,
  encodeCursor,
  type SnapshotMonth,
  type StepErrorRecord,
  type StoredSnapshot,
  type WorkflowRowStatus,
  type WorkflowSummary,
} from "../durable/checkpoints/contract.js";
import type { HotEntry, RedisHotTier } from "../durable/checkpoints/hot-redis.js";
import { fromOriginalNode, fromOriginalSnapshot, isOriginalSnapshot } from "../durable/checkpoints/original.js";
import { WorkflowNotFoundError, WorkflowStateError } from "./errors.js";
import {
  type AnyWorkflowStateSchema,
  END,
  MigrationRegistry,
  parseWorkflowState,
  type StateMigration,
  type WorkflowState,
  WorkflowStateSchema,
} from "./state.js";

const DROP_OPTIONS = optionKeys<{ keepLast?: number; archiveTo?: string }>({ keepLast: true, archiveTo: true });
/** The keys of `CheckpointStore.prune`'s options: any other is an `InvalidOptionError`. */
const PRUNE_OPTIONS = optionKeys<{ olderThan: unknown; keepLast?: unknown; vacuum?: unknown; archiveDir?: unknown }>({
  olderThan: true,
  keepLast: true,
  vacuum: true,
  archiveDir: true,
});
/** The keys of {@link CheckpointSaveOptions}: any other is an `InvalidOptionError`. */
const SAVE_OPTIONS = optionKeys<CheckpointSaveOptions>({
  expectedStep: true,
  nodeName: true,
  fencingToken: true,
});

/** The keys of {@link CheckpointStoreOptions}: any other is an `InvalidOptionError`. */
const STORE_OPTIONS = optionKeys<CheckpointStoreOptions>({
  cold: true,
  hot: true,
  schema: true,
  schemaVersion: true,
  blobs: true,
  blobDir: true,
  legacyBlobDirs: true,
  blobThreshold: true,
  onHotError: true,
  logger: true,
});

/** Options of {@link CheckpointStore.open}. */
export interface CheckpointStoreOptions<S extends AnyWorkflowStateSchema = typeof WorkflowStateSchema> {
  // Optional options take `undefined` too (`hot: url ? new RedisHotTier({ url }) : undefined` compiles under
  // `exactOptionalPropertyTypes`); undefined is the default.
  /** The source of truth: a `SqliteColdStore` or `PostgresColdStore` (or your own {@link ColdStore}). */
  cold: ColdStore;
  /** Optional Redis cache of the latest snapshot per workflow. */
  hot?: RedisHotTier | undefined;
  /** State schema (from `defineWorkflowState`). @default WorkflowStateSchema (free-form sharedMemory) */
  schema?: S | undefined;
  /** Version of the application's state schema written into new snapshots. @default 1 */
  schemaVersion?: number | undefined;
  /**
   * Where large values go instead of the cold store's database: your own {@link BlobStore}
   * (S3, GCS…). Not with `blobDir`.
   * @default the cold store's own database (the journal's `durable_blobs` table beside the checkpoints), for a
   *   cold store that keeps blobs (`SqliteColdStore`, `PostgresColdStore`)
   */
  blobs?: BlobStore | undefined;
  /**
   * Keep large values in this directory (an {@link FsBlobStore}) instead of the cold store's
   * database; a relative path is resolved once, against the working directory when the store is
   * opened. Every process that opens the store must see the same directory (and pass it). Not with `blobs`.
   * @default none: blobs live in the cold store's database
   */
  blobDir?: string | undefined;
  /**
   * With the default blob store: directories to read a blob from when the database does not hold
   * it (blobs written by dumplings-ai 0.1, which kept them in a directory), read-only and verified
   * against their hash; `[]` reads none. Relative paths are resolved once, when the store is opened.
   * @default ["./.dumplingsAI_workflows/blobs" of the working directory, "blobs" beside the SQLite file]
   */
  legacyBlobDirs?: readonly string[] | undefined;
  /** Size (bytes of JSON) above which a top-level `sharedMemory` value goes to the blob store. @default 262144 (256 KB) */
  blobThreshold?: number | undefined;
  /**
   * Receives hot-tier failures (they are never thrown).
   * @default one `warn` line to {@link CheckpointStoreOptions.logger} on the first failure after a success
   */
  onHotError?: ((error: unknown, operation: "get" | "put" | "delete", workflowId: string) => void) | undefined;
  /** This store's log lines (see `Logger`). @default the library's logger (`configure({ logger })`; the console) */
  logger?: Logger | undefined;
}

/** Counters of a store's activity since it was opened. */
export interface CheckpointStoreStats {
  /** Hot-tier operations that failed (Redis down, timeout…). */
  hotErrors: number;
  /** Loads served from the hot tier. */
  hotHits: number;
  /** Loads that found no hot entry (missing or expired). */
  hotMisses: number;
  /** Loads whose hot entry was older than the cold row. */
  hotStale: number;
  /** Snapshots written to the cold store. */
  coldWrites: number;
  /** Snapshots read from the cold store. */
  coldReads: number;
}

/** One step of a workflow's history. */
export interface HistoryEntry<T = WorkflowState> {
  stepIndex: number;
  /** Node (or `__start__`, `__resume__`, `__update__`, `__fork__`) that produced the checkpoint. */
  nodeName: string;
  /** ms since the epoch. */
  createdAt: number;
  state: T;
}

/** Options of {@link CheckpointStore.save}. */
export interface CheckpointSaveOptions {
  /**
   * Compare-and-set: the workflow's latest stored step must equal this (`null`: the workflow
   * must not exist yet). Omitted: plain upsert of the row at `state.stepIndex`.
   */
  expectedStep?: number | null;
  /** Node that produced the checkpoint, stored in `node_name`. @default state.currentNode */
  nodeName?: string;
  /**
   * The writer's lease token on the workflow (its run lease in the journal; the runner
   * passes its own): the checkpoint is written only while it is the workflow's current lease,
   * checked in the cold write's transaction. Omitted: no lease check.
   */
  fencingToken?: number;
}

/**
 * Two-tier checkpoint store. Create with {@link CheckpointStore.open}.
 *
 * @example
 * const store = await CheckpointStore.open({
 *   cold: new SqliteColdStore({ path: "./.dumplingsAI_workflows/checkpoints.db" }),
 *   hot: process.env.REDIS_URL ? new RedisHotTier({ url: process.env.REDIS_URL }) : undefined,
 * });
 * await store.save(createWorkflowState({ workflowId: "w1" }), { expectedStep: null });
 * const latest = await store.loadLatest("w1");
 */
export class CheckpointStore<S extends AnyWorkflowStateSchema = typeof WorkflowStateSchema> {
  /** Activity counters (hot-tier failures included). */
  readonly stats: CheckpointStoreStats = {
    hotErrors: 0,
    hotHits: 0,
    hotMisses: 0,
    hotStale: 0,
    coldWrites: 0,
    coldReads: 0,
  };
  /** The cold store. */
  readonly cold: ColdStore;
  /** The hot tier, when configured. */
  readonly hot: RedisHotTier | undefined;
  /** The state schema. */
  readonly schema: S;
  /** The blob store. */
  readonly blobs: BlobStore;
  private readonly migrations: MigrationRegistry;
  private readonly threshold: number;
  private readonly onHotError: NonNullable<CheckpointStoreOptions<S>["onHotError"]>;
  private readonly logger: Logger | undefined;
  private hotHealthy = true;

  private constructor(options: CheckpointStoreOptions<S>) {
    this.cold = options.cold;
    this.hot = options.hot;
    this.schema = (options.schema ?? WorkflowStateSchema) as S;
    this.migrations = new MigrationRegistry(options.schemaVersion ?? 1);
    this.blobs =
      options.blobs ??
      (options.blobDir !== undefined
        ? new FsBlobStore(options.blobDir)
        : new ColdBlobStore(options.cold, options.legacyBlobDirs ?? legacyBlobDirs(options.cold.location)));
    this.threshold = options.blobThreshold ?? DEFAULT_BLOB_THRESHOLD;
    this.logger = options.logger === undefined ? undefined : checkLogger("CheckpointStore.open", options.logger);
    this.onHotError =
      options.onHotError ??
      ((error, op, id) => {
        if (!this.hotHealthy) return;
        this.hotHealthy = false;
        const text = error instanceof Error ? error.message : String(error);
        log(
          "warn",
          `workflow hot tier (redis) ${op} failed for workflow ${JSON.stringify(id)}: ${text}; continuing on the cold store (further failures are counted in store.stats.hotErrors)`,
          { workflowId: id, op },
          this.logger ?? currentLogger(),
        );
      });
  }

  /**
   * Opens a store: creates the cold tables if missing.
   *
   * @param options - `cold` (required), `hot`, `schema`, `schemaVersion`, blob settings
   * @returns a ready store
   * @throws {BackendError} when the cold store cannot be initialised
   * @throws {InvalidOptionError} for an unknown option, a missing `cold` or one that is not a cold store instance
   *   (a SPEC string included), or a `hot` that is not a `RedisHotTier`
   */
  static async open<S extends AnyWorkflowStateSchema = typeof WorkflowStateSchema>(
    options: CheckpointStoreOptions<S>,
  ): Promise<CheckpointStore<S>> {
    checkOptions("CheckpointStore.open", options, STORE_OPTIONS);
    const cold = (options as Partial<CheckpointStoreOptions<S>> | undefined)?.cold as unknown;
    if (cold === null || typeof cold !== "object" || typeof (cold as Partial<ColdStore>).init !== "function") {
      const sqlite = typeof cold === "string" && cold.startsWith("sqlite:") ? JSON.stringify(cold.slice(7)) : "PATH";
      throw new InvalidOptionError(
        "CheckpointStore.open",
        "cold",
        `${cold === undefined ? "is required" : `must be a cold store instance, got ${typeof cold === "string" ? `the string ${JSON.stringify(cold)} (SPEC strings are taken by \`dumplings workflows --store\`, not here)` : cold === null ? "null" : typeof cold}`}: pass cold: new SqliteColdStore({ path: ${sqlite} }) or new PostgresColdStore({ url, schema }) (or your own ColdStore)`,
      );
    }
    const hot = options.hot as unknown;
    if (hot !== undefined && (hot === null || typeof (hot as Partial<RedisHotTier>).waitReady !== "function")) {
      throw new InvalidOptionError(
        "CheckpointStore.open",
        "hot",
        "must be a RedisHotTier (new RedisHotTier({ url })) or undefined (no hot tier)",
      );
    }
    checkBlobOptions(options);
    await options.cold.init();
    // Bounded: a dead Redis costs the connect timeout once, then the store runs on the cold tier.
    await options.hot?.waitReady();
    return new CheckpointStore<S>(options);
  }

  /** The schema version new snapshots are written with. */
  get schemaVersion(): number {
    return this.migrations.currentVersion;
  }

  /**
   * Registers a migration applied on load to snapshots of schema version `from`.
   *
   * @param from - version the migration reads
   * @param to - version it produces (`<= schemaVersion`)
   * @param fn - pure function of the raw snapshot object (JSON) returning the upgraded one
   * @throws {RangeError} on invalid versions or a duplicate
   * @example
   * store.registerMigration(1, 2, (s) => ({ ...s, sharedMemory: { ...(s.sharedMemory as object), tags: [] } }));
   */
  registerMigration(from: number, to: number, fn: StateMigration): void {
    this.migrations.register(from, to, fn);
  }

  private hotFailed(error: unknown, op: "get" | "put" | "delete", workflowId: string): void {
    this.stats.hotErrors++;
    try {
      this.onHotError(error, op, workflowId);
    } catch {
      // a failing logger must not turn a cache failure into a fatal one
    }
  }

  private hotOk(): void {
    this.hotHealthy = true;
  }

  /**
   * Validates a state against the schema (strict) and the JSON rules.
   *
   * @returns the parsed state (defaults filled)
   * @throws {WorkflowStateError} naming workflow, step and field path
   * @throws {NonJsonValueError} for a value JSON cannot carry, with its path
   */
  validate(state: unknown): z.infer<S> {
    const where = isJsonObject(state)
      ? {
          workflowId: typeof state.workflowId === "string" ? state.workflowId : undefined,
          stepIndex: typeof state.stepIndex === "number" ? state.stepIndex : undefined,
        }
      : {};
    if (isJsonObject(state)) {
      assertJson(state.sharedMemory, "sharedMemory");
      assertJson(state.historyRecords ?? [], "historyRecords");
    }
    return parseWorkflowState(this.schema, state, where);
  }

  /**
   * Saves a checkpoint: cold first (durable when this returns), then hot (best effort).
   *
   * @param state - the state to save (validated strictly; its `schemaVersion` is set to the store's)
   * @param options - `expectedStep` for compare-and-set, `nodeName` for the row
   * @returns the stored state
   * @throws {WorkflowStateError} / {NonJsonValueError} on an invalid state (nothing written)
   * @throws {ConflictError} when `expectedStep` does not match the latest stored step (nothing written)
   * @throws {WorkflowLeaseLostError} when `fencingToken` is no longer the workflow's lease (nothing written)
   * @throws {InvalidOptionError} when `expectedStep` is neither null nor a whole number >= 0
   * @throws {BackendError} when the cold store fails
   */
  async save(state: z.infer<S>, options: CheckpointSaveOptions = {}): Promise<z.infer<S>> {
    checkOptions("CheckpointStore.save", options, SAVE_OPTIONS);
    const expected = options.expectedStep;
    if (expected !== undefined && expected !== null && !(Number.isSafeInteger(expected) && expected >= 0)) {
      // a string ("3", from a request) or -1 was a ConflictError naming the same step twice
      throw new InvalidOptionError(
        "CheckpointStore.save",
        "expectedStep",
        `must be null or a whole number >= 0, got ${shownValue(expected)}`,
      );
    }
    const valid = this.validate({ ...(state as object), schemaVersion: this.schemaVersion }) as WorkflowState;
    // The snapshot's JSON (`JSON.stringify({ ...valid, sharedMemory: stored })`) as UTF-8 bytes, serialised
    // once and encoded once; both tiers write these bytes (the text is decoded only for a cold store that asks).
    const out = new JsonChunks();
    let refs: string[] = [];
    // Blobs kept by the cold store go with the checkpoint's own write (one transaction); others are put first.
    const withCheckpoint =
      this.blobs instanceof ColdBlobStore && this.blobs.inDatabase ? new Map<string, Uint8Array>() : undefined;
    const sink: Pick<BlobStore, "put"> = withCheckpoint
      ? {
          async put(bytes) {
            const ref = blobRef(bytes);
            withCheckpoint.set(ref, bytes);
            return ref;
          },
        }
      : this.blobs;
    let sep = "{";
    for (const [key, value] of Object.entries(valid)) {
      if (key === "sharedMemory") {
        out.push(`${sep}"sharedMemory":`);
        ({ refs } = await externalizeBlobs(valid.sharedMemory, sink, this.threshold, out));
      } else {
        const text = JSON.stringify(value);
        if (text === undefined) continue;
        out.push(`${sep}${JSON.stringify(key)}:${text}`);
      }
      sep = ",";
    }
    out.push("}");
    const stateBytes = out.encode();
    let stateJson: string | undefined;
    const status: WorkflowRowStatus = valid.isFinished ? "finished" : valid.status;
    await this.cold.write(
      {
        workflowId: valid.workflowId,
        stepIndex: valid.stepIndex,
        nodeName: options.nodeName ?? valid.currentNode,
        get stateJson() {
          stateJson ??= stateBytes.toString("utf8");
          return stateJson;
        },
        stateBytes,
        createdAt: valid.updatedAt,
        sessionId: valid.sessionId,
        status,
        currentNode: valid.isFinished ? END : valid.currentNode,
        parentWorkflowId: valid.parent?.workflowId ?? null,
        activeStep: valid.nodeRun?.startStep ?? valid.stepIndex,
        inNode: valid.nodeRun !== undefined && valid.nodeRun !== null,
        blobRefs: refs,
        ...(withCheckpoint === undefined ? {} : { blobs: withCheckpoint }),
      },
      options.expectedStep,
      options.fencingToken,
    );
    this.stats.coldWrites++;
    await this.putHot(valid.workflowId, valid.stepIndex, stateBytes);
    return valid as z.infer<S>;
  }

  private async putHot(workflowId: string, stepIndex: number, stateJson: string | Uint8Array): Promise<void> {
    if (!this.hot) return;
    try {
      await this.hot.put(workflowId, { stepIndex, stateJson });
      this.hotOk();
    } catch (e) {
      this.hotFailed(e, "put", workflowId);
    }
  }

  private async decode(
    row: { workflowId: string; stepIndex: number; stateJson: string; state?: JsonValue },
    blobTexts?: Map<string, string>,
  ): Promise<z.infer<S>> {
    const where = { workflowId: row.workflowId, stepIndex: row.stepIndex };
    let raw: unknown;
    try {
      raw = row.state !== undefined ? row.state : JSON.parse(row.stateJson);
    } catch (e) {
      throw new WorkflowStateError({ ...where, path: "", problem: "stored snapshot is not JSON", cause: e });
    }
    if (!isJsonObject(raw))
      throw new WorkflowStateError({ ...where, path: "", problem: "stored snapshot is not an object" });
    // Written in the original design's layout (snake_case, float seconds, START/END): read as the current shape.
    const current = isOriginalSnapshot(raw) ? fromOriginalSnapshot(raw, where) : raw;
    let upgraded = this.migrations.upgrade(current, where);
    if (isJsonObject(upgraded.sharedMemory)) {
      upgraded = { ...upgraded, sharedMemory: await internalizeBlobs(upgraded.sharedMemory, this.blobs, blobTexts) };
    }
    const state = parseWorkflowState(this.schema, upgraded, where) as WorkflowState;
    if (state.workflowId !== row.workflowId || state.stepIndex !== row.stepIndex) {
      throw new WorkflowStateError({
        ...where,
        path: state.workflowId !== row.workflowId ? "workflowId" : "stepIndex",
        problem: `snapshot holds ${JSON.stringify(state.workflowId)} step ${state.stepIndex}, but is stored as ${JSON.stringify(row.workflowId)} step ${row.stepIndex}`,
      });
    }
    return state as z.infer<S>;
  }

  /**
   * Loads a workflow's newest checkpoint (hot tier when it is current, else cold, refilling hot).
   *
   * @param workflowId - the workflow
   * @returns the state, or `undefined` when the workflow has no checkpoint
   * @throws {WorkflowStateError} / {WorkflowMigrationError} when the snapshot is invalid
   * @throws {BackendError} when the cold store fails
   */
  async loadLatest(workflowId: string): Promise<z.infer<S> | undefined> {
    const FAILED = "failed" as const;
    const hotRead: Promise<HotEntry | undefined | typeof FAILED> = this.hot
      ? this.hot.get(workflowId).then(
          (entry) => {
            this.hotOk();
            return entry;
          },
          (e: unknown) => {
            this.hotFailed(e, "get", workflowId);
            return FAILED;
          },
        )
      : Promise.resolve(FAILED);
    // The newest step index is all the hot entry is checked against: read alone when the store can.
    const latest = this.cold.newestStep
      ? this.cold.newestStep(workflowId).then((latestStep) => (latestStep === undefined ? undefined : { latestStep }))
      : this.cold.summary(workflowId);
    const [entry, summary] = await Promise.all([hotRead, latest]);
    if (!summary) {
      // (An entry in the original layout is left alone: its archive may be another database.)
      if (entry !== FAILED && entry !== undefined && !entry.original && this.hot) {
        // A hot entry without cold rows is an orphan (e.g. a delete whose hot half failed): remove it.
        await this.hot.delete(workflowId).catch((e: unknown) => this.hotFailed(e, "delete", workflowId));
      }
      return undefined;
    }
    if (entry !== FAILED) {
      if (entry && entry.stepIndex === summary.latestStep) {
        try {
          const state = await this.decode({ workflowId, stepIndex: entry.stepIndex, stateJson: entry.stateJson });
          this.stats.hotHits++;
          return state;
        } catch (e) {
          // A corrupted cache entry is a cache failure: count it and read the truth.
          this.hotFailed(e, "get", workflowId);
        }
      } else if (entry) this.stats.hotStale++;
      else this.stats.hotMisses++;
    }
    const row = await this.cold.latest(workflowId);
    if (!row) return undefined;
    this.stats.coldReads++;
    // The text for the hot tier is taken before decoding (a migration may change a parsed state in place).
    const text = this.hot ? row.stateJson : "";
    const state = await this.decode(row);
    await this.putHot(workflowId, row.stepIndex, text);
    return state;
  }

  /**
   * Loads one stored step (from the cold store).
   *
   * @throws {WorkflowNotFoundError} when there is no such step
   * @throws {WorkflowStateError} when the snapshot is invalid
   */
  async get(workflowId: string, stepIndex: number): Promise<z.infer<S>> {
    const row = await this.cold.read(workflowId, stepIndex);
    if (!row) throw new WorkflowNotFoundError(workflowId, stepIndex);
    this.stats.coldReads++;
    return this.decode(row);
  }

  /**
   * Every stored step of a workflow, oldest first.
   *
   * @returns entries `{ stepIndex, nodeName, createdAt, state }` (empty when the workflow does not exist)
   */
  async history(workflowId: string): Promise<HistoryEntry<z.infer<S>>[]> {
    const rows: StoredSnapshot[] = await this.cold.history(workflowId);
    const out: HistoryEntry<z.infer<S>>[] = [];
    const blobTexts = new Map<string, string>(); // a large value unchanged over the steps is read once
    for (const row of rows) {
      const state = await this.decode(row, blobTexts);
      out.push({
        stepIndex: row.stepIndex,
        // START/END of rows in the original layout are __start__/__end__ here
        nodeName: /^\s*\{\s*"workflowId"/.test(row.stateJson) ? row.nodeName : fromOriginalNode(row.nodeName),
        createdAt: row.createdAt,
        state,
      });
    }
    return out;
  }

  /** The summary row of a workflow (status, latest step, updated time), or `undefined`. */
  summary(workflowId: string): Promise<WorkflowSummary | undefined> {
    return this.cold.summary(workflowId);
  }

  /**
   * Lists workflows, newest created first by `(createdAt, workflowId)` (both descending), with keyset
   * pagination (index-backed, so a page costs the same at 100,000 workflows as at 10). Both keys are
   * fixed when a workflow is created, so a walk that follows `nextCursor` lists each workflow exactly
   * once while workflows run, wait, finish or fail between its pages; one created during the walk is
   * not listed by its later pages (a new walk shows it first), never twice. With `status`, a workflow
   * is listed when it has that status as its page is read.
   *
   * @param query - `status` filter, `limit` (default 50, max 1000), `cursor` from the previous page
   * @returns `{ items, nextCursor }` (`nextCursor` undefined on the last page)
   * @throws {RangeError} on a limit outside 1..1000
   * @throws {InvalidOptionError} (option `cursor`) on a cursor `listWorkflows` did not make, or one of an
   *   earlier release (which listed by update time: list again from the first page)
   * @example
   * let page = await store.listWorkflows({ status: "waiting", limit: 100 });
   * while (page.nextCursor) page = await store.listWorkflows({ status: "waiting", limit: 100, cursor: page.nextCursor });
   */
  async listWorkflows(
    query: { status?: WorkflowRowStatus; limit?: number; cursor?: string } = {},
  ): Promise<{ items: WorkflowSummary[]; nextCursor: string | undefined }> {
    const limit = query.limit ?? 50;
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
      throw new RangeError(`limit must be 1..1000, got ${limit}`);
    const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
    const rows = await this.cold.list({ status: query.status, limit: limit + 1, after });
    const items = rows.slice(0, limit);
    const last = items[items.length - 1];
    return {
      items,
      nextCursor:
        rows.length > limit && last
          ? encodeCursor({ createdAt: last.createdAt, workflowId: last.workflowId })
          : undefined,
    };
  }

  /**
   * Deletes a workflow from both tiers: every snapshot, its summary, errors, side-effect
   * records, and blobs no other snapshot references. Its lease ends (a cold store that keeps
   * leases raises its fencing token): a worker still running it has its next checkpoint and
   * side-effect start refused, and a token from before the delete never passes a fence again.
   *
   * @returns whether the workflow existed
   * @throws {BackendError} when the cold store fails (the hot entry is then left too)
   */
  async delete(workflowId: string): Promise<boolean> {
    const { existed, orphanRefs } = this.external
      ? await this.cold.deleteWorkflow(workflowId, { orphanRefs: true })
      : await this.cold.deleteWorkflow(workflowId);
    if (this.hot) await this.hot.delete(workflowId).catch((e: unknown) => this.hotFailed(e, "delete", workflowId));
    await this.deleteBlobs(orphanRefs);
    return existed;
  }

  /**
   * Whether the blobs live outside the cold store and can be deleted (`blobs`/`blobDir`): the cold
   * store is then asked to name the references its deletes leave unreferenced (`orphanRefs`).
   */
  private get external(): boolean {
    return !(this.blobs instanceof ColdBlobStore) && typeof this.blobs.delete === "function";
  }

  private async deleteBlobs(refs: string[]): Promise<number> {
    // The cold store deleted those it kept in the transaction that removed their last reference.
    if (this.blobs instanceof ColdBlobStore) return refs.length;
    if (!this.blobs.delete) return 0;
    for (const ref of refs) await this.blobs.delete(ref);
    return refs.length;
  }

  /**
   * Retention: deletes snapshots older than `olderThan`, always keeping each workflow's newest
   * `keepLast` steps (so every workflow stays resumable), plus unreferenced blobs and the
   * side-effect records of finished node runs.
   *
   * SQLite keeps one snapshot table per month: a month that ends before the cutoff is dropped
   * whole (each workflow's newest `keepLast` checkpoints in it carried into the current month),
   * after being copied to `<archiveDir>/workflow_snapshots_YYYY_MM.db` when `archiveDir` is
   * given; the rest is deleted row by row. SQLite then runs an incremental vacuum, or a full
   * `VACUUM` with `vacuum: "full"`; PostgreSQL deletes in batches from its one table
   * (`VACUUM (FULL)` of the workflow tables with `vacuum: "full"`).
   *
   * @param options - `olderThan`: an age in ms or a `Date` cutoff; `keepLast` (default 1, min 1);
   *   `vacuum`: `"incremental"` (default) or `"full"`; `archiveDir`: where whole months are copied
   *   before they are dropped (SQLite)
   * @returns `{ deletedSnapshots, deletedBlobs, droppedMonths }` (`droppedMonths`: `YYYY-MM` of each
   *   month dropped whole, with `archivedTo`)
   * @throws {RangeError} when `keepLast` is not an integer >= 1
   * @throws {InvalidOptionError} for a bad `vacuum`, an `archiveDir` on a store without months,
   *   or an archive file that exists (that month is then left as it was)
   * @throws {BackendError} when the cold store fails
   * @example
   * await store.prune({ olderThan: 90 * 24 * 3600_000, keepLast: 5, archiveDir: "./archive", vacuum: "full" });
   */
  async prune(options: {
    olderThan: number | Date;
    keepLast?: number;
    vacuum?: "incremental" | "full";
    archiveDir?: string;
  }): Promise<{
    deletedSnapshots: number;
    deletedBlobs: number;
    droppedMonths: { month: string; archivedTo: string | null }[];
  }> {
    checkOptions("CheckpointStore.prune", options, PRUNE_OPTIONS);
    const keepLast = options.keepLast ?? 1;
    if (!Number.isInteger(keepLast) || keepLast < 1)
      throw new RangeError(`keepLast must be an integer >= 1, got ${keepLast}`);
    const cutoff = options.olderThan instanceof Date ? options.olderThan.getTime() : Date.now() - options.olderThan;
    const extra = {
      ...(options.vacuum === undefined ? {} : { vacuum: options.vacuum }),
      ...(options.archiveDir === undefined ? {} : { archiveDir: options.archiveDir }),
      ...(this.external ? { orphanRefs: true } : {}),
    };
    const out = await this.cold.prune(cutoff, keepLast, extra);
    return {
      deletedSnapshots: out.deletedSnapshots,
      deletedBlobs: (out.deletedBlobs ?? 0) + (await this.deleteBlobs(out.orphanRefs)),
      droppedMonths: (out.droppedMonths ?? []).map((m) => ({ month: m.month, archivedTo: m.archivedTo })),
    };
  }

  /**
   * The cold store's snapshot tables by month, with row counts (SQLite splits its archive by
   * month; PostgreSQL reports its one table as `unpartitioned`).
   *
   * @returns months oldest first (`unpartitioned`, a file written before the split, first)
   * @example
   * for (const m of await store.months()) console.log(m.month, m.snapshots);
   */
  async months(): Promise<SnapshotMonth[]> {
    if (this.cold.months) return this.cold.months();
    return [];
  }

  /**
   * Drops one past month of checkpoints whole (SQLite), after copying it to `archiveTo` when
   * given. Each workflow's newest `keepLast` checkpoints in that month are carried into the
   * current month, so every workflow stays resumable; blobs no snapshot references any more
   * are deleted.
   *
   * @param month - `YYYY-MM` (UTC), before the current month
   * @param options - `keepLast` (default 1, min 1); `archiveTo`: a new SQLite file (never overwritten)
   * @returns what was dropped, carried forward and archived, and `deletedBlobs`
   * @throws {InvalidOptionError} for a malformed, current or future month, one the store does not
   *   hold, an existing `archiveTo` file, or a cold store that does not split by month
   * @example
   * await store.dropMonth("2026-01", { archiveTo: "./archive/2026-01.db" });
   */
  async dropMonth(
    month: string,
    options: { keepLast?: number; archiveTo?: string } = {},
  ): Promise<Omit<DropMonthResult, "orphanRefs" | "deletedBlobs"> & { deletedBlobs: number }> {
    checkOptions("CheckpointStore.dropMonth", options, DROP_OPTIONS);
    if (!this.cold.dropMonth) {
      throw new InvalidOptionError(this.cold.name, "month", "this cold store does not split its snapshots by month");
    }
    const { orphanRefs, deletedBlobs, ...out } = await this.cold.dropMonth(month, {
      keepLast: options.keepLast ?? 1,
      ...(options.archiveTo === undefined ? {} : { archiveTo: options.archiveTo }),
      ...(this.external ? { orphanRefs: true } : {}),
    });
    return { ...out, deletedBlobs: (deletedBlobs ?? 0) + (await this.deleteBlobs(orphanRefs)) };
  }

  /**
   * Records a node failure with the step it started from; the workflow's status becomes `failed`.
   *
   * @param record - the failure
   * @param fencingToken - the writer's lease token: recorded only while it is the workflow's lease
   * @throws {WorkflowLeaseLostError} when `fencingToken` is no longer the lease (nothing written)
   */
  recordError(record: StepErrorRecord, fencingToken?: number): Promise<void> {
    return this.cold.recordError(record, fencingToken);
  }

  /** The node failures recorded for a workflow, oldest first. */
  errors(workflowId: string): Promise<StepErrorRecord[]> {
    return this.cold.errors(workflowId);
  }

  /** Closes both tiers (clients the tiers created; injected clients stay open). */
  async close(): Promise<void> {
    await this.hot?.close();
    await this.cold.close();
  }
}

/**
 * The blob options of {@link CheckpointStore.open}: one place for large values.
 *
 * @throws {InvalidOptionError} for `blobs` with `blobDir`, `legacyBlobDirs` with either, a `blobs`
 *   without `put`/`get`, or a `blobDir`/`legacyBlobDirs` that is not a non-empty path
 */
function checkBlobOptions(options: CheckpointStoreOptions<AnyWorkflowStateSchema>): void {
  const fail = (option: string, message: string): never => {
    throw new InvalidOptionError("CheckpointStore.open", option, message);
  };
  const { blobs, blobDir, legacyBlobDirs: legacy } = options;
  if (blobs !== undefined && blobDir !== undefined) {
    fail("blobDir", "give blobs (your own BlobStore) or blobDir (a directory), not both");
  }
  if (blobs !== undefined) {
    const b = blobs as Partial<BlobStore> | null;
    if (b === null || typeof b !== "object" || typeof b.put !== "function" || typeof b.get !== "function") {
      fail("blobs", "must be a BlobStore: an object with put(bytes) and get(ref)");
    }
  }
  if (blobDir !== undefined && (typeof blobDir !== "string" || blobDir === "")) {
    fail("blobDir", `must be a directory path, got ${shownValue(blobDir)}`);
  }
  if (legacy !== undefined) {
    if (blobs !== undefined || blobDir !== undefined) {
      fail("legacyBlobDirs", "is read by the default blob store only (not with blobs or blobDir)");
    }
    if (!Array.isArray(legacy) || legacy.some((d) => typeof d !== "string" || d === "")) {
      fail("legacyBlobDirs", "must be an array of directory paths");
    }
  }
}
