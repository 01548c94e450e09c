/**
 * Redis store of {@link DumplingsSaver}, on the shared Redis driver. Every
 * key of a thread carries the thread in a hash tag (`{thread}`), so one
 * thread's keys live in one slot and each write is one `MULTI`:
 *
 * - `P{T}:cp:NS` — sorted set of the namespace's checkpoint ids (lexical order);
 * - `P{T}:cpd:NS` — hash: checkpoint id → checkpoint record;
 * - `P{T}:idx:NS` — hash: `channel\0version` → anchor (the chain the row is in);
 * - `P{T}:seg:[NS,channel,anchor]` — hash: version → value row (one chain, read whole);
 * - `P{T}:w:[NS,checkpoint]` — hash: `task\0idx` → pending write;
 * - `P{T}:ns` — set of the thread's namespaces; `P{T}:keys` — set of its keys;
 * - `Pthreads` — set of thread ids (for `list` without a thread).
 *
 * Records are binary: a 4-byte header length, a JSON array header (the
 * row's fields its key does not already say, then the lengths of its byte
 * parts), then the bytes.
 *
 * @module
 */
import type { Redis } from "ioredis";
import { checkOptions, optionKeys } from "../core/options.js";
import { RedisConnection, type RedisConnectionOptions, type RedisSourceOfTruthOptions } from "../drivers/redis.js";
import type { BlobKind, BlobRow, CheckpointQuery, CheckpointRow, SaverStorage, WriteRow } from "./storage.js";

/** Default key prefix of the Redis store. */
export const DEFAULT_LANGGRAPH_REDIS_PREFIX = "dumplings:langgraph:";

/**
 * Options of the Redis store: `url` (default `REDIS_URL`, else
 * `redis://127.0.0.1:6379`) or an injected `client`, `keyPrefix` (default
 * `dumplings:langgraph:`), `connectTimeoutMs`, `commandTimeoutMs`. See
 * {@link RedisConnectionOptions}. The store is the checkpointer's only copy
 * of its threads, so it refuses a server that may evict keys unless
 * `allowEviction` is true ({@link RedisSourceOfTruthOptions}).
 */
export interface RedisSaverStoreOptions extends RedisConnectionOptions, RedisSourceOfTruthOptions {}

const KEYS = optionKeys<RedisSaverStoreOptions>({
  client: true,
  url: true,
  keyPrefix: true,
  connectTimeoutMs: true,
  commandTimeoutMs: true,
  allowEviction: true,
});

function encode(header: readonly unknown[], parts: readonly Uint8Array[]): Buffer {
  const head = Buffer.from(JSON.stringify([...header, parts.map((p) => p.byteLength)]), "utf8");
  const len = Buffer.alloc(4);
  len.writeUInt32BE(head.byteLength);
  return Buffer.concat([len, head, ...parts.map((p) => Buffer.from(p.buffer, p.byteOffset, p.byteLength))]);
}

function decode(buf: Buffer): { header: unknown[]; parts: Uint8Array[] } {
  const n = buf.readUInt32BE(0);
  const header = JSON.parse(buf.subarray(4, 4 + n).toString("utf8")) as unknown[];
  const lens = header.pop() as number[];
  const parts: Uint8Array[] = [];
  let at = 4 + n;
  for (const len of lens) {
    parts.push(new Uint8Array(buf.subarray(at, at + len)));
    at += len;
  }
  return { header, parts };
}

/** The Redis implementation of {@link SaverStorage}. */
export class RedisSaverStorage implements SaverStorage {
  readonly name = "redis";
  /** The connection (created client, or the injected one). */
  readonly conn: RedisConnection;
  /** {@link conn}, typed with ioredis's commands. */
  private readonly redis: RedisConnection<Redis>;
  private readonly prefix: string;

  /**
   * No connection is made here: the first call connects.
   *
   * @param options - see {@link RedisSaverStoreOptions}
   * @throws {InvalidOptionError} on a bad or unknown option
   */
  constructor(options: RedisSaverStoreOptions = {}) {
    checkOptions("langgraph:redis", options, KEYS);
    this.redis = new RedisConnection<Redis>(options as RedisConnectionOptions<Redis>, {
      label: "LangGraph checkpointer",
      keyPrefix: DEFAULT_LANGGRAPH_REDIS_PREFIX,
      sourceOfTruth: true,
    });
    this.conn = this.redis;
    this.prefix = this.redis.keyPrefix;
  }

  private key(threadId: string, part: string): string {
    return `${this.prefix}{${threadId}}:${part}`;
  }

  async putCheckpoint(row: CheckpointRow, blobs: readonly BlobRow[]): Promise<void> {
    const { threadId, ns } = row;
    const cp = this.key(threadId, `cp:${ns}`);
    const cpd = this.key(threadId, `cpd:${ns}`);
    const idx = this.key(threadId, `idx:${ns}`);
    const nsKey = this.key(threadId, "ns");
    const keys = this.key(threadId, "keys");
    await this.redis.call(
      `cannot write checkpoint "${row.checkpointId}" of thread "${threadId}"`,
      threadId,
      async (c) => {
        await c.sadd(`${this.prefix}threads`, threadId);
        const m = c.multi();
        const created = [cp, cpd, idx, nsKey];
        for (const b of blobs) {
          const seg = this.key(threadId, `seg:${JSON.stringify([ns, b.channel, b.anchor])}`);
          created.push(seg);
          m.hsetnx(idx, `${b.channel}\0${b.version}`, b.anchor);
          m.hsetnx(seg, b.version, encode([b.kind, b.anchor, b.base, b.depth, b.items, b.type], [b.data]));
        }
        m.zadd(cp, 0, row.checkpointId);
        m.hset(
          cpd,
          row.checkpointId,
          encode([row.parentId, row.type, row.metadataType], [row.checkpoint, row.metadata]),
        );
        m.sadd(nsKey, ns);
        m.sadd(keys, ...created);
        await m.exec();
      },
    );
  }

  private rowOf(threadId: string, ns: string, checkpointId: string, buf: Buffer): CheckpointRow {
    const { header, parts } = decode(buf);
    return {
      threadId,
      ns,
      checkpointId,
      parentId: (header[0] as string | null) ?? null,
      type: String(header[1]),
      checkpoint: parts[0] as Uint8Array,
      metadataType: String(header[2]),
      metadata: parts[1] as Uint8Array,
    };
  }

  async getCheckpoint(threadId: string, ns: string, checkpointId?: string): Promise<CheckpointRow | undefined> {
    return this.redis.call(`cannot read a checkpoint of thread "${threadId}"`, threadId, async (c) => {
      const id = checkpointId ?? (await c.zrevrangebylex(this.key(threadId, `cp:${ns}`), "+", "-", "LIMIT", 0, 1))[0];
      if (id === undefined) return undefined;
      const buf = await c.hgetBuffer(this.key(threadId, `cpd:${ns}`), id);
      return buf === null ? undefined : this.rowOf(threadId, ns, id, buf);
    });
  }

  async *listCheckpoints(query: CheckpointQuery): AsyncIterable<CheckpointRow> {
    const threads =
      query.threadId !== undefined
        ? [query.threadId]
        : await this.redis.call("cannot list threads", undefined, (c) => c.smembers(`${this.prefix}threads`));
    let left = query.limit ?? Number.POSITIVE_INFINITY;
    const PAGE = 200;
    for (const threadId of threads) {
      const namespaces =
        query.ns !== undefined
          ? [query.ns]
          : await this.redis.call("cannot list namespaces", threadId, (c) => c.smembers(this.key(threadId, "ns")));
      for (const ns of namespaces) {
        let max = query.before !== undefined ? `(${query.before}` : "+";
        if (query.checkpointId !== undefined) {
          if (query.before !== undefined && query.checkpointId >= query.before) continue;
          max = `[${query.checkpointId}`;
        }
        while (left > 0) {
          const take = Math.min(PAGE, left);
          const min = query.checkpointId !== undefined ? `[${query.checkpointId}` : "-";
          const page = await this.redis.call(`cannot list checkpoints of thread "${threadId}"`, threadId, async (c) => {
            const ids = await c.zrevrangebylex(this.key(threadId, `cp:${ns}`), max, min, "LIMIT", 0, take);
            const bufs = ids.length > 0 ? await c.hmgetBuffer(this.key(threadId, `cpd:${ns}`), ...ids) : [];
            return ids.map((id, i) => [id, bufs[i]] as const);
          });
          for (const [id, buf] of page) {
            if (buf == null) continue;
            left -= 1;
            yield this.rowOf(threadId, ns, id, buf);
          }
          if (page.length < take) break;
          max = `(${page[page.length - 1]?.[0]}`;
        }
        if (left <= 0) return;
      }
    }
  }

  async getBlobs(
    threadId: string,
    ns: string,
    wanted: readonly { channel: string; version: string }[],
  ): Promise<BlobRow[]> {
    if (wanted.length === 0) return [];
    return this.redis.call(`cannot read channel values of thread "${threadId}"`, threadId, async (c) => {
      const anchors = await c.hmget(
        this.key(threadId, `idx:${ns}`),
        ...wanted.map((w) => `${w.channel}\0${w.version}`),
      );
      const segs = new Map<string, string>();
      wanted.forEach((w, i) => {
        const anchor = anchors[i];
        if (anchor != null) segs.set(JSON.stringify([ns, w.channel, anchor]), w.channel);
      });
      if (segs.size === 0) return [];
      const p = c.pipeline();
      const channels = [...segs.values()];
      for (const seg of segs.keys()) p.hgetallBuffer(this.key(threadId, `seg:${seg}`));
      const results = (await p.exec()) ?? [];
      const rows: BlobRow[] = [];
      for (const [i, [err, value]] of results.entries()) {
        if (err) throw err;
        for (const [version, buf] of Object.entries((value ?? {}) as Record<string, Buffer>)) {
          const { header, parts } = decode(buf);
          rows.push({
            channel: channels[i] as string,
            version,
            kind: header[0] as BlobKind,
            anchor: String(header[1]),
            base: (header[2] as string | null) ?? null,
            depth: Number(header[3]),
            items: Number(header[4]),
            type: String(header[5]),
            data: parts[0] as Uint8Array,
          });
        }
      }
      return rows;
    });
  }

  async putWrites(threadId: string, ns: string, checkpointId: string, rows: readonly WriteRow[]): Promise<void> {
    if (rows.length === 0) return;
    const key = this.key(threadId, `w:${JSON.stringify([ns, checkpointId])}`);
    await this.redis.call(
      `cannot write pending writes of checkpoint "${checkpointId}" of thread "${threadId}"`,
      threadId,
      async (c) => {
        await c.sadd(`${this.prefix}threads`, threadId);
        const m = c.multi();
        for (const row of rows) {
          const field = `${row.taskId}\0${row.idx}`;
          const value = encode([row.channel, row.taskPath, row.type], [row.data]);
          if (row.idx < 0) m.hset(key, field, value);
          else m.hsetnx(key, field, value);
        }
        m.sadd(this.key(threadId, "keys"), key);
        await m.exec();
      },
    );
  }

  async getWrites(threadId: string, ns: string, checkpointId: string): Promise<WriteRow[]> {
    const key = this.key(threadId, `w:${JSON.stringify([ns, checkpointId])}`);
    const all = await this.redis.call(
      `cannot read pending writes of checkpoint "${checkpointId}" of thread "${threadId}"`,
      threadId,
      (c) => c.hgetallBuffer(key),
    );
    return Object.entries(all).map(([field, buf]) => {
      const { header, parts } = decode(buf);
      const cut = field.lastIndexOf("\0");
      return {
        taskId: field.slice(0, cut),
        idx: Number(field.slice(cut + 1)),
        channel: String(header[0]),
        taskPath: String(header[1]),
        type: String(header[2]),
        data: parts[0] as Uint8Array,
      };
    });
  }

  async deleteThread(threadId: string): Promise<void> {
    const keys = this.key(threadId, "keys");
    await this.redis.call(`cannot delete thread "${threadId}"`, threadId, async (c) => {
      const members = await c.smembers(keys);
      const m = c.multi();
      for (let i = 0; i < members.length; i += 500) m.del(...members.slice(i, i + 500));
      m.del(keys, this.key(threadId, "ns"));
      await m.exec();
      await c.srem(`${this.prefix}threads`, threadId);
    });
  }

  async close(): Promise<void> {
    await this.redis.close();
  }
}
