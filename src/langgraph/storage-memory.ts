/**
 * The in-memory store of {@link DumplingsSaver}: Maps keyed by thread and
 * namespace (never plain objects, so a `thread_id` of `__proto__` is just a
 * key). For tests and single-process runs; everything is lost with the process.
 *
 * @module
 */
import type { BlobRow, CheckpointQuery, CheckpointRow, SaverStorage, WriteRow } from "./storage.js";

interface Namespace {
  checkpoints: Map<string, CheckpointRow>;
  /** `channel\0version` → row. */
  blobs: Map<string, BlobRow>;
  /** `channel\0anchor` → the rows of that chain. */
  chains: Map<string, BlobRow[]>;
  /** checkpoint id → `taskId\0idx` → row. */
  writes: Map<string, Map<string, WriteRow>>;
}

const copy = (b: Uint8Array): Uint8Array => new Uint8Array(b);

/** The memory implementation of {@link SaverStorage}. */
export class MemorySaverStorage implements SaverStorage {
  readonly name = "memory";
  private readonly threads = new Map<string, Map<string, Namespace>>();

  private space(threadId: string, ns: string, create: true): Namespace;
  private space(threadId: string, ns: string, create?: false): Namespace | undefined;
  private space(threadId: string, ns: string, create = false): Namespace | undefined {
    let thread = this.threads.get(threadId);
    if (thread === undefined) {
      if (!create) return undefined;
      thread = new Map();
      this.threads.set(threadId, thread);
    }
    let space = thread.get(ns);
    if (space === undefined && create) {
      space = { checkpoints: new Map(), blobs: new Map(), chains: new Map(), writes: new Map() };
      thread.set(ns, space);
    }
    return space;
  }

  async putCheckpoint(row: CheckpointRow, blobs: readonly BlobRow[]): Promise<void> {
    const space = this.space(row.threadId, row.ns, true);
    for (const b of blobs) {
      const key = `${b.channel}\0${b.version}`;
      if (space.blobs.has(key)) continue;
      const row = { ...b, data: copy(b.data) };
      space.blobs.set(key, row);
      const chain = `${b.channel}\0${b.anchor}`;
      const rows = space.chains.get(chain);
      if (rows === undefined) space.chains.set(chain, [row]);
      else rows.push(row);
    }
    space.checkpoints.set(row.checkpointId, { ...row, checkpoint: copy(row.checkpoint), metadata: copy(row.metadata) });
  }

  async getCheckpoint(threadId: string, ns: string, checkpointId?: string): Promise<CheckpointRow | undefined> {
    const space = this.space(threadId, ns);
    if (space === undefined) return undefined;
    if (checkpointId !== undefined) return space.checkpoints.get(checkpointId);
    let newest: string | undefined;
    for (const id of space.checkpoints.keys()) if (newest === undefined || id > newest) newest = id;
    return newest === undefined ? undefined : space.checkpoints.get(newest);
  }

  async *listCheckpoints(query: CheckpointQuery): AsyncIterable<CheckpointRow> {
    const threadIds = query.threadId !== undefined ? [query.threadId] : [...this.threads.keys()];
    let left = query.limit ?? Number.POSITIVE_INFINITY;
    for (const threadId of threadIds) {
      const thread = this.threads.get(threadId);
      if (thread === undefined) continue;
      for (const [ns, space] of thread) {
        if (query.ns !== undefined && ns !== query.ns) continue;
        const ids = [...space.checkpoints.keys()].sort().reverse();
        for (const id of ids) {
          if (query.checkpointId !== undefined && id !== query.checkpointId) continue;
          if (query.before !== undefined && id >= query.before) continue;
          if (left <= 0) return;
          left -= 1;
          const row = space.checkpoints.get(id);
          if (row !== undefined) yield row;
        }
      }
    }
  }

  async getBlobs(
    threadId: string,
    ns: string,
    wanted: readonly { channel: string; version: string }[],
  ): Promise<BlobRow[]> {
    const space = this.space(threadId, ns);
    if (space === undefined) return [];
    const anchors = new Set<string>();
    for (const w of wanted) {
      const row = space.blobs.get(`${w.channel}\0${w.version}`);
      if (row !== undefined) anchors.add(`${row.channel}\0${row.anchor}`);
    }
    return [...anchors].flatMap((chain) => space.chains.get(chain) ?? []);
  }

  async putWrites(threadId: string, ns: string, checkpointId: string, rows: readonly WriteRow[]): Promise<void> {
    const space = this.space(threadId, ns, true);
    let writes = space.writes.get(checkpointId);
    if (writes === undefined) {
      writes = new Map();
      space.writes.set(checkpointId, writes);
    }
    for (const row of rows) {
      const key = `${row.taskId}\0${row.idx}`;
      if (row.idx >= 0 && writes.has(key)) continue;
      writes.set(key, { ...row, data: copy(row.data) });
    }
  }

  async getWrites(threadId: string, ns: string, checkpointId: string): Promise<WriteRow[]> {
    return [...(this.space(threadId, ns)?.writes.get(checkpointId)?.values() ?? [])];
  }

  async deleteThread(threadId: string): Promise<void> {
    this.threads.delete(threadId);
  }

  async close(): Promise<void> {}
}
