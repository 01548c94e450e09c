/**
 * The options of {@link DumplingsSaver} and the one place that turns its
 * `store` option into a {@link SaverStorage}.
 *
 * @module
 */
import { InvalidOptionError } from "../core/errors.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { parseSpec } from "../drivers/spec.js";
import type { DeltaPolicy } from "./channels.js";
import type { SaverStorage } from "./storage.js";
import { MemorySaverStorage } from "./storage-memory.js";
import { openPostgresSaverStorage, type PostgresSaverStoreOptions } from "./storage-postgres.js";
import { RedisSaverStorage, type RedisSaverStoreOptions } from "./storage-redis.js";
import { openSqliteSaverStorage, type SqliteSaverStoreOptions } from "./storage-sqlite.js";

/**
 * Where a {@link DumplingsSaver} stores its checkpoints: exactly one of
 * `memory`, `sqlite` (SQLite connection options: `path`, `database`, …),
 * `postgres` (PostgreSQL connection options: `url`, `pool`, `schema`, …),
 * `redis` (Redis connection options: `url`, `client`, `keyPrefix`, …), or a
 * {@link SaverStorage} instance; or a SPEC string as the CLI takes it:
 * `sqlite:PATH`, `postgres://URL?schema=S`, `redis://URL?prefix=P`, `memory:`.
 */
export type SaverStoreOption =
  | string
  | { memory: true }
  | { sqlite: SqliteSaverStoreOptions }
  | { postgres: PostgresSaverStoreOptions }
  | { redis: RedisSaverStoreOptions }
  | SaverStorage;

/** Options of {@link DumplingsSaver} (besides LangGraph's `serde`). */
export interface DumplingsSaverOptions {
  /**
   * The store: `{ memory: true }`, `{ sqlite: { path } }`, `{ postgres: { url, schema } }`,
   * `{ redis: { url, keyPrefix } }`, a {@link SaverStorage}, or a SPEC string (`"sqlite:./graph.db"`,
   * `"postgres://…?schema=graphs"`, `"redis://…?prefix=lg:"`, `"memory:"`).
   */
  store: SaverStoreOption;
  /** Longest chain of delta rows behind a value (a read returns at most this many rows per channel). @default 1000 */
  maxDeltaChain?: number;
  /** A chain is never cut for length before this many appended items. @default 32 */
  minFullItems?: number;
}

const KEYS = optionKeys<DumplingsSaverOptions & { serde: unknown }>({
  store: true,
  maxDeltaChain: true,
  minFullItems: true,
  serde: true,
});
const STORE_KINDS = ["memory", "sqlite", "postgres", "redis"] as const;

/** A SPEC string as the `{ kind: options }` form (`sqlite:PATH`, `postgres://…`, `redis://…`, `memory:`). */
function fromSpec(text: string): SaverStoreOption {
  const spec = parseSpec(text, { kinds: ["sqlite", "postgres", "redis", "memory"], option: "store" });
  switch (spec.kind) {
    case "sqlite":
      return { sqlite: { path: spec.path } };
    case "postgres":
      return { postgres: { url: spec.url, ...(spec.param ? { schema: spec.param } : {}) } };
    case "redis":
      return { redis: { url: spec.url, ...(spec.param ? { keyPrefix: spec.param } : {}) } };
    default:
      return { memory: true };
  }
}

function isStorage(store: object): store is SaverStorage {
  const s = store as Partial<SaverStorage>;
  return typeof s.putCheckpoint === "function" && typeof s.getCheckpoint === "function";
}

function positiveInteger(option: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1) {
    throw new InvalidOptionError("langgraph", option, `must be a positive integer, got ${String(value)}`);
  }
  return value;
}

/**
 * Opens the store named by `options.store` and reads the delta policy.
 *
 * @throws {InvalidOptionError} when `store` is missing, names no known store or several, or an option is bad
 * @throws {BackendError} when a SQLite file cannot be opened
 */
export function openSaverStorage(options: DumplingsSaverOptions): { storage: SaverStorage; policy: DeltaPolicy } {
  if (options === null || typeof options !== "object") {
    throw new InvalidOptionError("langgraph", "store", "DumplingsSaver takes an options object with a store");
  }
  checkOptions("langgraph", options, KEYS);
  const policy: DeltaPolicy = {
    maxDeltaChain: positiveInteger("maxDeltaChain", options.maxDeltaChain, 1000),
    minFullItems: positiveInteger("minFullItems", options.minFullItems, 32),
  };
  const store = (typeof options.store === "string" ? fromSpec(options.store) : options.store) as unknown;
  if (store === null || typeof store !== "object") {
    throw new InvalidOptionError(
      "langgraph",
      "store",
      `must be { memory: true }, { sqlite: {...} }, { postgres: {...} }, { redis: {...} } or a SaverStorage, got ${String(store)}`,
    );
  }
  if (isStorage(store)) return { storage: store, policy };
  const kinds = Object.keys(store);
  if (kinds.length !== 1 || !STORE_KINDS.includes(kinds[0] as (typeof STORE_KINDS)[number])) {
    throw new InvalidOptionError(
      "langgraph",
      "store",
      `must name exactly one of ${STORE_KINDS.join(", ")}, got ${kinds.length === 0 ? "none" : kinds.join(", ")}`,
    );
  }
  const s = store as Record<string, unknown>;
  if ("memory" in s) {
    if (s.memory !== true) throw new InvalidOptionError("langgraph", "store.memory", "must be true");
    return { storage: new MemorySaverStorage(), policy };
  }
  if ("sqlite" in s) return { storage: openSqliteSaverStorage(s.sqlite as SqliteSaverStoreOptions), policy };
  if ("redis" in s) return { storage: new RedisSaverStorage(s.redis as RedisSaverStoreOptions), policy };
  return { storage: openPostgresSaverStorage(s.postgres as PostgresSaverStoreOptions), policy };
}
