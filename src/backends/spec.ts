/**
 * A session backend from a SPEC string, the syntax the CLI's `--backend`
 * takes (see `drivers/spec.ts`): `file:DIR`, `sqlite:PATH`, `postgres://…`
 * (`?schema=`), `redis://…` (`?prefix=`), `memory:`. For library options that
 * accept a store as a string, e.g. `createChatStore({ store: "sqlite:chats.db" })`.
 *
 * @module
 */
import path from "node:path";
import { parseSpec, SESSION_KINDS } from "../drivers/spec.js";
import { FileBackend } from "./file/index.js";
import { MemoryBackend } from "./memory.js";
import { PostgresBackend } from "./postgres.js";
import { RedisBackend } from "./redis.js";
import { SQLiteBackend } from "./sqlite.js";
import type { StateBackend } from "./types.js";

/**
 * Opens a new session backend named by a SPEC. Server drivers (`pg`,
 * `ioredis`) load on first use, as with the constructors; nothing is created
 * before the first write or read.
 *
 * @param spec - `file:DIR`, `sqlite:PATH`, `postgres://URL` or `postgres:postgres://URL` (`?schema=NAME`),
 *   `redis://URL` or `redis:redis://URL` (`?prefix=P`), `memory:`
 * @param option - the option's name for error messages @default "store"
 * @returns a new backend; close it with its `close()` when done
 * @throws {InvalidOptionError} (component `spec`) for an unknown form, a missing path/URL or a bad URL
 *   (never showing a URL's password)
 * @example
 * const backend = backendFromSpec("sqlite:./chats.db");
 * const other = backendFromSpec("postgres://postgres@127.0.0.1:5432/app?schema=chats");
 */
export function backendFromSpec(spec: string, option = "store"): StateBackend {
  const parsed = parseSpec(spec, { kinds: SESSION_KINDS, option });
  switch (parsed.kind) {
    case "file":
      return new FileBackend({ baseDir: path.resolve(parsed.path) });
    case "sqlite":
      return new SQLiteBackend({ dbPath: path.resolve(parsed.path) });
    case "postgres":
      return new PostgresBackend({ url: parsed.url, ...(parsed.param ? { schema: parsed.param } : {}) });
    case "redis":
      return new RedisBackend({ url: parsed.url, ...(parsed.param ? { keyPrefix: parsed.param } : {}) });
    default:
      return new MemoryBackend();
  }
}
