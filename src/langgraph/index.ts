/**
 * `dumplings-ai/langgraph`: a LangGraph.js checkpointer ({@link DumplingsSaver})
 * on this library's stores (SQLite, PostgreSQL, Redis, memory). It stores each
 * channel value once per version and an append-only channel (the `messages`
 * of `MessagesAnnotation`) as the items appended since the parent checkpoint,
 * so a thread's storage grows with its messages, not with messages ×
 * checkpoints. `@langchain/langgraph-checkpoint` is a peer dependency.
 *
 * @example
 * import { DumplingsSaver } from "dumplings-ai/langgraph";
 * const checkpointer = new DumplingsSaver({ store: { sqlite: { path: "./graph.db" } } });
 *
 * @module
 */
export type { DeltaPolicy } from "./channels.js";
export type { DumplingsSaverOptions, SaverStoreOption } from "./options.js";
export { DumplingsSaver } from "./saver.js";
export type {
  BlobKind,
  BlobRow,
  CheckpointQuery,
  CheckpointRow,
  SaverStorage,
  WriteRow,
} from "./storage.js";
export { MemorySaverStorage } from "./storage-memory.js";
export { openPostgresSaverStorage, type PostgresSaverStoreOptions } from "./storage-postgres.js";
export {
  DEFAULT_LANGGRAPH_REDIS_PREFIX,
  RedisSaverStorage,
  type RedisSaverStoreOptions,
} from "./storage-redis.js";
export { langgraphMigrations, SqlSaverStorage } from "./storage-sql.js";
export {
  DEFAULT_LANGGRAPH_SQLITE_PATH,
  openSqliteSaverStorage,
  type SqliteSaverStoreOptions,
} from "./storage-sqlite.js";
