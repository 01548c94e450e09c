/**
 * Channel values by version, and the delta encoding of append-only channels.
 *
 * A channel whose new value is an array that starts with the value of the
 * parent checkpoint's version (the `messages` of `MessagesAnnotation`, any
 * reducer that only appends) is stored as the items appended since that
 * version plus a reference to it (`delta`); any other value is stored whole
 * (`full`). A value is rebuilt by following the references back to a `full`
 * row: all rows of one chain share an `anchor` (the full row's version), so
 * the store returns them in one read.
 *
 * A chain is cut (the next value stored whole) when the items appended since
 * its full row pass twice the full row's length (and `minFullItems`), or when
 * it has more links than both `maxDeltaChain` and its full row's length. Both
 * rules keep the full copies of a growing array to a geometric series (ratio
 * 2 at least: their total is under twice the final length), so a thread's
 * storage is O(its items), not O(items × checkpoints); a read's delta rows
 * hold at most two thirds of the value, and a read returns at most
 * max(`maxDeltaChain`, the full row's length) + 1 rows: never more rows than
 * the value has items, once the value is longer than `maxDeltaChain`. (A
 * fixed link limit alone made a full copy every `maxDeltaChain` steps of a
 * long thread, whose total grows with N² / `maxDeltaChain`.)
 *
 * @module
 */
import type { SerializerProtocol } from "@langchain/langgraph-checkpoint";
import { FormatError } from "../core/errors.js";
import type { BlobRow } from "./storage.js";

/** A channel's value at one version, with what the next delta needs to know about its chain. */
export interface ChannelValue {
  version: string;
  /** The value, or {@link MISSING} when the channel has none at this version. */
  value: unknown;
  kind: BlobRow["kind"];
  anchor: string;
  depth: number;
  /** Length of the anchor's (full) array. */
  anchorItems: number;
}

/** Marks a channel without a value at a version (LangGraph's `empty`). */
export const MISSING: unique symbol = Symbol("dumplings.langgraph.missing");

/** When a chain is cut: see the module comment. */
export interface DeltaPolicy {
  /**
   * A chain of `delta` rows may always reach this many links; a longer one only while it is
   * no longer than its full row's item count. @default 1000
   */
  maxDeltaChain: number;
  /** A chain is never cut for length before this many appended items. @default 32 */
  minFullItems: number;
}

const EMPTY = new Uint8Array(0);

function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** True when `prev` is a prefix of `next`, item by item (same object, or the same serialised bytes). */
async function isPrefix(
  serde: SerializerProtocol,
  prev: readonly unknown[],
  next: readonly unknown[],
): Promise<boolean> {
  if (next.length < prev.length) return false;
  for (let i = 0; i < prev.length; i++) {
    if (prev[i] === next[i]) continue;
    const [ta, a] = await serde.dumpsTyped(prev[i]);
    const [tb, b] = await serde.dumpsTyped(next[i]);
    if (ta !== tb || !bytesEqual(a, b)) return false;
  }
  return true;
}

/**
 * The row storing `value` as `channel`'s `version`, as a delta of `prev`
 * (the channel's value at the parent checkpoint) when it only appends to it.
 *
 * @returns the row and what the next version's encoding needs
 */
export async function encodeChannel(
  serde: SerializerProtocol,
  channel: string,
  version: string,
  value: unknown,
  prev: ChannelValue | undefined,
  policy: DeltaPolicy,
): Promise<{ row: BlobRow; entry: ChannelValue }> {
  if (value === MISSING) {
    const row: BlobRow = {
      channel,
      version,
      kind: "empty",
      anchor: version,
      base: null,
      depth: 0,
      items: 0,
      type: "empty",
      data: EMPTY,
    };
    return { row, entry: { version, value, kind: "empty", anchor: version, depth: 0, anchorItems: 0 } };
  }
  if (Array.isArray(value) && prev !== undefined && prev.kind !== "empty" && Array.isArray(prev.value)) {
    const since = value.length - prev.anchorItems;
    const cut =
      prev.depth + 1 > Math.max(policy.maxDeltaChain, prev.anchorItems) ||
      since > Math.max(2 * prev.anchorItems, policy.minFullItems);
    if (!cut && (await isPrefix(serde, prev.value, value))) {
      const [type, data] = await serde.dumpsTyped(value.slice(prev.value.length));
      const row: BlobRow = {
        channel,
        version,
        kind: "delta",
        anchor: prev.anchor,
        base: prev.version,
        depth: prev.depth + 1,
        items: value.length,
        type,
        data,
      };
      const entry: ChannelValue = {
        version,
        value,
        kind: "delta",
        anchor: prev.anchor,
        depth: row.depth,
        anchorItems: prev.anchorItems,
      };
      return { row, entry };
    }
  }
  const [type, data] = await serde.dumpsTyped(value);
  const items = Array.isArray(value) ? value.length : 0;
  const row: BlobRow = { channel, version, kind: "full", anchor: version, base: null, depth: 0, items, type, data };
  return { row, entry: { version, value, kind: "full", anchor: version, depth: 0, anchorItems: items } };
}

/**
 * Rebuilds `channel`'s value at `version` from the rows the store returned
 * (those of its chain, and possibly others).
 *
 * @returns the value, or `undefined` when no row of that version was stored
 * @throws {FormatError} when a chain is broken (a base row is missing or not an array)
 */
export async function decodeChannel(
  serde: SerializerProtocol,
  rows: ReadonlyMap<string, BlobRow>,
  channel: string,
  version: string,
): Promise<ChannelValue | undefined> {
  const top = rows.get(`${channel}\0${version}`);
  if (top === undefined) return undefined;
  if (top.kind === "empty") {
    return { version, value: MISSING, kind: "empty", anchor: top.anchor, depth: 0, anchorItems: 0 };
  }
  const chain: BlobRow[] = [];
  let row: BlobRow | undefined = top;
  while (row !== undefined && row.kind === "delta") {
    chain.push(row);
    if (chain.length > 100_000) break;
    row = row.base === null ? undefined : rows.get(`${channel}\0${row.base}`);
  }
  if (row === undefined || row.kind !== "full") {
    throw new FormatError(
      `langgraph: channel "${channel}" version ${version}: its delta chain is broken (base ${JSON.stringify(chain.at(-1)?.base)} is missing)`,
    );
  }
  const base = await serde.loadsTyped(row.type, row.data);
  if (chain.length === 0) {
    return { version, value: base, kind: "full", anchor: row.version, depth: 0, anchorItems: row.items };
  }
  if (!Array.isArray(base)) {
    throw new FormatError(`langgraph: channel "${channel}" version ${row.version} is not an array but has deltas`);
  }
  const value: unknown[] = [...base];
  for (let i = chain.length - 1; i >= 0; i--) {
    const link = chain[i] as BlobRow;
    const items = await serde.loadsTyped(link.type, link.data);
    if (!Array.isArray(items)) {
      throw new FormatError(`langgraph: channel "${channel}" version ${link.version}: a delta row is not an array`);
    }
    for (const item of items) value.push(item);
  }
  return { version, value, kind: "delta", anchor: row.version, depth: top.depth, anchorItems: row.items };
}
