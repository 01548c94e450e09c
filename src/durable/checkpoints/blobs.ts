/**
 * Large values of a workflow's `sharedMemory`, stored outside the snapshot in
 * a content-addressed blob store.
 *
 * A top-level `sharedMemory` value whose JSON encoding is larger than a
 * threshold (default 256 KB) is written once to a {@link BlobStore} under its
 * SHA-256 and replaced in the stored snapshot by a small reference object
 * `{ "$dumplings_blob": "sha256:<hex>", "bytes": n }`. Loading replaces the
 * reference by the value again, so the application never sees it. Identical
 * values in successive steps share one blob (content addressing), so a
 * checkpoint after every node does not copy a large document every time.
 *
 * By default the blobs live with the checkpoints, in the cold store's own
 * database ({@link ColdBlobStore} over `ColdStore.readBlob`: a table of the
 * same SQLite file or PostgreSQL schema), so any process that opens the store
 * reads them, from any directory or machine. A directory ({@link FsBlobStore})
 * or any storage with put/get by key (S3, GCS, R2, MinIO) fits the
 * {@link BlobStore} interface instead.
 *
 * @module
 */
import { createHash, randomBytes } from "node:crypto";
import {
  closeSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import path from "node:path";
import { assertJson, isJsonObject, type JsonObject, type JsonValue, setOwn } from "../../core/json.js";
import type { ColdStore } from "./contract.js";
import { BlobError } from "./errors.js";

/** Property name that marks a blob reference inside a stored `sharedMemory`. */
export const BLOB_REF_FIELD = "$dumplings_blob";

/** Default size above which a `sharedMemory` value goes to the blob store: 256 KB (bytes of its JSON). */
export const DEFAULT_BLOB_THRESHOLD = 256 * 1024;

/**
 * Where large values live. `put` must be idempotent for equal bytes (content
 * addressing makes it so); `get` returns exactly the bytes given to `put`.
 *
 * @example
 * // S3-compatible storage (sketch): key = ref without the "sha256:" prefix
 * import { createHash } from "node:crypto";
 * const s3Blobs: BlobStore = {
 *   async put(bytes) {
 *     const ref = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
 *     await s3.putObject({ Bucket, Key: ref.slice(7), Body: bytes });
 *     return ref;
 *   },
 *   async get(ref) { return new Uint8Array(await (await s3.getObject({ Bucket, Key: ref.slice(7) })).Body.transformToByteArray()); },
 *   async delete(ref) { await s3.deleteObject({ Bucket, Key: ref.slice(7) }); },
 * };
 */
export interface BlobStore {
  /** Stores bytes; returns their reference `sha256:<64 hex>`. */
  put(bytes: Uint8Array): Promise<string>;
  /** Returns the bytes of a reference. @throws {BlobError} when missing. */
  get(ref: string): Promise<Uint8Array>;
  /** Optional: removes a blob no snapshot references any more (used by delete/prune). */
  delete?(ref: string): Promise<void>;
}

/**
 * The content reference of some bytes.
 *
 * @param bytes - the blob content
 * @returns `sha256:<64 lowercase hex>`
 */
export function blobRef(bytes: Uint8Array): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

function hexOf(ref: string): string {
  const m = /^sha256:([0-9a-f]{64})$/.exec(ref);
  if (!m) throw new BlobError(ref, "not a blob reference (expected sha256:<64 hex digits>)");
  return m[1]!;
}

/**
 * Blob store in a local directory: `dir/ab/<64 hex>`, written to a temporary
 * file, fsync'ed and renamed into place (a crash leaves no partial blob), and
 * verified against its hash on read. A blob already in place is not written
 * again. Only processes that see the same directory read its blobs: keep it on
 * storage every worker mounts, or leave the blobs in the cold store (the
 * default of `CheckpointStore`).
 *
 * @example
 * const blobs = new FsBlobStore("/var/lib/myapp/workflow-blobs");
 */
export class FsBlobStore implements BlobStore {
  /** The directory, absolute (a relative one is resolved once, against the working directory at construction). */
  readonly dir: string;

  /** @param dir - directory to keep blobs in (created on first write) */
  constructor(dir: string) {
    this.dir = path.resolve(dir);
  }

  private file(ref: string): string {
    const hex = hexOf(ref);
    return path.join(this.dir, hex.slice(0, 2), hex);
  }

  /** {@inheritDoc BlobStore.put} */
  async put(bytes: Uint8Array): Promise<string> {
    const ref = blobRef(bytes);
    const file = this.file(ref);
    // Content-addressed: a file of that name holding these bytes is not written again (one that does not
    // match, damaged since, is replaced).
    if (statSync(file, { throwIfNoEntry: false })?.size === bytes.byteLength && sameBytes(file, ref)) return ref;
    mkdirSync(path.dirname(file), { recursive: true });
    const tmp = `${file}.${randomBytes(6).toString("hex")}.tmp`;
    const fd = openSync(tmp, "w");
    try {
      writeSync(fd, bytes);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, file);
    return ref;
  }

  /** {@inheritDoc BlobStore.get} */
  async get(ref: string): Promise<Uint8Array> {
    let bytes: Buffer;
    try {
      bytes = readFileSync(this.file(ref));
    } catch (e) {
      throw new BlobError(ref, `cannot read from ${this.dir}`, { cause: e });
    }
    if (blobRef(bytes) !== ref) throw new BlobError(ref, "content does not match its hash (corrupted file)");
    return new Uint8Array(bytes);
  }

  /** {@inheritDoc BlobStore.delete} */
  async delete(ref: string): Promise<void> {
    try {
      unlinkSync(this.file(ref));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw new BlobError(ref, "cannot delete", { cause: e });
    }
  }
}

/** Whether a file holds the bytes of `ref` (false when it cannot be read). */
function sameBytes(file: string, ref: string): boolean {
  try {
    return blobRef(readFileSync(file)) === ref;
  } catch {
    return false;
  }
}

/** True when a stored value is a blob reference object. */
export function isBlobReference(value: unknown): value is { [BLOB_REF_FIELD]: string; bytes: number } {
  return isJsonObject(value) && typeof value[BLOB_REF_FIELD] === "string" && Object.keys(value).length === 2;
}

/**
 * JSON text kept as pieces with their UTF-8 sizes, encoded into one buffer at the end.
 *
 * No string of the whole text is built: a string of about 64 K characters or more that holds a
 * character above U+00FF is two bytes per character and goes to V8's large-object space, so each
 * such string made (a join, a concatenation flattened, the text encoded for a driver) costs a fresh
 * mapping of its pages — about 0.7 ms per 100 KB on the bench machine, more than writing it to SQLite.
 * Here each piece is small, its size is measured once, and the bytes are written once.
 */
export class JsonChunks {
  /** The pieces, in order. */
  readonly parts: string[] = [];
  /** UTF-8 bytes of the pieces so far. */
  bytes = 0;

  /** Appends JSON text (or a part of it: a key, a bracket). */
  push(text: string): void {
    this.parts.push(text);
    this.bytes += Buffer.byteLength(text);
  }

  /**
   * Appends `JSON.stringify(value)` of a JSON value: a small value whole, a large array or object
   * element by element (an array of objects without serialising it whole first), down to
   * {@link SPLIT_DEPTH} levels.
   */
  value(value: JsonValue | undefined, depth = 0): void {
    const array = Array.isArray(value);
    // A list of objects (messages, records) is split at once: its text is rarely small.
    const list = array && value.length > 1 && typeof value[0] === "object" && value[0] !== null;
    const text = list ? undefined : JSON.stringify(value);
    if (
      !list &&
      (text === undefined ||
        text.length <= SPLIT_CHARS ||
        depth >= SPLIT_DEPTH ||
        typeof value !== "object" ||
        value === null)
    ) {
      // (undefined only as an array element: JSON.stringify writes null there)
      this.push(text ?? "null");
      return;
    }
    if (array) {
      this.push("[");
      for (let i = 0; i < value.length; i++) {
        if (i > 0) this.push(",");
        this.value(value[i], depth + 1);
      }
      this.push("]");
      return;
    }
    const object = value as JsonObject;
    let sep = "{";
    for (const key of Object.keys(object)) {
      const v = object[key];
      if (v === undefined) continue; // left out, as JSON.stringify does
      this.push(`${sep}${JSON.stringify(key)}:`);
      this.value(v, depth + 1);
      sep = ",";
    }
    this.push(sep === "{" ? "{}" : "}");
  }

  /** The UTF-8 bytes of the pieces from index `from` on. */
  encode(from = 0): Buffer {
    let size = 0;
    for (let i = from; i < this.parts.length; i++) size += Buffer.byteLength(this.parts[i]!);
    const out = Buffer.allocUnsafe(size);
    let at = 0;
    for (let i = from; i < this.parts.length; i++) at += out.write(this.parts[i]!, at);
    return out;
  }

  /** Removes the pieces from index `from` on. */
  truncate(from: number): void {
    for (let i = from; i < this.parts.length; i++) this.bytes -= Buffer.byteLength(this.parts[i]!);
    this.parts.length = from;
  }
}

/** Characters above which a value is serialised piece by piece (well below V8's large-object size). */
const SPLIT_CHARS = 16_384;
/** Levels below a top-level value at which the splitting stops. */
const SPLIT_DEPTH = 4;

/**
 * Replaces large top-level values of `sharedMemory` by blob references, appending the JSON of the
 * memory to store (`JSON.stringify` of it, references in place of the large values) to `out`.
 *
 * @param sharedMemory - the application's shared memory (JSON)
 * @param blobs - where to put large values
 * @param threshold - size in bytes (UTF-8 JSON) above which a value is moved out
 * @param out - receives the stored memory's JSON text (each value serialised and measured once)
 * @returns the references the stored memory holds
 */
export async function externalizeBlobs(
  sharedMemory: JsonObject,
  blobs: Pick<BlobStore, "put">,
  threshold: number,
  out: JsonChunks,
): Promise<{ refs: string[] }> {
  const refs: string[] = [];
  let sep = "{";
  for (const key of Object.keys(sharedMemory)) {
    const value = sharedMemory[key];
    if (value === undefined) continue;
    out.push(`${sep}${JSON.stringify(key)}:`);
    sep = ",";
    const from = out.parts.length;
    const before = out.bytes;
    out.value(value);
    const size = out.bytes - before;
    if (size > threshold) {
      const ref = await blobs.put(out.encode(from));
      out.truncate(from);
      out.push(JSON.stringify({ [BLOB_REF_FIELD]: ref, bytes: size }));
      refs.push(ref);
    }
  }
  out.push(sep === "{" ? "{}" : "}");
  return { refs };
}

/**
 * Loads the values behind blob references of a stored `sharedMemory`.
 *
 * @param stored - memory as stored (may hold references)
 * @param blobs - the blob store
 * @param cache - texts of blobs read before (a history reads each blob once), filled as blobs are read
 * @returns the application's memory with every reference replaced by its value
 * @throws {BlobError} when a blob is missing or corrupted
 */
export async function internalizeBlobs(
  stored: JsonObject,
  blobs: BlobStore | undefined,
  cache?: Map<string, string>,
): Promise<JsonObject> {
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(stored)) {
    if (isBlobReference(value)) {
      const ref = value[BLOB_REF_FIELD];
      if (!blobs) throw new BlobError(ref, "the snapshot references a blob but the store has no blob store configured");
      let text = cache?.get(ref);
      if (text === undefined) {
        text = Buffer.from(await blobs.get(ref)).toString("utf8");
        cache?.set(ref, text);
      }
      const parsed = JSON.parse(text) as JsonValue;
      assertJson(parsed, `sharedMemory.${key}`);
      setOwn(out, key, parsed);
    } else {
      setOwn(out, key, value); // a key named "__proto__" is data
    }
  }
  return out;
}

/**
 * The directories blobs were written to by default before they moved into the cold store
 * (dumplings-ai 0.1): the library's `./.dumplingsAI_workflows/blobs` of the working directory,
 * and the CLI's `blobs` beside an SQLite file.
 *
 * @param location - the cold store's `location` (an SQLite file's absolute path names the directory beside it)
 * @returns absolute directories, without duplicates
 * @example
 * legacyBlobDirs("/srv/app/.dumplingsAI_workflows/workflows.db") // [<cwd>/.dumplingsAI_workflows/blobs, "/srv/app/.dumplingsAI_workflows/blobs"]
 */
export function legacyBlobDirs(location: string | undefined): string[] {
  const dirs = [path.resolve(".dumplingsAI_workflows", "blobs")];
  if (location !== undefined && path.isAbsolute(location)) dirs.push(path.join(path.dirname(location), "blobs"));
  return [...new Set(dirs)];
}

/**
 * The blobs of a cold store that keeps them in its own database (`ColdStore.readBlob`), the
 * default blob store of `CheckpointStore`. `CheckpointStore.save` hands the bytes to the cold
 * store's write (one transaction with the checkpoint); `put` stores a blob on its own.
 *
 * A blob the database does not hold is looked up, read-only, in `legacyDirs` (blobs written to
 * a directory by dumplings-ai 0.1), verified against its hash; the next checkpoint that
 * references it writes it into the database. Nothing is ever deleted from those directories
 * (another store may share them). A cold store without `readBlob` keeps no blobs: `put` throws
 * a {@link BlobError} naming the options to use, and reads look in `legacyDirs` only.
 */
export class ColdBlobStore implements BlobStore {
  /** Directories read when the database does not hold a blob (absolute). */
  readonly legacyDirs: readonly string[];
  private readonly legacy: FsBlobStore[];

  /**
   * @param cold - the cold store
   * @param legacyDirs - directories to read blobs of dumplings-ai 0.1 from (resolved once, here)
   */
  constructor(
    readonly cold: ColdStore,
    legacyDirs: readonly string[],
  ) {
    this.legacy = legacyDirs.map((dir) => new FsBlobStore(dir));
    this.legacyDirs = this.legacy.map((b) => b.dir);
  }

  /** Whether the cold store keeps the blobs (`CheckpointStore.save` then writes them with the checkpoint). */
  get inDatabase(): boolean {
    return typeof this.cold.readBlob === "function" && typeof this.cold.writeBlob === "function";
  }

  /**
   * {@inheritDoc BlobStore.put}
   * @throws {BlobError} when the cold store keeps no blobs
   */
  async put(bytes: Uint8Array): Promise<string> {
    const ref = blobRef(bytes);
    if (!this.inDatabase) throw this.noBlobs(ref);
    await this.cold.writeBlob!(ref, bytes);
    return ref;
  }

  /**
   * {@inheritDoc BlobStore.get}
   * @throws {BlobError} when neither the database nor a legacy directory holds it, or its bytes do not match
   */
  async get(ref: string): Promise<Uint8Array> {
    hexOf(ref);
    const bytes = await this.cold.readBlob?.(ref);
    if (bytes !== undefined) {
      if (blobRef(bytes) !== ref) {
        throw new BlobError(ref, `content in ${this.where()} does not match its hash (corrupted row)`);
      }
      return bytes;
    }
    for (const dir of this.legacy) {
      try {
        return await dir.get(ref);
      } catch (e) {
        // Missing here: the next directory. A file there whose bytes do not match is corruption, said as such.
        if ((e as { cause?: { code?: string } }).cause?.code !== "ENOENT") throw e;
      }
    }
    const dirs = this.legacyDirs.length > 0 ? ` nor in ${this.legacyDirs.join(", ")}` : "";
    throw new BlobError(ref, `not in ${this.where()}${dirs}`);
  }

  /** Deletes a blob unless a snapshot still references it (the cold store's; legacy directories are left alone). */
  async delete(ref: string): Promise<void> {
    await this.cold.deleteBlob?.(ref);
  }

  /** A put on a cold store that keeps no blobs. */
  noBlobs(ref: string): BlobError {
    return new BlobError(
      ref,
      `the ${this.cold.name} cold store keeps no blobs (it has no readBlob/writeBlob); pass blobs (a BlobStore) or blobDir to CheckpointStore.open`,
    );
  }

  private where(): string {
    if (!this.inDatabase) return `the ${this.cold.name} cold store (it keeps no blobs)`;
    // (The table depends on the store: a journal's is `durable_blobs`, by its table prefix.)
    return `the ${this.cold.name} cold store's database${this.cold.location ? ` (${this.cold.location})` : ""}`;
  }
}
