/**
 * Redis journal: each run's row, step records, signals and audit events live
 * under keys sharing the hash tag `{runId}`; every operation is one Lua
 * script, so the fencing-token check and the write are atomic. User JSON
 * (outputs, inputs, signal values) is stored as opaque strings and never
 * decoded inside Lua (cjson would reformat numbers and empty arrays).
 *
 * Time is the server's: every script reads `TIME` itself to judge a lease's
 * expiry and to stamp `expiresAt`, `created_at`, `updated_at`, event `at`
 * and signal `sentAt`, so the clocks of the machines calling it play no
 * part (case pb-32).
 *
 * Persistence follows the Redis server's settings: run Redis with AOF
 * (`appendfsync everysec` or `always`) when the journal must survive a Redis
 * restart. Cluster mode is not supported (the run index is one key).
 *
 * The connection comes from the Redis driver shared by every Redis component
 * (same options and defaults, README "Redis connection options"; ioredis is
 * loaded only when the journal creates its own client): a dead Redis is a
 * `BackendError` within `connectTimeoutMs`, never a hang nor an unhandled
 * `'error'` event.
 *
 * @module
 */
import type { Redis } from "ioredis";
import { BackendError } from "../core/errors.js";
import type { JsonValue } from "../core/json.js";
import { checkOptions, optionKeys } from "../core/options.js";
import {
  type IoRedisClient,
  REDIS_CONNECTION_KEYS,
  REDIS_SOURCE_OF_TRUTH_KEYS,
  RedisConnection,
  type RedisConnectionOptions,
  type RedisScript,
  type RedisSourceOfTruthOptions,
  renamedOption,
  runScript,
} from "../drivers/redis.js";
import { JournalIntegrityError, RunNotFoundError, SignalConflictError, StaleFencingTokenError } from "./errors.js";
import type {
  Journal,
  JournalEvent,
  JournalEventInput,
  JournalEventType,
  LeaseResult,
  ListRunsFilter,
  PruneOptions,
  PruneResult,
  RunPatch,
  RunRecord,
  RunStatus,
  SignalRecord,
  StepQuery,
  StepRecord,
  UpdateRunResult,
  WriteStepOptions,
} from "./journal.js";
import {
  blobWrite,
  checkListRuns,
  checkPruneOptions,
  checkResetSeq,
  checkStepQuery,
  checkStepWrite,
  createOnlyWrite,
  jsonColumn,
  leaseMs,
  outputColumn,
  parseJournalJson,
  retryRefused,
  runFromRow,
  signalRefused,
  snapshotWrite,
  syncedWrite,
} from "./journal.js";
import { SCRIPTS } from "./journal-redis-scripts.js";
import { type AcquireLeaseOptions, leaseReentrant } from "./lease.js";

/** The keys of {@link RedisJournalOptions}: any other is an `InvalidOptionError`. */
const JOURNAL_REDIS_OPTIONS = optionKeys<RedisJournalOptions>({
  ...REDIS_CONNECTION_KEYS,
  ...REDIS_SOURCE_OF_TRUTH_KEYS,
  prefix: true,
});

/**
 * Options of {@link RedisJournal}: the Redis connection options shared by
 * every Redis component (`client`, `url`, `keyPrefix`, `connectTimeoutMs`,
 * `commandTimeoutMs`; README, "Redis connection options").
 */
export interface RedisJournalOptions extends RedisConnectionOptions, RedisSourceOfTruthOptions {
  /** Prefix of every key of the journal. @default "dumplings:durable:" */
  keyPrefix?: string;
  /** @deprecated Use `keyPrefix` (the same; giving both with different values is an `InvalidOptionError`). */
  prefix?: string;
}

/** The same bytes as a Buffer (ioredis sends a Buffer as is), not copied. */
const asBuffer = (b: Uint8Array): Buffer =>
  Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);

/** Whether `a` sorts before `b` as Redis sorts members of equal score (bytes of UTF-8). */
const memberBefore = (a: string, b: string) => Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8")) < 0;

type Reply = (string | null)[];

/** The keys of one run (`<prefix>{runId}:<part>`). */
const RUN_KEY_PARTS = ["run", "steps", "stepmeta", "signals", "events", "steprefs"] as const;

/** Step records a prune script deletes at most. */
const PRUNE_BATCH = 1000;

function pairs(flat: (string | null)[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) out[String(flat[i])] = String(flat[i + 1]);
  return out;
}

/** `""` = absent, `"=" + text` = present (so an empty string value stays representable). */
const opt = (v: string | number | null | undefined) => (v === null || v === undefined ? "" : `=${v}`);

function parseSignal(runId: string, name: string, stored: string): SignalRecord {
  const nl = stored.indexOf("\n");
  const value = parseJournalJson<JsonValue>(
    stored.slice(nl + 1),
    `the value of signal ${JSON.stringify(name)} of run ${JSON.stringify(runId)}`,
  );
  return { runId, name, sentAt: Number(stored.slice(0, nl)), value };
}

/**
 * Redis implementation of {@link Journal} (Lua scripts).
 *
 * @example
 * const journal = new RedisJournal({ url: process.env.REDIS_URL, keyPrefix: "myapp:durable:" });
 */
export class RedisJournal implements Journal {
  readonly name = "redis";
  /** The client in use (created or injected). */
  readonly client: IoRedisClient;
  private readonly conn: RedisConnection<Redis>;
  private readonly prefix: string;

  /**
   * @param options - `client` or `url`, `keyPrefix` (default `dumplings:durable:`), timeouts
   * @throws {InvalidOptionError} on a malformed URL, a timeout that is not a positive number of ms, or `prefix` and `keyPrefix` both given and different
   */
  constructor(options: RedisJournalOptions = {}) {
    checkOptions("redis", options, JOURNAL_REDIS_OPTIONS);
    const { prefix, ...rest } = options;
    const keyPrefix = renamedOption("keyPrefix", rest.keyPrefix, "prefix", prefix);
    this.conn = new RedisConnection<Redis>({ ...rest, keyPrefix } as RedisConnectionOptions<Redis>, {
      label: "journal",
      keyPrefix: "dumplings:durable:",
      sourceOfTruth: true,
    });
    this.client = this.conn.client;
    this.prefix = this.conn.keyPrefix;
  }

  private k(runId: string, part: (typeof RUN_KEY_PARTS)[number]) {
    return `${this.prefix}{${runId}}:${part}`;
  }

  /** The runs by creation time (score: `created_at`), which {@link listRuns} pages through. */
  private get index() {
    return `${this.prefix}runs`;
  }

  /**
   * The runs by `updated_at` (the score), kept by every script that changes a run's `updated_at` for the
   * processes of the previous release (a rolling deploy), whose `listRuns` read it; this one does not.
   */
  private get updated() {
    return `${this.prefix}runs:updated`;
  }

  private exec(what: string, runId: string, script: RedisScript, keys: string[], args: (string | number | Buffer)[]) {
    return this.call(what, runId, (c) =>
      runScript(
        c,
        script,
        keys,
        args.map((a) => (Buffer.isBuffer(a) ? a : String(a))),
      ),
    );
  }

  private call<T>(what: string, runId: string, fn: (client: Redis) => Promise<T>): Promise<T> {
    return this.conn.call(`cannot ${what} run "${runId}"`, runId, fn);
  }

  private tokenReply(runId: string, token: number, reply: Reply): void {
    if (reply[0] === "notfound") throw new RunNotFoundError(runId);
    if (reply[0] === "stale") throw new StaleFencingTokenError(runId, token, Number(reply[1]));
  }

  /** An event's JSON without `at` (the script stamps it with the store's clock). */
  private eventJson(type: JournalEventType, e: Partial<JournalEvent> = {}): string {
    const { at: _at, runId: _runId, index: _index, ...fields } = e;
    return JSON.stringify({ type, ...fields });
  }

  /** A run hash returned by an operator script (`['ok', field, value, …]`). */
  private runReply(runId: string, r: Reply): RunRecord {
    if (r[0] === "notfound") throw new RunNotFoundError(runId);
    return runFromRow(pairs(r.slice(1)));
  }

  /** {@inheritDoc Journal.now} (`TIME`) */
  async now(): Promise<number> {
    const [sec, usec] = await this.conn.call("cannot read the clock of Redis", undefined, (c) => c.time());
    return Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
  }

  /** {@inheritDoc Journal.createRun} */
  async createRun(init: { runId: string; workflow: string; input: JsonValue }) {
    const input = jsonColumn(init.input, "run input") ?? "null";
    const created = await this.exec(
      "create",
      init.runId,
      SCRIPTS.create,
      [
        this.k(init.runId, "run"),
        this.k(init.runId, "events"),
        this.index,
        this.k(init.runId, "stepmeta"),
        this.updated,
      ],
      [init.runId, init.workflow, input, this.eventJson("run_created", { name: init.workflow })],
    );
    if (Number(created) === -1) {
      throw new JournalIntegrityError(
        init.runId,
        -1,
        `the journal knew this run (its index ${this.prefix}runs lists it, or step records are left) but its keys are gone: evicted by Redis (maxmemory-policy) or deleted by hand; it was not created again, so no completed step runs twice. Delete it (deleteRun) to start it anew`,
      );
    }
    const run = await this.getRun(init.runId);
    if (!run) throw new RunNotFoundError(init.runId);
    return { created: Number(created) === 1, run };
  }

  /** {@inheritDoc Journal.getRun} */
  async getRun(runId: string): Promise<RunRecord | undefined> {
    const h = await this.call("read", runId, (c) => c.hgetall(this.k(runId, "run")));
    return h.run_id === undefined ? undefined : runFromRow(h);
  }

  /**
   * {@inheritDoc Journal.listRuns}
   *
   * Pages through the creation index (`runs`, score `created_at`) from the cursor down, 200 runs a round
   * trip, keeping those of the filter: a keyset walk (the runs of the cursor's millisecond that sort before
   * its id, then the older ones) on scores that never change.
   */
  async listRuns(filter?: ListRunsFilter): Promise<RunRecord[]> {
    const f = checkListRuns(this.name, filter);
    const out: RunRecord[] = [];
    const fail = (cause: unknown) => new BackendError("redis", "cannot list runs", { cause });
    /** Reads the runs of `ids` in order, keeps those of the filter; true when the page is full. */
    const take = async (ids: string[]): Promise<boolean> => {
      if (ids.length === 0) return false;
      const res =
        (await this.conn.call("cannot list runs", undefined, (c) => {
          const pipe = c.pipeline();
          for (const id of ids) pipe.hgetall(this.k(id, "run"));
          return pipe.exec();
        })) ?? [];
      for (const [err, h] of res) {
        if (err) throw fail(err);
        const row = h as Record<string, string>;
        if (row.run_id === undefined) continue; // deleted meanwhile
        const run = runFromRow(row, true); // a bad run is listed with its readError
        if (f.status !== undefined && run.status !== f.status) continue;
        if (f.workflow !== undefined && run.workflow !== f.workflow) continue;
        out.push(run);
        if (out.length >= f.limit) return true;
      }
      return false;
    };
    let cursor = f.after;
    for (;;) {
      let max = "+inf";
      if (cursor !== undefined) {
        const { createdAt, runId } = cursor;
        const ties = await this.conn.call("cannot list runs", undefined, (c) =>
          c.zrangebyscore(this.index, createdAt, createdAt),
        );
        if (await take(ties.filter((id) => memberBefore(id, runId)).reverse())) return out;
        max = `(${createdAt}`;
      }
      const batch = await this.conn.call("cannot list runs", undefined, (c) =>
        c.zrevrangebyscore(this.index, max, "-inf", "WITHSCORES", "LIMIT", 0, 200),
      );
      if (batch.length === 0) return out;
      const ids: string[] = [];
      for (let i = 0; i < batch.length; i += 2) ids.push(String(batch[i]));
      if (await take(ids)) return out;
      cursor = { createdAt: Number(batch[batch.length - 1]), runId: String(batch[batch.length - 2]) };
    }
  }

  /** {@inheritDoc Journal.acquireLease} */
  async acquireLease(runId: string, owner: string, ttlMs: number, options?: AcquireLeaseOptions): Promise<LeaseResult> {
    const reentrant = leaseReentrant(this.name, options) ? "1" : "0";
    const r = (await this.exec(
      "lease",
      runId,
      SCRIPTS.lease,
      [this.k(runId, "run"), this.k(runId, "events"), this.k(runId, "stepmeta"), this.k(runId, "steps"), this.updated],
      [owner, leaseMs(ttlMs), this.eventJson("lease_acquired", { name: owner }), reentrant],
    )) as Reply;
    if (r[0] === "notfound") throw new RunNotFoundError(runId);
    if (r[0] === "vanished") {
      throw new JournalIntegrityError(
        runId,
        -1,
        `its step records #0…#${String(r[1])} are gone (evicted by Redis, maxmemory-policy, or deleted by hand); the lease was not taken, so no completed step runs again`,
      );
    }
    if (r[0] === "held") return { acquired: false, owner: String(r[1]), expiresAt: Number(r[2]) };
    return {
      acquired: true,
      fencingToken: Number(r[1]),
      expiresAt: Number(r[2]),
      ...(typeof r[3] === "string" ? { status: r[3] as RunStatus } : {}),
    };
  }

  /** {@inheritDoc Journal.renewLease} */
  async renewLease(runId: string, token: number, ttlMs: number): Promise<number> {
    const r = (await this.exec(
      "renew the lease of",
      runId,
      SCRIPTS.renew,
      [this.k(runId, "run")],
      [token, leaseMs(ttlMs)],
    )) as Reply;
    this.tokenReply(runId, token, r);
    return Number(r[1]);
  }

  /** {@inheritDoc Journal.releaseLease} */
  async releaseLease(runId: string, token: number): Promise<void> {
    await this.exec("release the lease of", runId, SCRIPTS.release, [this.k(runId, "run")], [token]);
  }

  /** {@inheritDoc Journal.readSteps} */
  async readSteps(runId: string, query?: StepQuery): Promise<StepRecord[]> {
    const q = checkStepQuery(this.name, query);
    if (q !== undefined) return this.querySteps(runId, q);
    // The records alone (HVALS): their seq is in each, so the fields are neither sent nor made into strings.
    const texts = await this.call("read the steps of", runId, (c) => c.hvals(this.k(runId, "steps")));
    const n = texts.length;
    const parsed = new Array<StepRecord>(n);
    for (let i = 0; i < n; i++) {
      parsed[i] = parseJournalJson<StepRecord>(texts[i] as string, `a step record of run ${JSON.stringify(runId)}`);
    }
    // Seqs have no gaps: the n records are #0…#(n-1), each put in its place (no sort, whose comparator
    // would be called some 10,000 times for 1,000 records). Anything else is sorted.
    const steps = new Array<StepRecord>(n);
    for (const step of parsed) {
      const seq = step.seq;
      if (!Number.isInteger(seq) || seq < 0 || seq >= n || steps[seq] !== undefined) {
        return parsed.sort((a, b) => a.seq - b.seq);
      }
      steps[seq] = step;
    }
    return steps;
  }

  /**
   * {@link readSteps} with a query: one script filters the run's step metadata (`seq` → status and name,
   * no outputs) and reads only the matching records, the `last` newest of them when asked.
   */
  private async querySteps(
    runId: string,
    q: { fromSeq: number; namePrefix: string; last: number | undefined },
  ): Promise<StepRecord[]> {
    const texts = (await this.exec(
      "read the steps of",
      runId,
      SCRIPTS.readSteps,
      [this.k(runId, "steps"), this.k(runId, "stepmeta")],
      [q.fromSeq, q.namePrefix, q.last ?? 0],
    )) as Reply;
    const steps: StepRecord[] = [];
    for (const text of texts) {
      if (text !== null)
        steps.push(parseJournalJson<StepRecord>(text, `a step record of run ${JSON.stringify(runId)}`));
    }
    return steps;
  }

  /** {@inheritDoc Journal.writeStep} */
  async writeStep(token: number, record: StepRecord, options?: WriteStepOptions): Promise<void> {
    syncedWrite(this.name, options); // checked; Redis persists as the server is configured
    const output = outputColumn(record);
    // The record's JSON with the output's text spliced in (serialised once, by the step or just above).
    const snapshot = snapshotWrite(options);
    const blobs = blobWrite(this.name, options);
    const create = createOnlyWrite(options);
    const { output: _output, snapshot: _snapshot, ...fields } = record;
    const head = JSON.stringify({ ...fields, fencingToken: token, ...(snapshot ? { snapshot: true } : {}) });
    const stored = output === null ? head : `${head.slice(0, -1)},"output":${output}}`;
    const r = (await this.exec(
      "write a step of",
      record.runId,
      SCRIPTS.writeStep,
      [
        this.k(record.runId, "run"),
        this.k(record.runId, "steps"),
        this.k(record.runId, "stepmeta"),
        this.k(record.runId, "events"),
        this.k(record.runId, "steprefs"),
      ],
      [
        token,
        record.seq,
        record.name,
        `${record.status},${record.finishedAt ?? ""},${snapshot ? "1" : ""}`,
        stored,
        this.eventJson(`step_${record.status}`, {
          seq: record.seq,
          name: record.name,
          attempt: record.attempt,
          fencingToken: token,
        }),
        this.prefix,
        blobs?.refs.join(" ") ?? "",
        create ? "1" : "",
        ...[...(blobs?.bytes ?? [])].flatMap(([ref, bytes]) => [ref, asBuffer(bytes)]),
      ],
    )) as Reply;
    this.tokenReply(record.runId, token, r);
    if (r[0] === "missing") {
      throw new JournalIntegrityError(
        record.runId,
        record.seq,
        `blob ${String(r[1])} is referenced but not stored: pass its bytes in WriteStepOptions.blobs`,
      );
    }
    // refused by the script: the shared check says why
    const found = r[0] === "conflict" ? { status: String(r[2]), name: String(r[3]) } : undefined;
    if (r[0] === "gap" || found) checkStepWrite(record.runId, token, token, Number(r[1]), found, record, create);
  }

  /** {@inheritDoc Journal.updateRun} */
  async updateRun(token: number, runId: string, patch: RunPatch): Promise<UpdateRunResult> {
    const output = jsonColumn(patch.output, "run output");
    const r = (await this.exec(
      "update",
      runId,
      SCRIPTS.updateRun,
      [this.k(runId, "run"), this.k(runId, "signals"), this.k(runId, "events"), this.updated],
      [
        token,
        patch.status,
        opt(output),
        opt(patch.error === undefined ? undefined : JSON.stringify(patch.error)),
        opt(patch.waitingFor),
        opt(patch.wakeAt),
        this.eventJson(`run_${patch.status}` as JournalEventType, {
          ...(patch.waitingFor !== undefined ? { name: patch.waitingFor } : {}),
          fencingToken: token,
          ...(patch.status === "blocked" && patch.error !== undefined ? { detail: patch.error.message } : {}),
        }),
      ],
    )) as Reply;
    this.tokenReply(runId, token, r);
    if (r[0] === "signal") {
      return { ok: false, signal: parseSignal(runId, patch.waitingFor ?? "", String(r[1])) };
    }
    return { ok: true };
  }

  /** {@inheritDoc Journal.sendSignal} */
  async sendSignal(runId: string, name: string, value: JsonValue): Promise<RunRecord> {
    const text = jsonColumn(value, `signal "${name}" value`) ?? "null";
    const r = (await this.exec(
      "signal",
      runId,
      SCRIPTS.signal,
      [this.k(runId, "run"), this.k(runId, "signals"), this.k(runId, "events")],
      [name, text, this.eventJson("signal_received", { name })],
    )) as Reply;
    if (r[0] === "notfound") throw new RunNotFoundError(runId);
    if (r[0] === "conflict") throw new SignalConflictError(runId, name);
    if (r[0] === "ended") throw signalRefused(runId, String(r[1]), name);
    return runFromRow(pairs(r.slice(1)));
  }

  /** {@inheritDoc Journal.getSignal} */
  async getSignal(runId: string, name: string): Promise<SignalRecord | undefined> {
    const s = await this.call("read a signal of", runId, (c) => c.hget(this.k(runId, "signals"), name));
    return s === null ? undefined : parseSignal(runId, name, s);
  }

  /** {@inheritDoc Journal.listSignals} */
  async listSignals(runId: string): Promise<SignalRecord[]> {
    const h = await this.call("list the signals of", runId, (c) => c.hgetall(this.k(runId, "signals")));
    return Object.entries(h)
      .map(([name, s]) => parseSignal(runId, name, s))
      .sort((a, b) => a.sentAt - b.sentAt || a.name.localeCompare(b.name));
  }

  /** {@inheritDoc Journal.readEvents} */
  async readEvents(runId: string): Promise<JournalEvent[]> {
    const list = await this.call("read the events of", runId, (c) => c.lrange(this.k(runId, "events"), 0, -1));
    return list.map((text, index) => ({
      runId,
      index,
      ...parseJournalJson<Omit<JournalEvent, "runId" | "index">>(
        text,
        `event #${index} of run ${JSON.stringify(runId)}`,
      ),
    }));
  }

  /** {@inheritDoc Journal.deleteRun} */
  async deleteRun(runId: string): Promise<void> {
    await this.call("delete", runId, async (c) => {
      await runScript(
        c,
        SCRIPTS.deleteRun,
        [...RUN_KEY_PARTS.map((part) => this.k(runId, part)), this.index, this.updated],
        [this.prefix, runId],
      );
    });
  }

  /**
   * {@inheritDoc Journal.pruneRuns}
   *
   * Walks the run index (`ZSCAN`); per run, scripts that each read the run's step metadata (no outputs)
   * and delete at most 1,000 records. Redis frees the memory as it deletes (`vacuum` has no effect).
   */
  async pruneRuns(options: PruneOptions): Promise<PruneResult> {
    const o = await checkPruneOptions(this.name, options, () => this.now());
    const result: PruneResult = { deletedSteps: 0, deletedBlobs: 0 };
    let cursor = "0";
    do {
      const [next, flat] = await this.conn.call("cannot prune runs", undefined, (c) =>
        c.zscan(this.index, cursor, "COUNT", 200),
      );
      cursor = next;
      for (let i = 0; i < flat.length; i += 2) {
        const runId = String(flat[i]);
        for (;;) {
          const r = (await this.exec(
            "prune",
            runId,
            SCRIPTS.prune,
            [this.k(runId, "run"), this.k(runId, "steps"), this.k(runId, "stepmeta"), this.k(runId, "steprefs")],
            [o.before, o.keepLast, PRUNE_BATCH, this.prefix, o.from],
          )) as Reply;
          const n = Number(r[0]);
          result.deletedSteps += n;
          result.deletedBlobs += Number(r[1]);
          if (n < PRUNE_BATCH) break;
        }
      }
    } while (cursor !== "0");
    return result;
  }

  /** {@inheritDoc Journal.readBlob} */
  async readBlob(ref: string): Promise<Uint8Array | undefined> {
    const v = await this.conn.call(`cannot read blob ${ref}`, undefined, (c) =>
      c.getBuffer(`${this.prefix}blob:${ref}`),
    );
    return v === null ? undefined : new Uint8Array(v);
  }

  /** {@inheritDoc Journal.appendEvent} */
  async appendEvent(runId: string, event: JournalEventInput): Promise<void> {
    const { type, ...fields } = event;
    const r = await this.exec(
      "append an event to",
      runId,
      SCRIPTS.appendEvent,
      [this.k(runId, "run"), this.k(runId, "events")],
      [this.eventJson(type, fields)],
    );
    if (Number(r) !== 1) throw new RunNotFoundError(runId);
  }

  /** {@inheritDoc Journal.cancelRun} */
  async cancelRun(runId: string, by: string, reason?: string): Promise<RunRecord> {
    const r = (await this.exec(
      "cancel",
      runId,
      SCRIPTS.cancel,
      [this.k(runId, "run"), this.k(runId, "events"), this.updated],
      [this.eventJson("run_cancelled", { by, ...(reason !== undefined ? { detail: reason } : {}) })],
    )) as Reply;
    return this.runReply(runId, r);
  }

  /** {@inheritDoc Journal.resetRun} */
  async resetRun(runId: string, toSeq: number, by: string): Promise<RunRecord> {
    checkResetSeq(runId, toSeq);
    const r = (await this.exec(
      "reset",
      runId,
      SCRIPTS.reset,
      [
        this.k(runId, "run"),
        this.k(runId, "steps"),
        this.k(runId, "stepmeta"),
        this.k(runId, "events"),
        this.k(runId, "steprefs"),
        this.updated,
      ],
      [toSeq, this.eventJson("run_reset", { seq: toSeq, by }), this.prefix],
    )) as Reply;
    return this.runReply(runId, r);
  }

  /** {@inheritDoc Journal.retryRun} */
  async retryRun(runId: string, by: string): Promise<RunRecord> {
    const r = (await this.exec(
      "retry",
      runId,
      SCRIPTS.retry,
      [
        this.k(runId, "run"),
        this.k(runId, "steps"),
        this.k(runId, "stepmeta"),
        this.k(runId, "events"),
        this.k(runId, "steprefs"),
        this.updated,
      ],
      [this.eventJson("run_retried", { by }), this.prefix],
    )) as Reply;
    if (r[0] === "refused") throw retryRefused(runId, String(r[1]), Number(r[2]));
    return this.runReply(runId, r);
  }

  /**
   * Deletes every run of this journal (tests, teardown): the runs its index
   * lists, each run's five keys, then the index. No key pattern is involved,
   * so a prefix holding glob characters (`*`, `?`, `[`) or one that another
   * journal's prefix starts with never reaches another journal's runs.
   *
   * @throws {BackendError} when Redis fails or does not answer in time
   */
  async clear(): Promise<void> {
    const parts = RUN_KEY_PARTS;
    for (;;) {
      const ids = await this.conn.call("cannot clear the journal", undefined, (c) => c.zrange(this.index, 0, 499));
      if (ids.length === 0) break;
      const res = await this.conn.call("cannot clear the journal", undefined, (c) => {
        const pipe = c.multi(); // the keys and the index entries together (a run half-cleared looks evicted)
        for (const id of ids) pipe.del(...parts.map((part) => this.k(id, part)));
        pipe.zrem(this.index, ...ids);
        pipe.zrem(this.updated, ...ids);
        return pipe.exec();
      });
      for (const [err] of res ?? []) {
        if (err) throw new BackendError("redis", "cannot clear the journal", { cause: err });
      }
    }
    // the blobs: every one the runs referenced (the reference counts list them), then the counts
    for (;;) {
      const refs = await this.conn.call("cannot clear the journal", undefined, (c) =>
        c.hkeys(`${this.prefix}blobrefs`),
      );
      if (refs.length === 0) break;
      await this.conn.call("cannot clear the journal", undefined, async (c) => {
        for (let i = 0; i < refs.length; i += 500) {
          const part = refs.slice(i, i + 500);
          await c.del(...part.map((ref) => `${this.prefix}blob:${ref}`));
          await c.hdel(`${this.prefix}blobrefs`, ...part);
        }
      });
    }
    await this.conn.call("cannot clear the journal", undefined, (c) => c.del(this.index, this.updated));
  }

  /** Quits the client when this journal created it (an injected client is left open). Idempotent. */
  async close(): Promise<void> {
    await this.conn.close();
  }
}
