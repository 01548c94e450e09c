/**
 * Distributed execution of durable runs on BullMQ (Redis): a
 * {@link DurableQueue} puts runs on a queue; any number of
 * {@link DurableWorker}s on any machines take them and call `runDurable`.
 *
 * Liveness comes from BullMQ: a worker that dies loses its job lock, and
 * BullMQ's stalled-job check hands the job to another worker, which replays
 * the journal and continues. Safety comes from the journal: each executor
 * holds the run through a lease whose fencing token every journal write
 * carries, so a paused "zombie" worker that wakes up after a takeover has its
 * writes refused (`StaleFencingTokenError`). Duplicate jobs for one run are
 * harmless: the second finds the run finished or leased (the lease belongs to
 * one execution, so a duplicate taken by another slot of the same worker waits
 * too: it is delayed and tried again, never running a step that is in progress).
 *
 * Runs waiting for a signal hold no worker: the job completes with status
 * `waiting`, and `signal` (through {@link DurableQueue.signal}) enqueues the
 * run again. Durable timers re-enqueue the run with a BullMQ delay.
 *
 * A worker shutting down (`close({ timeoutMs })`) lets each run's step in
 * progress finish, starts no other, releases the run's lease and moves its
 * job back to the queue; `health()` is its readiness probe.
 *
 * BullMQ and its Redis connections come from the Redis driver: `bullmq` (and
 * ioredis) load only when a queue or worker is constructed, and the
 * connection options are those of every Redis component (README, "Redis
 * connection options"). A dead Redis is a `BackendError` from the call that
 * needed it, within `connectTimeoutMs`.
 *
 * @module
 */
import type { Job, Queue, Worker } from "bullmq";
import type { Redis } from "ioredis";
import { DumplingsError } from "../core/errors.js";
import type { JsonValue } from "../core/json.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { defaultOwner, leaseMs } from "../core/owner.js";
import { RedisConnection, type RedisConnectionOptions, renamedOption, withTimeout } from "../drivers/redis.js";
import { loadBullmq } from "../drivers/redis-load.js";
import { LeaseHeldError, StaleFencingTokenError, UnknownWorkflowError } from "./errors.js";
import type { Journal } from "./journal.js";
import { type AnyWorkflowFn, ensureRun, executeRun, type RunResult, type WorkflowFn } from "./run.js";
import { type SignalResult, signal } from "./signals.js";
import type { RunEventStream } from "./stream-contract.js";

const QUEUE_KEYS = {
  journal: true,
  queueName: true,
  url: true,
  redisUrl: true,
  keyPrefix: true,
  prefix: true,
  connectTimeoutMs: true,
  commandTimeoutMs: true,
} as const;
const ENQUEUE_OPTIONS = optionKeys<{ delayMs?: number }>({ delayMs: true });
const ENQUEUE_RUN = optionKeys<{ runId: string; workflow: string; input?: unknown; attach?: boolean }>({
  runId: true,
  workflow: true,
  input: true,
  attach: true,
});
/** The keys of {@link DurableQueueOptions}: any other is an `InvalidOptionError`. */
const QUEUE_OPTIONS = optionKeys<DurableQueueOptions>(QUEUE_KEYS);
/** The keys of {@link DurableWorkerOptions}: any other is an `InvalidOptionError`. */
const WORKER_OPTIONS = optionKeys<DurableWorkerOptions>({
  ...QUEUE_KEYS,
  workflows: true,
  concurrency: true,
  owner: true,
  leaseTtlMs: true,
  lockDurationMs: true,
  stalledIntervalMs: true,
  maxStalledCount: true,
  stream: true,
  inlineSleepMaxMs: true,
  cancelCheckMs: true,
  onResult: true,
  onError: true,
});

const CLOSE_OPTIONS = optionKeys<{ timeoutMs?: number }>({ timeoutMs: true });

/** A run stopped by {@link DurableWorker.close}: handed back to the queue, never recorded as the run's outcome. */
function closingError(queueName: string, hard: boolean): DumplingsError {
  return new DumplingsError(
    "WORKER_CLOSING",
    hard
      ? `the worker of queue "${queueName}" is closing and its timeoutMs ran out: the run is handed back to the queue (a step started and not finished runs again on the next worker)`
      : `the worker of queue "${queueName}" is closing: the run is handed back to the queue after its current step`,
  );
}

/** Whether `promise` settles within `ms` (its outcome is left to its owner). */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const settled = promise.then(
    () => true,
    () => true,
  );
  const late = new Promise<boolean>((r) => {
    timer = setTimeout(() => r(false), ms);
  });
  try {
    return await Promise.race([settled, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Data of a queued job. */
export interface DurableJobData {
  runId: string;
}

/**
 * Options shared by {@link DurableQueue} and {@link DurableWorker}: the
 * journal, the queue's name, and the Redis connection options shared by
 * every Redis component (`url`, `keyPrefix`, `connectTimeoutMs`,
 * `commandTimeoutMs`; README, "Redis connection options"). The queue makes
 * its own connections (BullMQ needs particular settings on them), so there
 * is no `client` option.
 */
export interface DurableQueueOptions extends Omit<RedisConnectionOptions, "client"> {
  /** The journal (shared by every worker: PostgreSQL, Redis, or a SQLite file on one machine). */
  journal: Journal;
  /** BullMQ queue name. @default "dumplings-durable" */
  queueName?: string;
  /** @deprecated Use `url` (the same; giving both with different values is an `InvalidOptionError`). */
  redisUrl?: string;
  /** BullMQ key prefix (BullMQ adds `:` and the queue name). @default "bull" */
  keyPrefix?: string;
  /** @deprecated Use `keyPrefix` (the same; giving both with different values is an `InvalidOptionError`). */
  prefix?: string;
}

/** Attempts of a job that fails for an infrastructure reason (store down…); workflow errors are recorded in the run instead. */
const JOB_ATTEMPTS = 5;

/** The connection options of a queue or worker, with the deprecated names resolved. @throws {InvalidOptionError} */
function connectionOptions(options: DurableQueueOptions): RedisConnectionOptions {
  return {
    url: renamedOption("url", options.url, "redisUrl", options.redisUrl),
    keyPrefix: renamedOption("keyPrefix", options.keyPrefix, "prefix", options.prefix),
    connectTimeoutMs: options.connectTimeoutMs,
    commandTimeoutMs: options.commandTimeoutMs,
  };
}

/**
 * The producing side: creates runs and puts them (back) on the queue.
 *
 * @example
 * const queue = new DurableQueue({ journal, queueName: "agents" });
 * await queue.enqueue({ runId: "chat-1", workflow: "support-agent", input: { messages } });
 * await queue.signal("chat-1", "approval:call_1", { approved: true });
 */
export class DurableQueue {
  readonly journal: Journal;
  readonly queueName: string;
  /** The Redis connection options of this queue (deprecated names resolved). */
  protected readonly connection: RedisConnectionOptions;
  private readonly queue: Queue<DurableJobData>;
  private readonly conn: RedisConnection<Redis>;

  /**
   * @param options - `journal`, `queueName` (default `dumplings-durable`), `url`, `keyPrefix` (default `bull`), timeouts
   * @throws {InvalidOptionError} on a malformed URL, a bad timeout, or an old option name given with a different value than its new one
   */
  constructor(options: DurableQueueOptions) {
    if (new.target === DurableQueue) checkOptions("DurableQueue", options, QUEUE_OPTIONS);
    this.journal = options.journal;
    this.queueName = options.queueName ?? "dumplings-durable";
    this.connection = connectionOptions(options);
    // Our calls wait (bounded) for the connection, then fail fast during an outage (no retries);
    // it connects now, and queues BullMQ's own first write (the queue's meta) until Redis answers.
    this.conn = new RedisConnection<Redis>(this.connection as RedisConnectionOptions<Redis>, {
      label: "queue",
      keyPrefix: "bull",
      connectNow: true,
      offlineQueue: true,
    });
    const { Queue } = loadBullmq();
    // The driver decides when the connection is usable; BullMQ must not cache a failed first connect.
    this.queue = new Queue<DurableJobData>(this.queueName, {
      connection: this.conn.client,
      prefix: this.conn.keyPrefix,
      skipWaitingForReady: true,
      skipVersionCheck: true,
    });
    this.queue.on("error", () => undefined); // reported by the failing call instead
  }

  /** The queue's Redis URL in use (the option, else `REDIS_URL`, else the default). Kept for subclasses written against 0.1. */
  protected get redisUrl(): string {
    return this.conn.url ?? "";
  }

  /** The BullMQ key prefix in use. Kept for subclasses written against 0.1. */
  protected get prefix(): string {
    return this.conn.keyPrefix;
  }

  /**
   * Creates the run in the journal (unless it exists) and queues it, with the
   * run-identity rules of `runDurable` (see `ensureRun`): a run id names one
   * request.
   *
   * @param run - `{ runId, workflow, input, attach }` (`workflow` names a function registered on the
   *   workers; `input` is required to create a run; `attach: true` queues an existing run whatever its input)
   * @param options - `delayMs` before it may start
   * @returns `outcome`: `"created"` (a new run), `"existing"` (the same request was already there: it is
   *   queued again, duplicates are harmless); `created` says the same as a boolean
   * @throws {RunInputMismatchError} when the run exists with another input and `attach` is not set
   * @throws {RunNotFoundError} when `input` is omitted and the run does not exist (nothing is created)
   * @throws {NonJsonValueError} when `input` is not JSON
   */
  async enqueue(
    run: { runId: string; workflow: string; input?: unknown; attach?: boolean },
    options: { delayMs?: number } = {},
  ): Promise<{ created: boolean; outcome: "created" | "existing" }> {
    checkOptions("enqueue", options, ENQUEUE_OPTIONS);
    checkOptions("enqueue run", run, ENQUEUE_RUN);
    const { created } = await ensureRun(this.journal, run);
    await this.wake(run.runId, options.delayMs);
    return { created, outcome: created ? "created" : "existing" };
  }

  /**
   * Queues an existing run again (after a signal, at a timer's wake-up time, or by an operator).
   *
   * @param runId - the run
   * @param delayMs - delay before it may start (ms) @default 0
   */
  async wake(runId: string, delayMs = 0): Promise<void> {
    await this.conn.call(`cannot queue run "${runId}"`, runId, () =>
      this.queue.add(
        "run",
        { runId },
        {
          delay: Math.max(0, Math.ceil(delayMs)),
          attempts: JOB_ATTEMPTS,
          backoff: { type: "exponential", delay: 500 },
          removeOnComplete: { count: 1000 },
          removeOnFail: { count: 5000 },
        },
      ),
    );
  }

  /**
   * Sends a signal and, when the run waits for it, queues the run.
   *
   * @throws {SignalConflictError} when that signal was already sent
   */
  signal(runId: string, name: string, value: JsonValue): Promise<SignalResult> {
    return signal(runId, name, value, { journal: this.journal, wake: (id) => this.wake(id) });
  }

  /** Counts of jobs by state (waiting, active, delayed, completed, failed). @throws {BackendError} when Redis fails */
  jobCounts(): Promise<Record<string, number>> {
    return this.conn.call(`cannot count the jobs of queue "${this.queueName}"`, undefined, () =>
      this.queue.getJobCounts("waiting", "active", "delayed", "completed", "failed"),
    );
  }

  /** Removes the queue's keys (tests, teardown). @throws {BackendError} when Redis fails */
  async obliterate(): Promise<void> {
    await this.conn.call(`cannot obliterate queue "${this.queueName}"`, undefined, () =>
      this.queue.obliterate({ force: true }),
    );
  }

  /** Pings Redis through the queue's connection, within `commandTimeoutMs`. @throws {BackendError} when Redis does not answer */
  protected async ping(): Promise<void> {
    await this.conn.call(`cannot ping Redis for queue "${this.queueName}"`, undefined, (c) => c.ping());
  }

  /** The connection's command timeout in use (ms): the bound of each Redis call and of a health check. */
  protected commandTimeoutMs(): number {
    return this.conn.commandTimeoutMs;
  }

  /** Closes the queue's connection. */
  async close(): Promise<void> {
    await this.queue.close();
    await this.conn.close();
  }
}

/** Options of {@link DurableWorker}. */
export interface DurableWorkerOptions extends DurableQueueOptions {
  /** Workflow functions by name (the `workflow` of each run). */
  workflows: Record<string, AnyWorkflowFn> | Map<string, AnyWorkflowFn>;
  /** Runs executed at once by this worker. @default 1 */
  concurrency?: number;
  /**
   * Lease owner id, shown as the holder of the runs this worker executes; every slot uses it, and
   * each execution's lease is its own (a duplicate job in another slot waits). @default `<hostname>:<pid>:<random>`
   */
  owner?: string;
  /** Journal lease duration (ms), renewed every third of it. @default 30000 */
  leaseTtlMs?: number;
  /** BullMQ job lock duration (ms): a dead worker's job is recovered after about this long. @default 30000 */
  lockDurationMs?: number;
  /** BullMQ stalled-job check interval (ms). @default 30000 */
  stalledIntervalMs?: number;
  /** How many times a job may stall (its worker died) before BullMQ fails it. @default 10 */
  maxStalledCount?: number;
  /** Side channel passed to each run. */
  stream?: RunEventStream;
  /** See `RunDurableOptions.inlineSleepMaxMs`. @default 1000 */
  inlineSleepMaxMs?: number;
  /** See `RunDurableOptions.cancelCheckMs`: how soon an operator's cancel aborts a running step. @default 1000 */
  cancelCheckMs?: number;
  /** Called after each job with the run's outcome (logging, metrics). */
  onResult?: (result: RunResult | { runId: string; status: "skipped"; reason: string }) => void;
  /**
   * Called for every error a job meets that leaves its run resumable (a storage error: the journal or
   * its database unreachable, a refused write, a corrupt record), before BullMQ retries the job (with
   * backoff) or gives up. The same error is recorded in the run's events as `run_error` (`attempt`,
   * `detail`: code and message) when the journal takes the write. Nothing is printed.
   */
  onError?: (event: WorkerErrorEvent) => void;
}

/** What {@link DurableWorkerOptions.onError} receives. */
export interface WorkerErrorEvent {
  /** The run the job executes. */
  runId: string;
  /** The error as thrown. */
  error: unknown;
  /** Its `code` (`BACKEND_ERROR`, `JOURNAL_INTEGRITY`, …), or `UNKNOWN` for an error without one. */
  code: string;
  /** Which attempt of the job met it, from 1. */
  attempt: number;
  /** Whether BullMQ will try the job again (false: this was its last attempt; the run stays resumable). */
  willRetry: boolean;
}

/**
 * A worker process's consumer of the durable queue.
 *
 * @example
 * const worker = new DurableWorker({ journal, queueName: "agents", workflows: { "support-agent": agent.workflow() } });
 * await worker.start();
 * // … on shutdown (SIGTERM): the step in progress finishes, the run goes back to the queue
 * await worker.close({ timeoutMs: 20_000 });
 */
export class DurableWorker extends DurableQueue {
  readonly owner: string;
  private readonly workflows: Map<string, AnyWorkflowFn>;
  private readonly options: DurableWorkerOptions;
  private worker: Worker<DurableJobData> | undefined;
  private workerConn: RedisConnection<Redis> | undefined;
  /** The executions in progress, each stoppable by {@link close}. */
  private readonly inFlight = new Set<{ drain: AbortController; abort: AbortController }>();
  /** Set by {@link close}: `drain` once a timeout is given (no new step starts). */
  private closeState: "open" | "closing" | "draining" | "closed" = "open";

  /** @param options - see {@link DurableWorkerOptions} */
  constructor(options: DurableWorkerOptions) {
    super(options);
    checkOptions("DurableWorker", options, WORKER_OPTIONS);
    leaseMs("DurableWorker", "leaseTtlMs", options.leaseTtlMs, 30_000); // refused here, not at the first job
    this.options = options;
    this.owner = options.owner ?? defaultOwner();
    this.workflows =
      options.workflows instanceof Map ? new Map(options.workflows) : new Map(Object.entries(options.workflows));
  }

  /**
   * Starts taking jobs. Resolves once the worker is connected.
   *
   * @throws {BackendError} when Redis is not reachable within `connectTimeoutMs` (call `start()` again later)
   */
  async start(): Promise<void> {
    if (this.worker) return;
    // BullMQ's workers block on Redis: no command timeout, and commands wait through a reconnect.
    const conn = new RedisConnection<Redis>(this.connection as RedisConnectionOptions<Redis>, {
      label: "worker",
      keyPrefix: "bull",
      maxRetriesPerRequest: null,
      offlineQueue: true,
      commandTimeout: false,
      connectNow: true,
    });
    try {
      await conn.connect(`cannot start a worker of queue "${this.queueName}"`);
    } catch (e) {
      await conn.close();
      throw e;
    }
    this.workerConn = conn;
    const { Worker } = loadBullmq();
    this.worker = new Worker<DurableJobData>(this.queueName, (job, token) => this.process(job, token), {
      connection: conn.client,
      prefix: conn.keyPrefix,
      concurrency: this.options.concurrency ?? 1,
      lockDuration: this.options.lockDurationMs ?? 30_000,
      stalledInterval: this.options.stalledIntervalMs ?? 30_000,
      maxStalledCount: this.options.maxStalledCount ?? 10,
      autorun: true,
    });
    this.worker.on("error", () => undefined); // connection hiccups are retried by ioredis; job errors go to the job
    await this.worker.waitUntilReady();
  }

  private async process(
    job: Job<DurableJobData>,
    token: string | undefined,
  ): Promise<{ runId: string; status: string }> {
    try {
      return await this.execute(job, token);
    } catch (error) {
      const { DelayedError, UnrecoverableError } = loadBullmq();
      if (!(error instanceof DelayedError) && !(error instanceof UnrecoverableError)) await this.report(job, error);
      throw error;
    }
  }

  /** Tells {@link DurableWorkerOptions.onError} and the run's events of an error BullMQ is about to retry. */
  private async report(job: Job<DurableJobData>, error: unknown): Promise<void> {
    const { runId } = job.data;
    const code = typeof (error as { code?: unknown })?.code === "string" ? (error as { code: string }).code : "UNKNOWN";
    const attempt = job.attemptsMade + 1;
    const willRetry = attempt < (job.opts.attempts ?? 1);
    try {
      this.options.onError?.({ runId, error, code, attempt, willRetry });
    } catch {
      // a throwing callback must not change how the job is retried
    }
    const message = error instanceof Error ? error.message : String(error);
    await this.journal
      .appendEvent(runId, { type: "run_error", attempt, detail: `${code}: ${message}`.slice(0, 2000) })
      .catch(() => undefined); // the journal may be what failed: the callback has it
  }

  private async execute(
    job: Job<DurableJobData>,
    token: string | undefined,
  ): Promise<{ runId: string; status: string }> {
    const { runId } = job.data;
    const run = await this.journal.getRun(runId);
    if (!run) {
      this.options.onResult?.({ runId, status: "skipped", reason: "unknown run" });
      return { runId, status: "missing" };
    }
    if (run.status === "completed" || run.status === "failed") return { runId, status: run.status };
    const fn = this.workflows.get(run.workflow);
    const { DelayedError, UnrecoverableError } = loadBullmq();
    if (!fn) throw new UnrecoverableError(new UnknownWorkflowError(run.workflow, [...this.workflows.keys()]).message);
    const stop = { drain: new AbortController(), abort: new AbortController() };
    if (this.closeState === "draining") stop.drain.abort(closingError(this.queueName, false));
    this.inFlight.add(stop);
    try {
      const result = await executeRun(
        runId,
        fn as WorkflowFn,
        {
          journal: this.journal,
          owner: this.owner,
          leaseTtlMs: this.options.leaseTtlMs ?? 30_000,
          leaseWaitMs: 0,
          ...(this.options.stream ? { stream: this.options.stream } : {}),
          inlineSleepMaxMs: this.options.inlineSleepMaxMs ?? 1000,
          ...(this.options.cancelCheckMs !== undefined ? { cancelCheckMs: this.options.cancelCheckMs } : {}),
        },
        { drain: stop.drain.signal, abort: stop.abort.signal },
      );
      if (result.status === "waiting" && result.waitingFor.kind === "timer") {
        // The wake-up time is the store's clock; so is the delay.
        await this.wake(runId, result.waitingFor.wakeAt - (await this.journal.now()));
      }
      this.options.onResult?.(result);
      return { runId, status: result.status };
    } catch (error) {
      if (error instanceof LeaseHeldError) {
        // another live executor holds the run (e.g. a wake-up raced a running step): look again shortly
        await job.moveToDelayed(Math.min(error.expiresAt + 20, Date.now() + 250), token);
        throw new DelayedError();
      }
      if (error instanceof StaleFencingTokenError) {
        this.options.onResult?.({ runId, status: "skipped", reason: "taken over by another worker" });
        return { runId, status: "taken-over" };
      }
      if (error === stop.drain.signal.reason || error === stop.abort.signal.reason) {
        // closing: the lease is released (executeRun's finally); the job goes back to the queue, due now,
        // without spending an attempt, for another worker (or this one restarted) to continue
        await job.moveToDelayed(Date.now(), token);
        throw new DelayedError();
      }
      throw error;
    } finally {
      this.inFlight.delete(stop);
    }
  }

  /**
   * Stops taking jobs at once, then closes the connections.
   *
   * Without `timeoutMs` it waits for the runs in progress to end or suspend, however long that takes
   * (0.1 behaviour). With `timeoutMs` (a Kubernetes SIGTERM handler's grace period): each run in
   * progress finishes the step it is in (its result is recorded) and starts no other; the run's lease
   * is released and its job goes back to the queue (not failed, no attempt spent), for another worker
   * to continue from the journal. Steps still running after `timeoutMs` are abandoned: their
   * `currentStep().signal` is aborted, a result they produce later is refused, and `close` resolves
   * without waiting for them. Such a step's `started` record stays, and the next worker runs its body
   * again within the step's retry budget (`maxStartedAttempts`; the body is at-least-once, the recorded
   * result exactly-once: use `currentStep().idempotencyKey` for external effects).
   *
   * @param options - `timeoutMs`: grace period for the steps in progress (0 … 2^31−1 ms)
   * @throws {InvalidOptionError} for an unknown option or a bad `timeoutMs`
   * @example
   * process.on("SIGTERM", async () => {
   *   await worker.close({ timeoutMs: 20_000 }); // below the pod's terminationGracePeriodSeconds
   *   process.exit(0);
   * });
   */
  override async close(options?: { timeoutMs?: number }): Promise<void> {
    let timeoutMs: number | undefined;
    if (options !== undefined) {
      checkOptions("DurableWorker.close", options, CLOSE_OPTIONS);
      if (options.timeoutMs !== undefined)
        timeoutMs = leaseMs("DurableWorker.close", "timeoutMs", options.timeoutMs, 0, 0);
    }
    if (this.closeState === "open") this.closeState = "closing";
    const closing = this.worker?.close();
    if (timeoutMs === undefined || !closing) await closing;
    else {
      this.closeState = "draining";
      for (const run of this.inFlight) run.drain.abort(closingError(this.queueName, false));
      if (!(await settlesWithin(closing, timeoutMs))) {
        for (const run of this.inFlight) run.abort.abort(closingError(this.queueName, true));
        // handing the jobs back takes a Redis call or two; a Redis that does not answer leaves them to
        // BullMQ's stalled-job check (their leases are released in the journal all the same)
        if (!(await settlesWithin(closing, this.commandTimeoutMs()))) {
          await this.workerConn?.close();
          await settlesWithin(closing, this.commandTimeoutMs());
        }
      }
    }
    await this.workerConn?.close();
    await super.close();
    this.closeState = "closed";
  }

  /**
   * A readiness probe (e.g. for a Kubernetes HTTP handler): whether this worker takes jobs and can reach
   * its stores. Redis is pinged through the queue's connection and the journal asked for its clock, each
   * bounded by `commandTimeoutMs`; it never throws.
   *
   * @returns `ready`: started, not closing, Redis and the journal answer; `running`: runs executing now;
   *   `closing`: `close` was called; `redis`/`journal`: `"ok"` or `"down"`
   * @example
   * app.get("/readyz", async (_req, res) => { const h = await worker.health(); res.status(h.ready ? 200 : 503).json(h); });
   */
  async health(): Promise<{
    ready: boolean;
    running: number;
    closing: boolean;
    redis: "ok" | "down";
    journal: "ok" | "down";
  }> {
    const closing = this.closeState !== "open";
    const [redis, journal] = await Promise.all([
      this.closeState === "closed"
        ? ("down" as const) // its connections are closed
        : this.ping().then(
            () => "ok" as const,
            () => "down" as const,
          ),
      withTimeout(this.journal.now(), this.commandTimeoutMs()).then(
        () => "ok" as const,
        () => "down" as const,
      ),
    ]);
    const ready = this.worker !== undefined && !closing && redis === "ok" && journal === "ok";
    return { ready, running: this.inFlight.size, closing, redis, journal };
  }
}
