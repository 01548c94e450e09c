/**
 * {@link DumplingsSaver}: a LangGraph.js checkpointer (`BaseCheckpointSaver`
 * of `@langchain/langgraph-checkpoint`) on this library's stores.
 *
 * Checkpoints are stored without their channel values; each channel value is
 * stored once per version, only when `put` is told the version changed
 * (`newVersions`), and an append-only channel as the items appended since the
 * parent checkpoint's version (see `channels.ts`): a thread's storage grows
 * with its messages, not with messages × checkpoints. Values, metadata and
 * pending writes go through the saver's `serde` (LangGraph's
 * `JsonPlusSerializer` unless one is given), as LangGraph's own savers do.
 *
 * @module
 */
import { isDeepStrictEqual } from "node:util";
import type { RunnableConfig } from "@langchain/core/runnables";
import {
  BaseCheckpointSaver,
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointPendingWrite,
  type CheckpointTuple,
  compareWritesSortKeys,
  copyCheckpoint,
  maxChannelVersion,
  type PendingWrite,
  type SerializerProtocol,
  TASKS,
  WRITES_IDX_MAP,
  writesSortKey,
} from "@langchain/langgraph-checkpoint";
import { InvalidOptionError } from "../core/errors.js";
import { type ChannelValue, type DeltaPolicy, decodeChannel, encodeChannel, MISSING } from "./channels.js";
import { type DumplingsSaverOptions, openSaverStorage } from "./options.js";
import type { BlobRow, CheckpointRow, SaverStorage, WriteRow } from "./storage.js";

/** Entries kept in memory per saver: the newest value of each thread, namespace and channel, and the newest versions of each thread and namespace (least recently written dropped first). */
const VALUE_CACHE_SIZE = 256;

function requireString(config: RunnableConfig, field: string, what: string): string {
  const value = config.configurable?.[field];
  if (typeof value !== "string" || (field !== "checkpoint_ns" && value === "")) {
    throw new InvalidOptionError(
      "langgraph",
      `configurable.${field}`,
      `${what} needs a string ${field} in config.configurable, got ${value === undefined ? "none" : JSON.stringify(value)}`,
    );
  }
  return value;
}

/**
 * A LangGraph.js checkpointer on SQLite, PostgreSQL, Redis or memory. Pass it to
 * `graph.compile({ checkpointer })`; everything LangGraph does with a
 * checkpointer works (`getState`, `getStateHistory`, time travel with
 * `checkpoint_id`, `interrupt` + `Command({ resume })`, pending writes,
 * `deleteThread`).
 *
 * Channel versions are numbers (LangGraph's type) with a random fraction,
 * so two branches forked from one checkpoint never give one channel the
 * same version.
 *
 * @example
 * import { DumplingsSaver } from "dumplings-ai/langgraph";
 * const checkpointer = new DumplingsSaver({ store: { sqlite: { path: "./graph.db" } } });
 * const graph = builder.compile({ checkpointer });
 * await graph.invoke({ messages: [new HumanMessage("hi")] }, { configurable: { thread_id: "t-1" } });
 */
export class DumplingsSaver extends BaseCheckpointSaver {
  /** The store the saver writes to. */
  readonly storage: SaverStorage;
  private readonly policy: DeltaPolicy;
  /** `thread\0ns\0channel` → the newest value this process wrote or read (LRU by insertion). */
  private readonly values = new Map<string, ChannelValue>();
  /** `thread\0ns` → the channel versions of the last checkpoint written or read. */
  private readonly lastVersions = new Map<string, { id: string; versions: ChannelVersions }>();

  /**
   * @param options - `store` (required): `{ memory: true }`, `{ sqlite: { path } }`,
   *   `{ postgres: { url, schema } }`, `{ redis: { url, keyPrefix } }` or a {@link SaverStorage}; `serde`; `maxDeltaChain` (default 1000);
   *   `minFullItems` (default 32)
   * @throws {InvalidOptionError} on a missing or unknown store, or a bad option
   * @throws {BackendError} when a SQLite file cannot be opened
   */
  constructor(options: DumplingsSaverOptions & { serde?: SerializerProtocol }) {
    super(options?.serde);
    const { storage, policy } = openSaverStorage(options);
    this.storage = storage;
    this.policy = policy;
  }

  /**
   * The next version of a channel: the integer after `current`'s, plus a random
   * fraction below 0.5 so versions written on two branches never collide.
   */
  override getNextVersion(current: number | undefined): number {
    const base = typeof current === "number" ? Math.floor(current) : Number.parseInt(String(current ?? 0), 10) || 0;
    return base + 1 + Math.random() / 2;
  }

  /** {@inheritDoc BaseCheckpointSaver.getTuple} */
  async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    // As LangGraph's savers: no thread, no checkpoint.
    if (config.configurable?.thread_id === undefined) return undefined;
    const threadId = requireString(config, "thread_id", "getTuple");
    const ns = (config.configurable?.checkpoint_ns as string | undefined) ?? "";
    const checkpointId = (config.configurable?.checkpoint_id as string | undefined) || undefined;
    const row = await this.storage.getCheckpoint(threadId, ns, checkpointId);
    return row === undefined ? undefined : this.toTuple(row);
  }

  /** {@inheritDoc BaseCheckpointSaver.list} (`filter` matches metadata keys by deep equality) */
  async *list(config: RunnableConfig, options: CheckpointListOptions = {}): AsyncGenerator<CheckpointTuple> {
    const { before, filter } = options;
    let limit = options.limit;
    if (limit !== undefined && limit <= 0) return;
    const hasFilter = filter !== undefined && Object.keys(filter).length > 0;
    const rows = this.storage.listCheckpoints({
      threadId: config.configurable?.thread_id as string | undefined,
      ns: config.configurable?.checkpoint_ns as string | undefined,
      checkpointId: (config.configurable?.checkpoint_id as string | undefined) || undefined,
      before: (before?.configurable?.checkpoint_id as string | undefined) || undefined,
      limit: hasFilter ? undefined : limit,
    });
    for await (const row of rows) {
      if (hasFilter) {
        const metadata = (await this.serde.loadsTyped(row.metadataType, row.metadata)) as Record<string, unknown>;
        if (!Object.entries(filter).every(([k, v]) => isDeepStrictEqual(metadata?.[k], v))) continue;
      }
      yield await this.toTuple(row);
      if (limit !== undefined && --limit <= 0) return;
    }
  }

  /** {@inheritDoc BaseCheckpointSaver.put} (values only of the channels in `newVersions`) */
  async put(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    newVersions: ChannelVersions,
  ): Promise<RunnableConfig> {
    const threadId = requireString(config, "thread_id", "put");
    const ns = (config.configurable?.checkpoint_ns as string | undefined) ?? "";
    const parentId = (config.configurable?.checkpoint_id as string | undefined) || null;
    const copy = copyCheckpoint(checkpoint);
    const values = copy.channel_values as Record<string, unknown>;
    copy.channel_values = {};
    const blobs: BlobRow[] = [];
    const entries: ChannelValue[] = [];
    for (const [channel, version] of Object.entries(newVersions)) {
      const value = Object.hasOwn(values, channel) ? values[channel] : MISSING;
      const prev = Array.isArray(value) ? await this.previous(threadId, ns, parentId, channel) : undefined;
      const { row, entry } = await encodeChannel(this.serde, channel, String(version), value, prev, this.policy);
      blobs.push(row);
      entries.push(entry);
    }
    const [[type, bytes], [metadataType, metadataBytes]] = await Promise.all([
      this.serde.dumpsTyped(copy),
      this.serde.dumpsTyped(metadata),
    ]);
    const row: CheckpointRow = {
      threadId,
      ns,
      checkpointId: checkpoint.id,
      parentId,
      type,
      checkpoint: bytes,
      metadataType,
      metadata: metadataBytes,
    };
    await this.storage.putCheckpoint(row, blobs);
    for (const [i, entry] of entries.entries()) this.remember(threadId, ns, blobs[i]?.channel, entry);
    const space = `${threadId}\0${ns}`;
    this.lastVersions.delete(space);
    this.lastVersions.set(space, { id: checkpoint.id, versions: { ...checkpoint.channel_versions } });
    if (this.lastVersions.size > VALUE_CACHE_SIZE) {
      const oldest = this.lastVersions.keys().next().value;
      if (oldest !== undefined) this.lastVersions.delete(oldest);
    }
    return { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: checkpoint.id } };
  }

  /** {@inheritDoc BaseCheckpointSaver.putWrites} (idempotent per task and index, as LangGraph's savers are) */
  async putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath?: string): Promise<void> {
    const threadId = requireString(config, "thread_id", "putWrites");
    const checkpointId = requireString(config, "checkpoint_id", "putWrites");
    const ns = (config.configurable?.checkpoint_ns as string | undefined) ?? "";
    const rows: WriteRow[] = await Promise.all(
      writes.map(async ([channel, value], i) => {
        const [type, data] = await this.serde.dumpsTyped(value);
        return { taskId, idx: WRITES_IDX_MAP[channel] ?? i, channel, taskPath: taskPath ?? "", type, data };
      }),
    );
    await this.storage.putWrites(threadId, ns, checkpointId, rows);
  }

  /** {@inheritDoc BaseCheckpointSaver.deleteThread} */
  async deleteThread(threadId: string): Promise<void> {
    await this.storage.deleteThread(threadId);
    const prefix = `${threadId}\0`;
    for (const key of [...this.values.keys()]) if (key.startsWith(prefix)) this.values.delete(key);
    for (const key of [...this.lastVersions.keys()]) if (key.startsWith(prefix)) this.lastVersions.delete(key);
  }

  /**
   * Closes the store (never an injected database, pool or client).
   * @throws {BackendError} when the store fails to close
   */
  async close(): Promise<void> {
    await this.storage.close();
  }

  private remember(threadId: string, ns: string, channel: string | undefined, entry: ChannelValue): void {
    if (channel === undefined || entry.kind === "empty" || !Array.isArray(entry.value)) return;
    const key = `${threadId}\0${ns}\0${channel}`;
    this.values.delete(key);
    // A shallow copy: a channel that pushes into its value in place cannot change what a later delta is computed against.
    this.values.set(key, { ...entry, value: [...entry.value] });
    if (this.values.size > VALUE_CACHE_SIZE) {
      const oldest = this.values.keys().next().value;
      if (oldest !== undefined) this.values.delete(oldest);
    }
  }

  /** The value of `channel` at the parent checkpoint, from memory or the store. */
  private async previous(
    threadId: string,
    ns: string,
    parentId: string | null,
    channel: string,
  ): Promise<ChannelValue | undefined> {
    if (parentId === null) return undefined;
    const last = this.lastVersions.get(`${threadId}\0${ns}`);
    let versions: ChannelVersions | undefined;
    if (last !== undefined && last.id === parentId) versions = last.versions;
    else {
      const parent = await this.storage.getCheckpoint(threadId, ns, parentId);
      if (parent === undefined) return undefined;
      versions = ((await this.serde.loadsTyped(parent.type, parent.checkpoint)) as Checkpoint).channel_versions;
    }
    const version = versions?.[channel];
    if (version === undefined) return undefined;
    const cached = this.values.get(`${threadId}\0${ns}\0${channel}`);
    if (cached !== undefined && cached.version === String(version)) return cached;
    const rows = await this.storage.getBlobs(threadId, ns, [{ channel, version: String(version) }]);
    const entry = await decodeChannel(this.serde, indexRows(rows), channel, String(version));
    if (entry !== undefined) this.remember(threadId, ns, channel, entry);
    return entry;
  }

  private async toTuple(row: CheckpointRow): Promise<CheckpointTuple> {
    const { threadId, ns, checkpointId } = row;
    const checkpoint = (await this.serde.loadsTyped(row.type, row.checkpoint)) as Checkpoint;
    const wanted = Object.entries(checkpoint.channel_versions ?? {}).map(([channel, v]) => ({
      channel,
      version: String(v),
    }));
    const blobs = wanted.length > 0 ? indexRows(await this.storage.getBlobs(threadId, ns, wanted)) : new Map();
    const channelValues: Record<string, unknown> = {};
    for (const { channel, version } of wanted) {
      const entry = await decodeChannel(this.serde, blobs, channel, version);
      if (entry === undefined || entry.value === MISSING) continue;
      channelValues[channel] = entry.value;
      this.remember(threadId, ns, channel, entry);
    }
    checkpoint.channel_values = channelValues;
    if (checkpoint.v < 4 && row.parentId !== null) await this.migratePendingSends(checkpoint, row);
    const pendingWrites = await this.pendingWrites(threadId, ns, checkpointId);
    const tuple: CheckpointTuple = {
      config: { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: checkpointId } },
      checkpoint,
      metadata: (await this.serde.loadsTyped(row.metadataType, row.metadata)) as CheckpointMetadata,
      pendingWrites: pendingWrites.map(([, write]) => write),
    };
    if (row.parentId !== null) {
      tuple.parentConfig = { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: row.parentId } };
    }
    return tuple;
  }

  /** The writes of a checkpoint in `writesSortKey` order (task path, task id, index), with their channel names. */
  private async pendingWrites(
    threadId: string,
    ns: string,
    checkpointId: string,
  ): Promise<[WriteRow, CheckpointPendingWrite][]> {
    const rows = await this.storage.getWrites(threadId, ns, checkpointId);
    rows.sort((a, b) =>
      compareWritesSortKeys(writesSortKey(a.taskPath, a.taskId, a.idx), writesSortKey(b.taskPath, b.taskId, b.idx)),
    );
    return Promise.all(
      rows.map(
        async (w) =>
          [w, [w.taskId, w.channel, await this.serde.loadsTyped(w.type, w.data)]] as [WriteRow, CheckpointPendingWrite],
      ),
    );
  }

  /** Checkpoints of format < 4 kept pending sends as writes to `__pregel_tasks` of their parent: fold them in. */
  private async migratePendingSends(checkpoint: Checkpoint, row: CheckpointRow): Promise<void> {
    const writes = await this.pendingWrites(row.threadId, row.ns, row.parentId as string);
    const sends = writes.filter(([w]) => w.channel === TASKS).map(([, [, , value]]) => value);
    (checkpoint.channel_values as Record<string, unknown>)[TASKS] = sends;
    const versions = Object.values(checkpoint.channel_versions);
    checkpoint.channel_versions[TASKS] =
      versions.length > 0 ? maxChannelVersion(...versions) : this.getNextVersion(undefined);
  }
}

function indexRows(rows: readonly BlobRow[]): Map<string, BlobRow> {
  return new Map(rows.map((r) => [`${r.channel}\0${r.version}`, r]));
}
