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
 * The default store is a directory ({@link FsBlobStore}); any storage with
 * put/get by key (S3, GCS, R2, MinIO) fits the two-method interface.
 *
 * @module
 */
import { createHash, randomBytes } from "node:crypto";
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from "node:fs";
import path from "node:path";
import { assertJson, isJsonObject, type JsonObject, type JsonValue } from "../core/json.js";
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
 * const s3Blobs: BlobStore = {
 *   async put(bytes) { const ref = blobRef(bytes); await s3.putObject({ Bucket, Key: ref.slice(7), Body: bytes }); return ref; },
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
 * verified against its hash on read.
 *
 * @example
 * const blobs = new FsBlobStore("./.dumplingsAI_workflows/blobs");
 */
export class FsBlobStore implements BlobStore {
  /** @param dir - directory to keep blobs in (created on first write) */
  constructor(readonly dir: string) {}

  private file(ref: string): string {
    const hex = hexOf(ref);
    return path.join(this.dir, hex.slice(0, 2), hex);
  }

  /** {@inheritDoc BlobStore.put} */
  async put(bytes: Uint8Array): Promise<string> {
    const ref = blobRef(bytes);
    const file = this.file(ref);
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

/** True when a stored value is a blob reference object. */
export function isBlobReference(value: unknown): value is { [BLOB_REF_FIELD]: string; bytes: number } {
  return isJsonObject(value) && typeof value[BLOB_REF_FIELD] === "string" && Object.keys(value).length === 2;
}

/**
 * Replaces large top-level values of `sharedMemory` by blob references.
 *
 * @param sharedMemory - the application's shared memory (JSON)
 * @param blobs - where to put large values
 * @param threshold - size in bytes (UTF-8 JSON) above which a value is moved out
 * @returns the memory to store, its JSON text (`JSON.stringify(stored)`, built from the texts each
 *   value was measured with: the memory is serialised once), and the list of references it holds
 */
export async function externalizeBlobs(
  sharedMemory: JsonObject,
  blobs: BlobStore,
  threshold: number,
): Promise<{ stored: JsonObject; json: string; refs: string[] }> {
  const stored: JsonObject = {};
  const refs: string[] = [];
  const parts: string[] = [];
  for (const [key, value] of Object.entries(sharedMemory)) {
    if (value === undefined) continue;
    let json = JSON.stringify(value);
    // the byte length only matters above the threshold: a string of n UTF-16 units holds at most 3n bytes
    const size = json.length * 3 > threshold ? Buffer.byteLength(json) : json.length;
    if (size > threshold) {
      const ref = await blobs.put(Buffer.from(json, "utf8"));
      const reference = { [BLOB_REF_FIELD]: ref, bytes: size };
      stored[key] = reference;
      json = JSON.stringify(reference);
      refs.push(ref);
    } else {
      stored[key] = value;
    }
    parts.push(`${JSON.stringify(key)}:${json}`);
  }
  return { stored, json: `{${parts.join(",")}}`, refs };
}

/**
 * Loads the values behind blob references of a stored `sharedMemory`.
 *
 * @param stored - memory as stored (may hold references)
 * @param blobs - the blob store
 * @returns the application's memory with every reference replaced by its value
 * @throws {BlobError} when a blob is missing or corrupted
 */
export async function internalizeBlobs(stored: JsonObject, blobs: BlobStore | undefined): Promise<JsonObject> {
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(stored)) {
    if (isBlobReference(value)) {
      const ref = value[BLOB_REF_FIELD];
      if (!blobs) throw new BlobError(ref, "the snapshot references a blob but the store has no blob store configured");
      const text = Buffer.from(await blobs.get(ref)).toString("utf8");
      const parsed = JSON.parse(text) as JsonValue;
      assertJson(parsed, `sharedMemory.${key}`);
      out[key] = parsed;
    } else {
      out[key] = value;
    }
  }
  return out;
}
