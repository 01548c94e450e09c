/**
 * The workflow cold store over a durable-run {@link Journal}: a workflow is a
 * journal run, so graphs and durable runs share one set of tables, one lease
 * and one fencing token (docs/one-engine.md, part 3).
 *
 * | workflow concept | journal form |
 * | --- | --- |
 * | workflow `W` | run `W` (`workflow` = `graph` unless told otherwise) |
 * | checkpoint `k` after node `N` | step `checkpoint:<k>:<N>`, `completed`, output = the state |
 * | side effect `key` = `W:<s>:<i>` named `name` | step `effect:<s>:<i>:<name>`: `started`, then `completed` with `{ v }` (or `failed` when abandoned) |
 * | node failure at step `k` of node `N` | step `error:<k>:<N>` (output = the error) and the run `failed` |
 * | the workflow lease | the run's lease, one fencing token |
 * | `deleteWorkflow` | `resetRun(W, -1)`: every step dropped, the token raised, the lease ended |
 *
 * A checkpoint written twice at one step index (a plain `save` is an upsert)
 * is a second step record: the newest record of a step index is the
 * checkpoint. Every fenced write is checked by the journal's own token check;
 * a released lease and (for a side-effect start) an expired one are refused
 * here first, so a worker past its lease starts nothing.
 *
 * This module imports `durable/` only, never a driver.
 *
 * @module
 */
import { InvalidOptionError } from "../../core/errors.js";
import { isJsonObject, type JsonObject, type JsonValue } from "../../core/json.js";
import { checkOptions, optionKeys } from "../../core/options.js";
import { JournalIntegrityError, RunCancelledError, StaleFencingTokenError } from "../errors.js";
import {
  hashInput,
  type Journal,
  type RunRecord,
  type RunStatus,
  runCursor,
  type StepRecord,
  type WriteStepOptions,
  withOutputBytes,
  withOutputJson,
} from "../journal.js";
import type { SqlJournal } from "../journal-sql.js";
import type {
  ColdOrphanOptions,
  ColdPruneOptions,
  ColdStore,
  IdempotencyRecord,
  ListCursor,
  SnapshotWrite,
  StepErrorRecord,
  StoredSnapshot,
  WorkflowFence,
  WorkflowLeaseResult,
  WorkflowRowStatus,
  WorkflowSummary,
} from "./contract.js";
import { BlobError, WorkflowConflictError } from "./errors.js";
import { originalSummaryFields } from "./original.js";

/** Prefix of a checkpoint step's name: `checkpoint:<stepIndex>:<node>`. */
export const CHECKPOINT_STEP = "checkpoint:";
/** Prefix of a side-effect step's name: `effect:<startStep>:<callIndex>:<name>`. */
export const EFFECT_STEP = "effect:";
/** Prefix of a node-failure step's name: `error:<stepIndex>:<node>`. */
export const ERROR_STEP = "error:";
/** The `workflow` of the runs a graph's checkpoints live in, unless told otherwise. */
export const DEFAULT_GRAPH_WORKFLOW = "graph";
/** Who an operator action of the store is recorded as (`resetRun` of a delete). */
const BY = "dumplings:workflow";
const NULL_HASH = hashInput(null);
/** The keys of {@link ColdOrphanOptions}: any other is an `InvalidOptionError`. */
const ORPHAN_OPTIONS = optionKeys<ColdOrphanOptions>({ orphanRefs: true });

/** Options of {@link JournalColdStore}. */
export interface JournalColdStoreOptions {
  /** The journal the workflows live in (a `SqliteJournal`, `PostgresJournal` or `RedisJournal`). */
  journal: Journal;
  /** The `workflow` name of the runs created for graphs; listings show runs of this name. @default "graph" */
  workflow?: string;
  /** Where the journal keeps its data, for messages (an SQLite file's absolute path, `postgres:<schema>`). */
  location?: string;
  /** Whether {@link JournalColdStore.close} closes the journal. @default true */
  closeJournal?: boolean;
}

/** A parsed checkpoint step. */
interface Checkpoint {
  stepIndex: number;
  node: string;
  step: StepRecord;
}

/** A side effect's record, as found in the journal. */
interface EffectStep {
  runId: string;
  /** The workflow it was started for. */
  workflowId: string;
  seq: number;
  stepName: string;
  name: string;
  stepIndex: number;
  step: StepRecord;
}

const STATUS_OF_RUN: Record<RunStatus, WorkflowRowStatus> = {
  pending: "running",
  running: "running",
  waiting: "waiting",
  blocked: "failed",
  completed: "finished",
  failed: "failed",
  cancelled: "failed",
};
/**
 * The order of a workflow listing, the journal's: newest created first, by `(createdAt, workflowId)`
 * (both descending, ids compared byte by byte as every journal compares them).
 */
const newestCreated = (a: WorkflowSummary, b: WorkflowSummary): number =>
  b.createdAt - a.createdAt || Buffer.compare(Buffer.from(b.workflowId, "utf8"), Buffer.from(a.workflowId, "utf8"));

const RUN_STATUS: Record<WorkflowRowStatus, RunStatus> = {
  running: "running",
  waiting: "waiting",
  finished: "completed",
  failed: "failed",
};

/** `checkpoint:<k>:<node>` parsed, or undefined for another step. */
function parseCheckpoint(step: StepRecord): Checkpoint | undefined {
  const c = parseCheckpointName(step.name, step.status);
  return c && { ...c, step };
}

/**
 * The token a checkpoint of `run` is written with, decided as {@link JournalColdStore}'s `tokenFor`
 * decides it without the clock (no error made here: undefined, and `tokenFor` then says why): the
 * writer's when it is the run's current one and its lease is held, the run's for an unfenced write;
 * none for a cancelled run.
 */
function tokenOf(run: RunRecord, fencingToken: number | undefined): number | undefined {
  if (run.status === "cancelled") return undefined;
  if (fencingToken === undefined) return run.fencingToken;
  return run.fencingToken === fencingToken && run.leaseOwner !== undefined ? fencingToken : undefined;
}

/** A checkpoint step's name (`checkpoint:<k>:<node>`, status `completed`) parsed, or undefined for another step. */
function parseCheckpointName(name: string, status: string): { stepIndex: number; node: string } | undefined {
  if (!name.startsWith(CHECKPOINT_STEP) || status !== "completed") return undefined;
  const rest = name.slice(CHECKPOINT_STEP.length);
  const colon = rest.indexOf(":");
  if (colon < 0) return undefined;
  const stepIndex = Number(rest.slice(0, colon));
  if (!Number.isSafeInteger(stepIndex)) return undefined;
  return { stepIndex, node: rest.slice(colon + 1) };
}

/** The newest record of each step index, by step index. */
function checkpointsOf(steps: readonly StepRecord[]): Checkpoint[] {
  const byIndex = new Map<number, Checkpoint>();
  for (const step of steps) {
    const c = parseCheckpoint(step);
    if (c) byIndex.set(c.stepIndex, c); // seq order: a later record of one index replaces the earlier
  }
  return [...byIndex.values()].sort((a, b) => a.stepIndex - b.stepIndex);
}

/** A checkpoint as a snapshot row: its state parsed as read, its text made only when asked for. */
function toSnapshot(workflowId: string, c: Checkpoint): StoredSnapshot {
  const state = c.step.output ?? null;
  let text: string | undefined;
  return {
    workflowId,
    stepIndex: c.stepIndex,
    nodeName: c.node,
    get stateJson() {
      text ??= JSON.stringify(state);
      return text;
    },
    state,
    createdAt: c.step.startedAt,
  };
}

/** The seq the next record goes to: the highest + 1 (seqs may have holes after a prune). */
const nextSeq = (steps: readonly StepRecord[]): number => (steps.length === 0 ? 0 : (steps.at(-1)?.seq ?? -1) + 1);

const RUNNER_KEY = /^(.*):(\d+):(\d+)$/;

/**
 * Where the record of a side effect lives: the run its key names and the part of the key after
 * it. The runner's keys are `<workflowId>:<startStep>:<callIndex>` (run `workflowId`, part
 * `<startStep>:<callIndex>`); another key (an `IdempotencyGuard` used on its own) is a run of its
 * own, part the whole key, so a guard finds it again from the key alone.
 *
 * @param key - the idempotency key
 * @param workflowId - the workflow given with it (`""`: none)
 */
export function effectRunId(key: string, workflowId: string): { runId: string; part: string } {
  if (workflowId !== "" && key.startsWith(`${workflowId}:`) && RUNNER_KEY.test(key)) {
    return { runId: workflowId, part: key.slice(workflowId.length + 1) };
  }
  const m = RUNNER_KEY.exec(key);
  if (m?.[1]) return { runId: m[1], part: `${m[2]}:${m[3]}` };
  return { runId: key, part: key };
}

/**
 * A {@link ColdStore} whose tables are a durable-run {@link Journal}'s: a workflow is run `W`,
 * a checkpoint a step, the workflow lease the run's lease.
 *
 * @example
 * const journal = new SqliteJournal({ path: "app.db" });
 * const store = await CheckpointStore.open({ cold: new JournalColdStore({ journal }) });
 */
export class JournalColdStore implements ColdStore {
  /** The journal's name (`sqlite`, `postgres`, `redis`), for messages. */
  readonly name: string;
  /** {@inheritDoc ColdStore.location} */
  readonly location: string | undefined;
  /** The journal the workflows live in. */
  readonly journal: Journal;
  /** The `workflow` of the runs this store creates and lists. */
  readonly workflow: string;
  private readonly closeJournal: boolean;

  /** @param options - `journal` (required), `workflow`, `location`, `closeJournal` */
  constructor(options: JournalColdStoreOptions) {
    this.journal = options.journal;
    this.name = options.journal.name;
    this.location = options.location;
    this.workflow = options.workflow ?? DEFAULT_GRAPH_WORKFLOW;
    this.closeJournal = options.closeJournal ?? true;
  }

  /** {@inheritDoc ColdStore.init} (the journal creates its tables on first use: reaches it once) */
  async init(): Promise<void> {
    await this.journal.now();
  }

  // ---- runs, tokens and fences ----

  /** The run of a workflow, created (`pending`, token 0, with `input`) when missing. */
  private async run(workflowId: string, input: JsonValue = null): Promise<RunRecord> {
    const run = await this.journal.getRun(workflowId);
    if (run) return run;
    return (await this.journal.createRun({ runId: workflowId, workflow: this.workflow, input })).run;
  }

  /**
   * The error of a cancelled run: who cancelled it and why, from its `run_cancelled` event. A
   * workflow whose run an operator cancelled (`dumplings runs cancel`, `cancel()`) takes no more
   * steps: no lease, no checkpoint, no side effect, whichever process asks.
   */
  private async cancelled(run: RunRecord): Promise<RunCancelledError> {
    const event = (await this.journal.readEvents(run.runId)).findLast((e) => e.type === "run_cancelled");
    return new RunCancelledError(run.runId, event?.by, event?.detail);
  }

  /** The error of a refused fenced write, from the run as it is now: {@link RunCancelledError} when it was cancelled. */
  private async lost(
    workflowId: string,
    what: string,
    token: number,
  ): Promise<StaleFencingTokenError | RunCancelledError> {
    const run = await this.journal.getRun(workflowId);
    if (run?.status === "cancelled") return this.cancelled(run);
    return new StaleFencingTokenError({
      workflowId,
      what,
      fencingToken: token,
      lease: {
        token: run ? run.fencingToken : null,
        owner: run?.leaseOwner ?? null,
        expiresAt: run?.leaseExpiresAt ?? null,
      },
    });
  }

  /**
   * The token to write with: the writer's, checked against the run (current and held, and with
   * `live` not expired by the journal's clock), or the run's current token for an unfenced write.
   * @throws {StaleFencingTokenError}
   */
  private async tokenFor(run: RunRecord, fencingToken: number | undefined, what: string, live = false) {
    if (run.status === "cancelled") throw await this.cancelled(run);
    if (fencingToken === undefined) return run.fencingToken;
    const held = run.fencingToken === fencingToken && run.leaseOwner !== undefined;
    const alive = !live || (run.leaseExpiresAt ?? 0) > (await this.journal.now());
    if (!held || !alive) throw await this.lost(run.runId, what, fencingToken);
    return fencingToken;
  }

  /**
   * Runs a journal write; a stale token becomes {@link StaleFencingTokenError} for a fenced write,
   * a retry (with the new token) for an unfenced one.
   */
  private async fenced<T>(
    workflowId: string,
    fencingToken: number | undefined,
    what: string,
    write: () => Promise<T>,
  ): Promise<T | typeof RETRY> {
    try {
      return await write();
    } catch (e) {
      if (!(e instanceof StaleFencingTokenError)) throw e;
      if (fencingToken !== undefined) throw await this.lost(workflowId, what, fencingToken);
      return RETRY;
    }
  }

  /** Moves the run to the status of the workflow when it differs. */
  /**
   * Moves the run to the status of the workflow when it differs. A workflow waiting on `interrupt()`
   * makes the run wait for signal `interrupt:<id>` (unless that signal has already arrived: the run
   * then stays as it is, and the next `runOrResume` delivers it).
   */
  private async setStatus(
    token: number,
    run: RunRecord,
    status: WorkflowRowStatus,
    state: () => JsonValue,
  ): Promise<void> {
    const want = RUN_STATUS[status];
    const waitingFor = status === "waiting" ? interruptSignalOf(state()) : undefined;
    if (run.status === want && run.waitingFor === waitingFor) return;
    await this.journal.updateRun(token, run.runId, {
      status: want,
      ...(waitingFor === undefined ? {} : { waitingFor }),
    });
  }

  // ---- checkpoints ----

  /** {@inheritDoc ColdStore.write} */
  async write(row: SnapshotWrite, expectedLatest: number | null | undefined, fencingToken?: number): Promise<void> {
    const id = row.workflowId;
    const what = `checkpoint ${row.stepIndex} refused`;
    // The state's JSON is written as the store serialised it (no parse, no second serialisation): its
    // UTF-8 bytes when the store has them (an SQLite journal writes them as the text, which is then never
    // decoded), else its text; its value is parsed only when asked for (a waiting state's interrupt).
    let parsed: JsonValue | undefined;
    const output = (): JsonValue => {
      parsed ??= JSON.parse(row.stateJson) as JsonValue;
      return parsed;
    };
    // Blobs the store keeps (`row.blobs`) go in the checkpoint's own write, referenced by it.
    const options: WriteStepOptions = {
      snapshot: row.inNode === undefined ? resumesAlone(output()) : !row.inNode,
      ...(row.blobs
        ? {
            blobs: new Map([...row.blobs].map(([ref, bytes]) => [journalRef(ref), bytes])),
            blobRefs: row.blobRefs.map(journalRef),
          }
        : {}),
    };
    const record = (seq: number, token: number): StepRecord => {
      const bare = Object.defineProperty(
        {
          runId: id,
          seq,
          name: `${CHECKPOINT_STEP}${row.stepIndex}:${row.nodeName}`,
          inputHash: NULL_HASH,
          status: "completed",
          attempt: 1,
          startedAt: row.createdAt,
          finishedAt: row.createdAt,
          fencingToken: token,
        } as StepRecord,
        "output",
        { get: output, enumerable: true },
      );
      return row.stateBytes === undefined
        ? withOutputJson(bare, row.stateJson)
        : withOutputBytes(bare, row.stateBytes, () => row.stateJson);
    };
    for (let attempt = 0; ; attempt++) {
      let written: { run: RunRecord; token: number } | undefined;
      try {
        const out = await this.fenced(id, fencingToken, what, () =>
          this.append(id, fencingToken, what, record, options, expectedLatest),
        );
        if (out === RETRY) continue;
        written = out;
      } catch (e) {
        // Another writer took the seq meanwhile: read again (the compare-and-set then decides).
        if (e instanceof JournalIntegrityError && attempt < 5) continue;
        throw e;
      }
      if (written === undefined) continue; // the run was created meanwhile: write again
      const { run, token } = written;
      await this.fenced(id, fencingToken, what, () => this.setStatus(token, run, row.status, output));
      return;
    }
  }

  /**
   * Writes a checkpoint's record (`make(seq, token)`) at the workflow's next seq, when its newest
   * checkpoint is `expectedLatest` (undefined: whichever), with the writer's token (checked: current,
   * held, the run not cancelled) or the run's for an unfenced write. An SQL journal on SQLite reads the
   * run and the head and writes the record in one transaction (`appendStep`); another journal's run is
   * read (created when missing), then the head ({@link head}), then the record written, refused
   * (JournalIntegrityError) when another writer took the seq meanwhile.
   * @returns the run (as read before the write) and the token written with; undefined when the run had
   *   to be created first (write again)
   * @throws {WorkflowConflictError} when the newest checkpoint is another (nothing written)
   * @throws {StaleFencingTokenError} | {RunCancelledError} as {@link tokenFor}
   */
  private async append(
    id: string,
    fencingToken: number | undefined,
    what: string,
    make: (seq: number, token: number) => StepRecord,
    options: WriteStepOptions,
    expectedLatest: number | null | undefined,
  ): Promise<{ run: RunRecord; token: number } | undefined> {
    const latestOf = (newest: { name: string; status: string } | undefined) =>
      (newest && parseCheckpointName(newest.name, newest.status))?.stepIndex ?? null;
    const journal = this.journal as Journal & Partial<Pick<SqlJournal, "appendStep">>;
    if (typeof journal.appendStep === "function") {
      let token = 0;
      const out = await journal.appendStep(
        id,
        (run) => {
          const t = run && tokenOf(run, fencingToken);
          if (t !== undefined) token = t;
          return t;
        },
        make,
        options,
        CHECKPOINT_STEP,
        (newest) => expectedLatest === undefined || latestOf(newest) === expectedLatest,
      );
      if (out !== undefined) {
        if (out.run === undefined) {
          await this.run(id);
          return undefined;
        }
        if (out.seq !== undefined) return { run: out.run, token };
        if ("refused" in out) {
          throw new WorkflowConflictError(id, expectedLatest ?? null, latestOf(out.refused), this.name);
        }
        await this.tokenFor(out.run, fencingToken, what); // says why no token was given (it throws)
        return undefined;
      }
    }
    const run = await this.run(id);
    const token = await this.tokenFor(run, fencingToken, what);
    const { seq, latest } = await this.head(id);
    if (expectedLatest !== undefined && latest !== expectedLatest) {
      throw new WorkflowConflictError(id, expectedLatest, latest, this.name);
    }
    await this.journal.writeStep(token, make(seq, token), options);
    return { run, token };
  }

  /**
   * The seq a workflow's next record goes to and the step index of its newest checkpoint (null: none).
   * An SQL journal reads both in one statement that reads no state (`stepHead`); another journal reads
   * the newest record, then, unless it is a checkpoint's, the newest checkpoint: the seq first, so a
   * record another writer commits after the seq is read takes that seq, and this write is refused
   * (JournalIntegrityError) and both are read again; read the other way round, a checkpoint committed
   * between the two reads would go unseen by the compare-and-set.
   */
  private async head(workflowId: string): Promise<{ seq: number; latest: number | null }> {
    const journal = this.journal as Journal & Partial<Pick<SqlJournal, "stepHead">>;
    if (typeof journal.stepHead === "function") {
      const { lastSeq, newest } = await journal.stepHead(workflowId, CHECKPOINT_STEP);
      const latest = newest === undefined ? undefined : parseCheckpointName(newest.name, newest.status);
      return { seq: lastSeq === undefined ? 0 : lastSeq + 1, latest: latest?.stepIndex ?? null };
    }
    const last = await this.journal.readSteps(workflowId, { last: 1, outputs: false });
    const seq = nextSeq(last);
    const step = last[0];
    // The newest record is the newest checkpoint's (the common case): no second read.
    if (step === undefined) return { seq, latest: null };
    const newest = step.name.startsWith(CHECKPOINT_STEP) ? parseCheckpoint(step) : await this.newest(workflowId, false);
    return { seq, latest: newest?.stepIndex ?? null };
  }

  /** The newest checkpoint of a workflow (the last one written), read alone; without its state with `outputs` false. */
  private async newest(workflowId: string, outputs = true): Promise<Checkpoint | undefined> {
    const [step] = await this.journal.readSteps(workflowId, { namePrefix: CHECKPOINT_STEP, last: 1, outputs });
    return step ? parseCheckpoint(step) : undefined;
  }

  /**
   * The step index of a workflow's newest checkpoint, without reading the state (what
   * `CheckpointStore.loadLatest` checks a hot-tier entry against).
   */
  async newestStep(workflowId: string): Promise<number | undefined> {
    return (await this.newest(workflowId, false))?.stepIndex;
  }

  /** Every checkpoint of a workflow (the newest record of each step index), by step index. */
  private async checkpoints(workflowId: string): Promise<Checkpoint[]> {
    return checkpointsOf(await this.journal.readSteps(workflowId, { namePrefix: CHECKPOINT_STEP }));
  }

  /** {@inheritDoc ColdStore.read} */
  async read(workflowId: string, stepIndex: number): Promise<StoredSnapshot | undefined> {
    const c = (await this.checkpoints(workflowId)).find((x) => x.stepIndex === stepIndex);
    return c ? toSnapshot(workflowId, c) : undefined;
  }

  /** {@inheritDoc ColdStore.latest} (the checkpoint written last) */
  async latest(workflowId: string): Promise<StoredSnapshot | undefined> {
    const c = await this.newest(workflowId);
    return c ? toSnapshot(workflowId, c) : undefined;
  }

  /** {@inheritDoc ColdStore.history} */
  async history(workflowId: string): Promise<StoredSnapshot[]> {
    return (await this.checkpoints(workflowId)).map((c) => toSnapshot(workflowId, c));
  }

  /** {@inheritDoc ColdStore.summary} */
  async summary(workflowId: string): Promise<WorkflowSummary | undefined> {
    const run = await this.journal.getRun(workflowId);
    return run ? this.summaryOf(run) : undefined;
  }

  private async summaryOf(run: RunRecord): Promise<WorkflowSummary | undefined> {
    const last = await this.newest(run.runId);
    if (!last) return undefined;
    const state = (last.step.output ?? {}) as JsonObject;
    const parent = state.parent as JsonObject | null | undefined;
    // A checkpoint adopted from the original design's layout (snake_case) names its node its own way.
    const original = isJsonObject(state) ? originalSummaryFields(state) : undefined;
    return {
      workflowId: run.runId,
      sessionId: original?.sessionId ?? (typeof state.sessionId === "string" ? state.sessionId : ""),
      status: STATUS_OF_RUN[run.status],
      latestStep: last.stepIndex,
      currentNode:
        original?.currentNode ??
        (state.isFinished === true ? "__end__" : typeof state.currentNode === "string" ? state.currentNode : ""),
      parentWorkflowId: parent && typeof parent.workflowId === "string" ? parent.workflowId : null,
      createdAt: run.createdAt,
      updatedAt: run.updatedAt,
    };
  }

  /**
   * {@inheritDoc ColdStore.list}
   *
   * The journal's `listRuns({ workflow, status, limit, after })`, newest created first by the run's
   * `(createdAt, runId)`, which never change: a walk lists each workflow once while workflows run,
   * wait and finish between its pages. Runs without a checkpoint (a lease taken before the first
   * one, a deleted workflow) are not listed.
   */
  async list(query: { status?: WorkflowRowStatus; limit: number; after?: ListCursor }): Promise<WorkflowSummary[]> {
    const out = new Map<string, WorkflowSummary>(); // a run whose status changes between two statuses' reads is listed once
    for (const status of this.statusesOf(query.status)) {
      let after = query.after && runCursor({ createdAt: query.after.createdAt, runId: query.after.workflowId });
      for (;;) {
        const page = await this.journal.listRuns({
          workflow: this.workflow,
          limit: query.limit,
          ...(status === undefined ? {} : { status }),
          ...(after === undefined ? {} : { after }),
        });
        let found = 0;
        for (const run of page) {
          if (run.status === "pending" || out.has(run.runId)) continue;
          const s = await this.summaryOf(run);
          if (s) {
            out.set(s.workflowId, s);
            found++;
          }
        }
        const last = page.at(-1);
        if (page.length < query.limit || !last || found >= query.limit) break;
        after = runCursor(last);
      }
    }
    return [...out.values()].sort(newestCreated).slice(0, query.limit);
  }

  /** The journal statuses a listing's `status` reads (`failed`: failed, blocked and cancelled runs). */
  private statusesOf(status: WorkflowRowStatus | undefined): (RunStatus | undefined)[] {
    if (status === undefined) return [undefined];
    return status === "failed" ? ["failed", "blocked", "cancelled"] : [RUN_STATUS[status]];
  }

  /**
   * {@inheritDoc ColdStore.explainList}
   *
   * The `listRuns` call, then, on an SQL journal, the database's plan of its query (the first
   * status's, for `failed`).
   */
  async explainList(status?: WorkflowRowStatus): Promise<string> {
    const first = this.statusesOf(status)[0];
    const filter = { workflow: this.workflow, ...(first === undefined ? {} : { status: first }), limit: 51 };
    const call = `journal ${this.name}: listRuns(${JSON.stringify(filter)})`;
    const sql = this.journal as Journal & { explainListRuns?: (f: typeof filter) => Promise<string> };
    return typeof sql.explainListRuns === "function" ? `${call}\n${await sql.explainListRuns(filter)}` : call;
  }

  /**
   * {@inheritDoc ColdStore.deleteWorkflow} (the run is reset: steps dropped, token raised, lease ended)
   *
   * With `orphanRefs`, the references its checkpoint records held (every record, a step index's
   * earlier ones too) that no checkpoint of another run of the journal holds.
   */
  async deleteWorkflow(
    workflowId: string,
    options: ColdOrphanOptions = {},
  ): Promise<{ existed: boolean; orphanRefs: string[] }> {
    checkOptions(`${this.name} deleteWorkflow`, options, ORPHAN_OPTIONS);
    const run = await this.journal.getRun(workflowId);
    if (!run) return { existed: false, orphanRefs: [] };
    const want = options.orphanRefs === true;
    const mine = await this.journal.readSteps(workflowId, { namePrefix: CHECKPOINT_STEP, outputs: want });
    const existed = run.status !== "pending" && mine.some((step) => parseCheckpoint(step) !== undefined);
    await this.journal.resetRun(workflowId, -1, BY);
    if (!want) return { existed, orphanRefs: [] };
    const refs = new Set<string>();
    for (const step of mine) for (const r of refsOf(step.output)) refs.add(r);
    if (refs.size > 0) for (const r of await this.checkpointRefs(workflowId)) refs.delete(r);
    return { existed, orphanRefs: [...refs] };
  }

  /**
   * The blob references (`sharedMemory` values `{ "$dumplings_blob": ref }`) held by the checkpoint
   * records of every run of the journal (a graph's of any `workflow` name; every record, a step
   * index's earlier ones too), but `skip`'s: what the blobs kept outside the journal are checked
   * against. Reads every checkpoint's state: asked for only when the blobs are external.
   */
  protected async checkpointRefs(skip?: string): Promise<Set<string>> {
    const refs = new Set<string>();
    let after: string | undefined;
    for (;;) {
      const page = await this.journal.listRuns({ limit: 500, ...(after === undefined ? {} : { after }) });
      for (const run of page) {
        if (run.runId === skip) continue;
        for (const step of await this.journal.readSteps(run.runId, { namePrefix: CHECKPOINT_STEP })) {
          for (const r of refsOf(step.output)) refs.add(r);
        }
      }
      const last = page.at(-1);
      if (page.length < 500 || !last) return refs;
      after = runCursor(last);
    }
  }

  /** The references of `before` ({@link checkpointRefs}) that no checkpoint holds now. */
  protected async unreferenced(before: ReadonlySet<string>): Promise<string[]> {
    if (before.size === 0) return [];
    const now = await this.checkpointRefs();
    return [...before].filter((r) => !now.has(r));
  }

  /**
   * {@inheritDoc ColdStore.prune}
   *
   * The journal's `pruneRuns`: in every run, the records finished before the cutoff that lie before
   * its `keepLast`-th newest checkpoint go (checkpoints, and the side-effect and error records of
   * the node runs before them). `deletedSnapshots` counts every record deleted, `deletedBlobs` the
   * blobs the journal deleted with their last reference. With `orphanRefs` (blobs kept outside the
   * journal), `orphanRefs` names the references the deleted checkpoints held that no checkpoint left
   * holds (the checkpoints are read before and after); else none. The journal keeps no month tables:
   * `archiveDir` is refused.
   * @throws {InvalidOptionError} with `archiveDir`
   */
  async prune(
    cutoff: number,
    keepLast: number,
    options: ColdPruneOptions & ColdOrphanOptions = {},
  ): Promise<{ deletedSnapshots: number; orphanRefs: string[]; deletedBlobs: number }> {
    if (options.archiveDir !== undefined) {
      throw new InvalidOptionError(
        this.name,
        "archiveDir",
        "the journal keeps no month tables to archive: prune deletes old checkpoints in place (copy the database first to keep them)",
      );
    }
    const before = options.orphanRefs === true ? await this.checkpointRefs() : undefined;
    const out = await this.journal.pruneRuns({
      finishedBefore: cutoff,
      keepLast,
      ...(options.vacuum === undefined ? {} : { vacuum: options.vacuum }),
    });
    const orphanRefs = before === undefined ? [] : await this.unreferenced(before);
    return { deletedSnapshots: out.deletedSteps, orphanRefs, deletedBlobs: out.deletedBlobs };
  }

  // ---- node failures ----

  /** {@inheritDoc ColdStore.recordError} (a step `error:<k>:<node>`, and the run `failed` when `k` is its latest step) */
  async recordError(record: StepErrorRecord, fencingToken?: number): Promise<void> {
    const id = record.workflowId;
    const what = `error record of step ${record.stepIndex} refused`;
    for (let attempt = 0; ; attempt++) {
      const run = await this.run(id);
      const token = await this.tokenFor(run, fencingToken, what);
      const { seq, latest } = await this.head(id);
      const step: StepRecord = {
        runId: id,
        seq,
        name: `${ERROR_STEP}${record.stepIndex}:${record.nodeName}`,
        inputHash: NULL_HASH,
        status: "completed",
        output: record.error,
        attempt: 1,
        startedAt: record.createdAt,
        finishedAt: record.createdAt,
        fencingToken: token,
      };
      try {
        if ((await this.fenced(id, fencingToken, what, () => this.journal.writeStep(token, step))) === RETRY) continue;
      } catch (e) {
        if (e instanceof JournalIntegrityError && attempt < 5) continue;
        throw e;
      }
      if (latest === record.stepIndex) {
        const e = record.error;
        const error = {
          name: typeof e.name === "string" ? e.name : "Error",
          message: typeof e.message === "string" ? e.message : JSON.stringify(e),
          ...(typeof e.code === "string" ? { code: e.code } : {}),
        };
        await this.fenced(id, fencingToken, what, () => this.journal.updateRun(token, id, { status: "failed", error }));
      }
      return;
    }
  }

  /** {@inheritDoc ColdStore.errors} */
  async errors(workflowId: string): Promise<StepErrorRecord[]> {
    const out: StepErrorRecord[] = [];
    for (const step of await this.journal.readSteps(workflowId, { namePrefix: ERROR_STEP })) {
      const rest = step.name.slice(ERROR_STEP.length);
      const colon = rest.indexOf(":");
      out.push({
        workflowId,
        stepIndex: Number(rest.slice(0, colon)),
        nodeName: rest.slice(colon + 1),
        error: (step.output ?? {}) as JsonObject,
        createdAt: step.startedAt,
      });
    }
    return out;
  }

  // ---- side effects ----

  /** The newest effect record of `key` (in the run its key names). */
  private async findEffect(key: string, workflowId: string): Promise<EffectStep | undefined> {
    const { runId, part } = effectRunId(key, workflowId);
    const prefix = `${EFFECT_STEP}${part}:`;
    const hash = hashInput(key);
    const steps = await this.journal.readSteps(runId, { namePrefix: prefix });
    for (let i = steps.length - 1; i >= 0; i--) {
      const step = steps[i] as StepRecord;
      if (step.inputHash !== hash) continue;
      let stepIndex = Number(part.split(":")[0]);
      let owner = runId;
      if (part === key) {
        // A key of its own run: the workflow and step it was started for are the run's input.
        const input = ((await this.journal.getRun(runId))?.input ?? {}) as JsonObject;
        owner = typeof input.workflowId === "string" ? input.workflowId : "";
        stepIndex = typeof input.stepIndex === "number" ? input.stepIndex : 0;
      }
      return {
        runId,
        workflowId: owner,
        seq: step.seq,
        stepName: step.name,
        name: step.name.slice(prefix.length),
        stepIndex: Number.isSafeInteger(stepIndex) ? stepIndex : 0,
        step,
      };
    }
    return undefined;
  }

  private toIdempotency(key: string, e: EffectStep): IdempotencyRecord {
    const done = e.step.status === "completed";
    return {
      key,
      workflowId: e.workflowId,
      stepIndex: e.stepIndex,
      name: e.name,
      status: done ? "finished" : "started",
      resultJson: done ? JSON.stringify(e.step.output ?? {}) : null,
      startedAt: e.step.startedAt,
      finishedAt: done ? (e.step.finishedAt ?? e.step.startedAt) : null,
    };
  }

  /** {@inheritDoc ColdStore.idempotencyBegin} */
  async idempotencyBegin(
    key: string,
    info: { workflowId: string; stepIndex: number; name: string; now: number; fencingToken?: number },
  ): Promise<IdempotencyRecord | undefined> {
    const { runId, part } = effectRunId(key, info.workflowId);
    const what = `start of side effect "${key}" refused`;
    const fenceId = info.fencingToken !== undefined && info.workflowId !== "" ? info.workflowId : runId;
    for (let attempt = 0; ; attempt++) {
      const run = await this.run(
        runId,
        part === key ? { workflowId: info.workflowId, stepIndex: info.stepIndex } : null,
      );
      // The lease checked is the workflow's (a fenced start of a key of another run writes there with its token).
      const fenceRun = fenceId === runId ? run : await this.run(fenceId);
      await this.tokenFor(fenceRun, info.fencingToken, what, true);
      const fenced = fenceId === runId ? info.fencingToken : undefined;
      const token = fenced ?? run.fencingToken;
      // The seq before the lookup (as a checkpoint's): a start another process commits after this read
      // takes the seq, so this one is refused and looks again (it then finds that start).
      const next = await this.nextSeq(runId);
      const found = await this.findEffect(key, info.workflowId);
      if (found && found.step.status !== "failed") return this.toIdempotency(key, found);
      // Absent, or abandoned (`failed`: it may be retried): a new start, at its old seq when the name is the same.
      const stepName = `${EFFECT_STEP}${part}:${info.name}`;
      const again = found?.stepName === stepName ? found : undefined;
      const record: StepRecord = {
        runId,
        seq: again ? again.seq : next,
        name: stepName,
        inputHash: hashInput(key),
        status: "started",
        attempt: again ? again.step.attempt + 1 : 1,
        startedAt: info.now,
        fencingToken: token,
      };
      try {
        // A first start is create-only: of two starters that read the same next seq, one writes it.
        const out = await this.fenced(runId, fenced, what, () =>
          this.journal.writeStep(token, record, again ? undefined : { create: true }),
        );
        if (out === RETRY) continue;
      } catch (e) {
        if (e instanceof JournalIntegrityError && attempt < 5) continue;
        throw e;
      }
      return undefined;
    }
  }

  /** The seq the run's next record goes to (the highest + 1). */
  private async nextSeq(runId: string): Promise<number> {
    return nextSeq(await this.journal.readSteps(runId, { last: 1, outputs: false }));
  }

  /** Rewrites an effect record (`completed` or `failed`) with the run's current token (or `fence`'s). */
  private async settle(key: string, patch: Partial<StepRecord>, fence?: WorkflowFence): Promise<void> {
    const e = await this.findEffect(key, "");
    if (!e || e.step.status === "completed") return;
    for (let attempt = 0; attempt < 3; attempt++) {
      const run = await this.journal.getRun(e.runId);
      if (!run) return;
      if (fence && (run.fencingToken !== fence.fencingToken || run.leaseOwner === undefined)) return;
      const token = run.fencingToken;
      try {
        await this.journal.writeStep(token, { ...e.step, ...patch, fencingToken: token });
        return;
      } catch (err) {
        if (!(err instanceof StaleFencingTokenError)) throw err;
        if (fence) return; // taken over meanwhile: the new holder reconciles it
      }
    }
  }

  /** {@inheritDoc ColdStore.idempotencyFinish} */
  async idempotencyFinish(key: string, resultJson: string, now: number): Promise<void> {
    const output = JSON.parse(resultJson) as JsonValue;
    await this.settle(key, { status: "completed", output, finishedAt: now });
  }

  /** {@inheritDoc ColdStore.idempotencyAbandon} (the record becomes `failed`: a later start runs it again) */
  async idempotencyAbandon(key: string, fence?: WorkflowFence): Promise<void> {
    await this.settle(
      key,
      { status: "failed", error: { name: "Error", message: "the side effect threw" }, finishedAt: Date.now() },
      fence,
    );
  }

  // ---- blobs ----

  /** {@inheritDoc ColdStore.readBlob} (the journal's blob of that sha256) */
  async readBlob(ref: string): Promise<Uint8Array | undefined> {
    const hex = journalRef(ref);
    return /^[0-9a-f]{64}$/.test(hex) ? this.journal.readBlob(hex) : undefined;
  }

  /**
   * {@inheritDoc ColdStore.writeBlob}
   *
   * A journal stores a blob only with a checkpoint that references it (`CheckpointStore.save` writes
   * them so): one outside a checkpoint is refused.
   * @throws {BlobError}
   */
  async writeBlob(ref: string, _bytes: Uint8Array): Promise<void> {
    throw new BlobError(ref, "a journal keeps a blob only with a checkpoint that references it");
  }

  // ---- leases ----

  /**
   * Readies a workflow's run for its lease (the graph runner's, before it takes the run's lease in
   * {@link journal}): creates the run when it is missing and `create` is true.
   *
   * @returns whether the run exists now (`false` only when it was missing and `create` is false:
   *   nothing was written)
   * @throws {RunCancelledError} when an operator cancelled the workflow (it takes no more steps)
   */
  async prepareRun(workflowId: string, create: boolean): Promise<boolean> {
    const current = create ? await this.run(workflowId) : await this.journal.getRun(workflowId);
    if (!current) return false;
    if (current.status === "cancelled") throw await this.cancelled(current);
    return true;
  }

  /**
   * {@inheritDoc ColdStore.acquireLease} (the run's lease; the run is created when missing)
   *
   * @deprecated the graph runner takes the run's lease in the journal (`journal.acquireLease`), as a
   *   durable run does; removed in 0.3
   */
  async acquireLease(workflowId: string, owner: string, ttlMs: number): Promise<WorkflowLeaseResult> {
    const current = await this.run(workflowId);
    if (current.status === "cancelled") throw await this.cancelled(current);
    // A lease belongs to one execution: a live one is refused to its own owner too (as a durable run's).
    const lease = await this.journal.acquireLease(workflowId, owner, ttlMs, { reentrant: false });
    if (lease.acquired) return { acquired: true, fencingToken: lease.fencingToken, expiresAt: lease.expiresAt };
    const run = await this.journal.getRun(workflowId);
    return { acquired: false, owner: lease.owner, expiresAt: lease.expiresAt, fencingToken: run?.fencingToken ?? 0 };
  }

  /** {@inheritDoc ColdStore.renewLease} @deprecated use the journal's `renewLease`; removed in 0.3 */
  async renewLease(workflowId: string, fencingToken: number, ttlMs: number): Promise<number> {
    const what = "lease renewal refused";
    const run = await this.journal.getRun(workflowId);
    if (!run || run.fencingToken !== fencingToken || run.leaseOwner === undefined) {
      throw await this.lost(workflowId, what, fencingToken);
    }
    try {
      return await this.journal.renewLease(workflowId, fencingToken, ttlMs);
    } catch (e) {
      if (e instanceof StaleFencingTokenError) throw await this.lost(workflowId, what, fencingToken);
      throw e;
    }
  }

  /** {@inheritDoc ColdStore.releaseLease} @deprecated use the journal's `releaseLease`; removed in 0.3 */
  async releaseLease(workflowId: string, fencingToken: number): Promise<void> {
    if (!(await this.journal.getRun(workflowId))) return;
    await this.journal.releaseLease(workflowId, fencingToken);
  }

  /** {@inheritDoc ColdStore.close} (closes the journal unless `closeJournal: false`) */
  async close(): Promise<void> {
    if (this.closeJournal) await this.journal.close();
  }
}

/** Prefix of the signal a workflow waiting on `interrupt()` waits for: `interrupt:<interrupt id>`. */
export const INTERRUPT_SIGNAL = "interrupt:";

/** The signal a stored state waiting on `interrupt()` waits for, if it does. */
export function interruptSignalOf(state: JsonValue | undefined): string | undefined {
  const pending = (state as JsonObject | null | undefined)?.pendingInterrupt as JsonObject | null | undefined;
  return pending && typeof pending.id === "string" ? `${INTERRUPT_SIGNAL}${pending.id}` : undefined;
}

/** A workflow blob reference (`sha256:<hex>`) as the journal names it (`<hex>`). */
export function journalRef(ref: string): string {
  return ref.startsWith("sha256:") ? ref.slice(7) : ref;
}

/** Marker of {@link JournalColdStore}'s internal retry. */
const RETRY: unique symbol = Symbol("retry");

/** The blob references (`{ "$dumplings_blob": ref }`) a stored state's `sharedMemory` holds. */
function refsOf(state: JsonValue | undefined): string[] {
  const mem = (state as JsonObject | null | undefined)?.sharedMemory;
  if (mem === null || typeof mem !== "object" || Array.isArray(mem)) return [];
  const out: string[] = [];
  for (const v of Object.values(mem)) {
    const ref = v !== null && typeof v === "object" && !Array.isArray(v) ? v.$dumplings_blob : undefined;
    if (typeof ref === "string") out.push(ref);
  }
  return out;
}

/**
 * Whether a checkpoint's state is a resume point on its own (a snapshot step, before which
 * `pruneRuns` may delete): not while a node run is in progress (`nodeRun`, a node waiting on an
 * interrupt), since that node runs again from its start on resume and replays the side-effect
 * records written before this checkpoint; pruning them would run those effects twice.
 */
export function resumesAlone(state: JsonValue): boolean {
  const nodeRun = (state as { nodeRun?: unknown } | null)?.nodeRun;
  return nodeRun === undefined || nodeRun === null;
}
