/** The file engine's header arithmetic: a header encoded and sealed again without touching an unchanged `[CONFIG]` (the memo). */

import { crc32, crc32Apply, crc32Shift, crcHex } from "../../core/codec/crc.js";
import {
  changingMetaLines,
  checkHeader,
  configSection,
  constantMetaLines,
  encodeHeader,
  type HeaderLayout,
  headerPrefix,
  issueError,
  line,
  parseMeta,
  parseRuntimeState,
  stateSection,
} from "../../core/codec/header.js";
import { assertJson } from "../../core/json.js";
import { type AgentConfig, AgentConfigSchema, type AgentState, type StateMeta } from "../../core/state.js";

export interface HeaderMemo {
  /** Shallow copy of the caller's `config` the body was encoded from (every value a primitive). */
  readonly config: Readonly<Record<string, unknown>>;
  /** The `[STATE]` section's text (a state is small: it is re-encoded and compared on every save). */
  readonly stateText: string;
  /** CRC-32 of the body's UTF-8 bytes. */
  readonly bodyCrc: number;
  /** The operator that carries a CRC-32 over the body's byte length (see {@link crc32Shift}). */
  readonly shift: Uint32Array;
  /** CRC-32 and UTF-8 byte length of the `[CONFIG]` section alone (the body's first part). */
  readonly configCrc: number;
  readonly configBytes: number;
}

/** The result of {@link encodeHeaderMemo}. @internal */
export interface EncodedHeader {
  /**
   * The whole header (as {@link encodeHeader} writes it), or, when `headOnly`,
   * only its first `headBytes` bytes: the prefix and `[META]` through the
   * `header_crc32` line (the body is byte for byte the one of the memo).
   */
  text: string;
  headOnly: boolean;
  /**
   * When only `[STATE]` changed (same config as the memo, a fixed-width layout): `text` is the head
   * (as with `headOnly`), the `[CONFIG]` bytes after it are the memo's, unchanged, and `tail` is the
   * rest of the header from byte `offset`: `[STATE]`, the padding and the `[HISTORY]` line.
   */
  tail?: { offset: number; text: string };
  /** UTF-8 byte length of the prefix and `[META]` through the `header_crc32` line. */
  headBytes: number;
  /** The memo for the next call (undefined when a config value is not a primitive). */
  memo: HeaderMemo | undefined;
}

function sameConfig(memo: Readonly<Record<string, unknown>>, config: object): boolean {
  const c = config as Record<string, unknown>;
  let n = 0;
  for (const k in c) {
    if (!Object.hasOwn(c, k)) continue;
    n++;
    if (!Object.hasOwn(memo, k) || memo[k] !== c[k]) return false;
  }
  return n === Object.keys(memo).length;
}

/**
 * {@link encodeHeader} with `checksum: true` for a writer that saves the same
 * session again and again: when `memo` (returned by the previous call for the
 * header now on disk) has the same config values (`===`, so an unchanged
 * 50 MB prompt costs nothing) and the same `[STATE]` text, the config is not
 * validated, encoded or checksummed again: only the head (prefix and
 * `[META]`) is returned, sealed with the body's cached CRC. The value of
 * `header_crc32` is the same as {@link encodeHeader}'s (CRC-32 is carried over
 * the body's length, zlib's `crc32_combine`): the format does not change.
 * @internal used by FileBackend
 *
 * @throws {InvalidStateError} / {NonJsonValueError} as {@link encodeHeader}
 * @throws {RangeError} when the whole header does not fit `layout.padTo`
 */
export function encodeHeaderMemo(
  state: AgentState,
  messageCount: number,
  layout: HeaderLayout,
  memo?: HeaderMemo,
): EncodedHeader {
  const reuse = memo !== undefined && sameConfig(memo.config, state.config);
  assertJson(state.meta, "meta");
  if (!reuse) assertJson(state.config, "config");
  assertJson(state.state, "state");
  const meta = parseMeta(state.meta, "state");
  let config: AgentConfig | undefined;
  if (!reuse) {
    const c = AgentConfigSchema.safeParse(state.config);
    if (!c.success) throw issueError(c.error, "config", "state");
    config = c.data;
  }
  const checked = parseRuntimeState(state.state, "state");
  // as encodeHeader: the caller's own (checked) fields object
  const stateText = stateSection({ ...checked, fields: state.state.fields });
  const start = headStart(meta);
  const canonicalHead = crc32(changingMetaLines(meta, messageCount, layout, false), start.crc);
  const head = start.text + changingMetaLines(meta, messageCount, layout, layout.fixedWidth === true);
  if (reuse && memo !== undefined && stateText === memo.stateText) {
    const text = head + line("header_crc32", crcHex((crc32Apply(memo.shift, canonicalHead) ^ memo.bodyCrc) >>> 0));
    return { text, headOnly: true, headBytes: Buffer.byteLength(text), memo };
  }
  const stateBytes = Buffer.byteLength(stateText);
  const stateCrc = crc32(stateText);
  if (reuse && memo !== undefined && layout.padTo !== undefined && layout.fixedWidth === true) {
    // Only [STATE] changed: the config's bytes and CRC are the memo's (a 50 MB prompt is not touched).
    const bodyCrc = (crc32Apply(crc32Shift(stateBytes), memo.configCrc) ^ stateCrc) >>> 0;
    const shift = crc32Shift(memo.configBytes + stateBytes);
    const sealed = head + line("header_crc32", crcHex((crc32Apply(shift, canonicalHead) ^ bodyCrc) >>> 0));
    const headBytes = Buffer.byteLength(sealed);
    const used = headBytes + memo.configBytes + stateBytes + "[HISTORY]\n".length;
    const pad = layout.padTo - used;
    if (pad < 2) throw new RangeError(`header needs ${used + 2} bytes, more than padTo=${layout.padTo}`);
    return {
      text: sealed,
      headOnly: false,
      tail: { offset: headBytes + memo.configBytes, text: `${stateText}#${" ".repeat(pad - 2)}\n[HISTORY]\n` },
      headBytes,
      memo: { ...memo, stateText, bodyCrc, shift },
    };
  }
  const configText = configSection(config ?? checkHeader(state).config);
  const body = configText + stateText;
  const configBytes = Buffer.byteLength(configText);
  const configCrc = crc32(configText);
  const bodyCrc = (crc32Apply(crc32Shift(stateBytes), configCrc) ^ stateCrc) >>> 0;
  const shift = crc32Shift(configBytes + stateBytes);
  const sealed = head + line("header_crc32", crcHex((crc32Apply(shift, canonicalHead) ^ bodyCrc) >>> 0));
  let out = sealed + body;
  if (layout.padTo !== undefined) {
    const used = Buffer.byteLength(out) + "[HISTORY]\n".length;
    const pad = layout.padTo - used;
    if (pad < 2) throw new RangeError(`header needs ${used + 2} bytes, more than padTo=${layout.padTo}`);
    out += `#${" ".repeat(pad - 2)}\n`;
  }
  const primitive = Object.values(state.config).every((v) => v === null || typeof v !== "object");
  return {
    text: `${out}[HISTORY]\n`,
    headOnly: false,
    headBytes: Buffer.byteLength(sealed),
    memo: primitive ? { config: { ...state.config }, stateText, bodyCrc, shift, configCrc, configBytes } : undefined,
  };
}

const headStarts = new Map<string, { meta: StateMeta; text: string; crc: number }>();

function headStart(meta: StateMeta): { text: string; crc: number } {
  const last = headStarts.get(meta.agentUuid);
  if (
    last !== undefined &&
    last.meta.formatVersion === meta.formatVersion &&
    last.meta.schemaVersion === meta.schemaVersion &&
    last.meta.agentUuid === meta.agentUuid &&
    last.meta.agentName === meta.agentName &&
    last.meta.protocol === meta.protocol &&
    last.meta.class === meta.class
  ) {
    return last;
  }
  const text = headerPrefix(meta) + constantMetaLines(meta);
  const start = { meta: { ...meta }, text, crc: crc32(text) };
  if (headStarts.size >= 1024) headStarts.clear();
  headStarts.set(meta.agentUuid, start);
  return start;
}
