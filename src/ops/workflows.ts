/**
 * Which workflow checkpoint store an operator tool (`dumplings workflows`, the
 * web inspector it starts) reads: a SPEC of `spec.ts` (`sqlite:PATH`, or
 * `postgres://…` / `postgres:postgres://…`), else `DUMPLINGS_WORKFLOW_STORE`,
 * else `sqlite:./.dumplingsAI_workflows/workflows.db`; with the Redis hot tier
 * of `--redis` (or `REDIS_URL`).
 *
 * @module
 */
import { DEFAULT_FILES } from "../core/defaults.js";
import { RedisHotTier } from "../durable/checkpoints/hot-redis.js";
import { PostgresColdStore } from "../durable/checkpoints/postgres.js";
import { SqliteColdStore } from "../durable/checkpoints/sqlite.js";
import { CheckpointStore } from "../workflow/store.js";
import { missingStore, UsageError } from "./errors.js";
import { oneOf, parseSpec } from "./spec.js";

/** Default store spec of the workflow commands. */
export const DEFAULT_WORKFLOW_STORE = `sqlite:${DEFAULT_FILES.workflowsDb}`;

/** Options common to the workflow commands. */
export interface WorkflowCliOptions {
  /** `sqlite:PATH` or `postgres://…`. @default env DUMPLINGS_WORKFLOW_STORE, else {@link DEFAULT_WORKFLOW_STORE} */
  store?: string;
  /** PostgreSQL schema. @default "dumplings" */
  schema?: string;
  /** Redis URL of the hot tier. @default env REDIS_URL (none when unset) */
  redis?: string;
  /**
   * Directory of a store whose blobs were written with `blobDir` (the library's option).
   * @default none: blobs are in the store's database (blobs of dumplings-ai 0.1 are read from
   *   ./.dumplingsAI_workflows/blobs and the "blobs" directory beside the SQLite file)
   */
  blobs?: string;
  json?: boolean;
}

/** The store kinds a checkpoint archive can be in. */
export const STORE_KINDS = ["sqlite", "postgres"] as const;

/**
 * Opens the checkpoint store a spec names (the SPEC syntax of every command, see `spec.ts`):
 * `sqlite:PATH`, or `postgres://…` / `postgres:postgres://…` (`?schema=`).
 *
 * @param options - `store` spec, `schema`, `redis`, `blobs`
 * @param open - `mustExist`: the archive must already exist (an SQLite file or a PostgreSQL
 *   schema with the workflow tables); nothing is created. What every `dumplings workflows` command uses.
 * @returns an open store (close it when done)
 * @throws {UsageError} for an unknown spec
 * @throws {InputNotFoundError} with `mustExist`, when the archive does not exist
 * @example
 * const store = await openWorkflowStore({ store: "sqlite:/tmp/wf.db" });
 */
export async function openWorkflowStore(
  options: WorkflowCliOptions = {},
  open: { mustExist?: boolean } = {},
): Promise<CheckpointStore> {
  const env = process.env.DUMPLINGS_WORKFLOW_STORE === "" ? undefined : process.env.DUMPLINGS_WORKFLOW_STORE;
  const text = storeSpecText(options);
  const spec = parseSpec(text, {
    kinds: STORE_KINDS,
    option: options.store === undefined && env !== undefined ? "DUMPLINGS_WORKFLOW_STORE" : "--store",
  });
  const create = open.mustExist === true ? { create: false } : {};
  let cold: SqliteColdStore | PostgresColdStore;
  let label: string;
  if (spec.kind === "sqlite") {
    label = spec.text;
    try {
      cold = new SqliteColdStore({ path: spec.path, ...create });
    } catch (error) {
      throw missingStore(error, label);
    }
  } else if (spec.kind === "postgres") {
    label = spec.label;
    const schema = oneOf(spec.param, options.schema, "schema");
    cold = new PostgresColdStore({ url: spec.url, ...(schema ? { schema } : {}), ...create });
  } else {
    throw new UsageError(`unknown workflow store ${JSON.stringify(spec.text)}`);
  }
  const redisText = options.redis ?? (process.env.REDIS_URL || undefined);
  // the hot tier's URL in the same SPEC forms (redis://… or redis:redis://…, ?prefix=)
  const redis =
    redisText === undefined
      ? undefined
      : parseSpec(redisText, { kinds: ["redis"], option: options.redis === undefined ? "REDIS_URL" : "--redis" });
  try {
    return await CheckpointStore.open({
      cold,
      hot:
        redis?.kind === "redis"
          ? new RedisHotTier({ url: redis.url, ...(redis.param ? { keyPrefix: redis.param } : {}) })
          : undefined,
      // The library's defaults otherwise (blobs in the store's database), so both read what either wrote.
      ...(options.blobs === undefined ? {} : { blobDir: options.blobs }),
    });
  } catch (error) {
    await cold.close().catch(() => undefined);
    throw missingStore(error, label);
  }
}

/**
 * The store SPEC the options name: `--store`, else `DUMPLINGS_WORKFLOW_STORE`, else the default.
 *
 * @param options - the `store` option
 * @returns the SPEC text
 */
export function storeSpecText(options: WorkflowCliOptions): string {
  const env = process.env.DUMPLINGS_WORKFLOW_STORE === "" ? undefined : process.env.DUMPLINGS_WORKFLOW_STORE;
  return options.store ?? env ?? DEFAULT_WORKFLOW_STORE;
}
