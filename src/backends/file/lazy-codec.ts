/**
 * The `.duas` codec and the message checks of a write, bound on the first read, write or delete
 * ({@link loadCodec}): they load zod (its schemas check what is read and written), which
 * constructing a backend and listing its keys never need, so `dumplings ls` starts without it
 * (issue 23). Every method that reads or writes a file awaits `loadCodec()` first; the engine's
 * modules read these bindings (live ES module bindings) only after that.
 *
 * @module
 */

import type * as Bytes from "../../core/codec/bytes.js";
import type * as Crc from "../../core/codec/crc.js";
import type * as Encode from "../../core/codec/encode.js";
import type * as Escape from "../../core/codec/escape.js";
import type * as Header from "../../core/codec/header.js";
import type * as Parse from "../../core/codec/parse.js";
import type * as Messages from "../../core/messages.js";
import type * as Stored from "../stored.js";
import type * as Append from "./append.js";
import type * as Layout from "./layout.js";
import type * as Read from "./read.js";
import type * as Scan from "./scan.js";
import type * as Summary from "./value-summary.js";

export let crc32: typeof Crc.crc32;
export let crcHex: typeof Crc.crcHex;
export let DuasLineParser: typeof Parse.DuasLineParser;
export type DuasLineParser = Parse.DuasLineParser;
export let decodeBytesDetailed: typeof Bytes.decodeBytesDetailed;
export let decodeStateDetailed: typeof Bytes.decodeStateDetailed;
export let decodeUtf8: typeof Bytes.decodeUtf8;
export type EncodedHeader = Layout.EncodedHeader;
export let encodeHeader: typeof Header.encodeHeader;
export let encodeHeaderMemo: typeof Layout.encodeHeaderMemo;
export let encodeHistoryLines: typeof Encode.encodeHistoryLines;
export let encodeIniString: typeof Escape.encodeIniString;
export type HeaderMemo = Layout.HeaderMemo;
export let HISTORY_CRC_START: number;
export let historyCrc: typeof Crc.historyCrc;
export let historyCrcOfLines: typeof Crc.historyCrcOfLines;
export let iniKeyOf: typeof Summary.iniKeyOf;
export let isGzip: typeof Bytes.isGzip;
export let LongValueSummary: typeof Summary.LongValueSummary;
export type LongValueSummary = Summary.LongValueSummary;
export type ParsedHeader = Parse.ParsedHeader;
export type PriorCommit = Header.PriorCommit;
export let isWellFormedMessage: typeof Messages.isWellFormedMessage;
export let lentText: typeof Stored.lentText;
export let messageText: typeof Stored.messageText;

export let fixedMetaOf: typeof Append.fixedMetaOf;
export let headOf: typeof Append.headOf;
export let jsonOf: typeof Append.jsonOf;
export let tryAppend: typeof Append.tryAppend;
export let fileLines: typeof Read.fileLines;
export let readFileWhole: typeof Read.readFileWhole;
export let feedHeader: typeof Scan.feedHeader;
export let HISTORY_LINE: string;
export let readHead: typeof Scan.readHead;
export let scanPlain: typeof Scan.scanPlain;

let codecLoaded: Promise<void> | undefined;
/** Binds the codec's functions above (once; later calls return the same settled promise). */
export function loadCodec(): Promise<void> {
  codecLoaded ??= Promise.all([
    import("../../core/codec/bytes.js"),
    import("../../core/codec/crc.js"),
    import("../../core/codec/encode.js"),
    import("../../core/codec/escape.js"),
    import("../../core/codec/header.js"),
    import("../../core/codec/parse.js"),
    import("./layout.js"),
    import("./value-summary.js"),
    import("../../core/messages.js"),
    import("../stored.js"),
    import("./append.js"),
    import("./read.js"),
    import("./scan.js"),
  ]).then(([bytes, crc, encode, escaping, header, parse, layout, summary, messages, stored, append, read, scan]) => {
    ({ crc32, crcHex, HISTORY_CRC_START, historyCrc, historyCrcOfLines } = crc);
    ({ DuasLineParser } = parse);
    ({ decodeBytesDetailed, decodeStateDetailed, decodeUtf8, isGzip } = bytes);
    ({ encodeHeader } = header);
    ({ encodeHeaderMemo } = layout);
    ({ encodeHistoryLines } = encode);
    ({ encodeIniString } = escaping);
    ({ iniKeyOf, LongValueSummary } = summary);
    ({ isWellFormedMessage } = messages);
    ({ lentText, messageText } = stored);
    ({ fixedMetaOf, headOf, jsonOf, tryAppend } = append);
    ({ fileLines, readFileWhole } = read);
    ({ feedHeader, HISTORY_LINE, readHead, scanPlain } = scan);
  });
  return codecLoaded;
}
