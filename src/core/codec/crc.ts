/** The CRC-32 arithmetic of `.duas` integrity lines: `header_crc32`, `history_crc32` and carrying a CRC over a length. */

import * as zlib from "node:zlib";

const nativeCrc32 = (zlib as { crc32?: (data: string | Uint8Array, value?: number) => number }).crc32;
let crcTable: Uint32Array | undefined;

/** CRC-32 (the zlib/gzip polynomial) of `data` continued from `value`: zlib's where Node has it (>= 20.15). @internal */
export function crc32(data: string | Uint8Array, value = 0): number {
  // Nothing to add: and Node 20's zlib.crc32 may return 0 for an empty buffer whose memory another
  // Buffer has viewed (seen with Buffer.from(b.buffer, …) of a zero-length b).
  if (data.length === 0) return value;
  if (nativeCrc32) return nativeCrc32(data, value);
  if (!crcTable) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
  let c = ~value >>> 0;
  for (let i = 0; i < bytes.length; i++) c = (crcTable[(c ^ (bytes[i] as number)) & 0xff] as number) ^ (c >>> 8);
  return ~c >>> 0;
}

/** `vec` multiplied by the GF(2) matrix `mat` (32 columns). */
function gf2Times(mat: Uint32Array, vec: number): number {
  let sum = 0;
  let v = vec >>> 0;
  for (let i = 0; v !== 0; i++, v >>>= 1) if (v & 1) sum ^= mat[i] as number;
  return sum >>> 0;
}

/** The product `a · b` of two GF(2) 32×32 matrices (apply `b`, then `a`). */
function gf2Product(a: Uint32Array, b: Uint32Array): Uint32Array {
  const out = new Uint32Array(32);
  for (let n = 0; n < 32; n++) out[n] = gf2Times(a, b[n] as number);
  return out;
}

/**
 * The linear operator that carries a CRC-32 over `length` more bytes:
 * `crc32(A ‖ B) = crc32Apply(crc32Shift(B.length), crc32(A)) ^ crc32(B)`
 * (zlib's `crc32_combine`, as a matrix built once per length). @internal
 */
export function crc32Shift(length: number): Uint32Array {
  // the operator for one zero bit, then squared: 2, 4, 8 bits = one byte, then per bit of `length`
  let op: Uint32Array = new Uint32Array(32);
  op[0] = 0xedb88320;
  for (let n = 1; n < 32; n++) op[n] = (1 << (n - 1)) >>> 0;
  for (let i = 0; i < 3; i++) op = gf2Product(op, op);
  let result: Uint32Array | undefined;
  for (let len = length; len > 0; len = Math.floor(len / 2)) {
    if (len % 2 === 1) result = result === undefined ? op : gf2Product(op, result);
    if (len > 1) op = gf2Product(op, op);
  }
  if (result === undefined) {
    result = new Uint32Array(32);
    for (let n = 0; n < 32; n++) result[n] = (1 << n) >>> 0;
  }
  return result;
}

/** Applies a {@link crc32Shift} operator to a CRC-32. @internal */
export function crc32Apply(shift: Uint32Array, crc: number): number {
  return gf2Times(shift, crc);
}

export function crcOf(parts: readonly string[]): number {
  let c = 0;
  for (const p of parts) c = crc32(p, c);
  return c;
}

/** 8 lowercase hex digits. @internal */
export function crcHex(value: number): string {
  return value.toString(16).padStart(8, "0");
}

/** The running value of `[META] history_crc32` for an empty history. @internal */
export const HISTORY_CRC_START = 0;

/**
 * Continues the history checksum with one `[HISTORY]` line (given without its
 * `\n`, and without a `\r` before it; the `\n` is counted): `history_crc32`
 * is the CRC-32 of every message line with its `\n`, in order, so an append
 * extends it from the stored value without reading the history again. @internal
 *
 * @param previous - the running value so far ({@link HISTORY_CRC_START} for none)
 * @param text - one history line (a string, or its UTF-8 bytes: the same value)
 * @returns the new running value
 */
export function historyCrc(previous: number, text: string | Uint8Array): number {
  return crc32("\n", crc32(text, previous));
}

/**
 * {@link historyCrc} over history lines as written by `encodeHistoryLines`
 * (each ends with `\n`). @internal
 */
export function historyCrcOfLines(previous: number, text: string): number {
  return crc32(text, previous);
}
