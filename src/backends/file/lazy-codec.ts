/**
 * The parts of the file engine that need the `.duas` codec, bound on the first read, write or
 * delete ({@link loadCodec}): the codec and the message checks load zod (its schemas check what is
 * read and written), which constructing a backend and listing its keys never need, so
 * `dumplings ls` starts without them (issue 23). Every `FileBackend` method that reads or writes a
 * file awaits `loadCodec()` first. The modules loaded here (appends, whole-file writes, scans,
 * the read paths) import the codec themselves; `FileBackend` calls them through these bindings.
 *
 * @module
 */

import type * as Parse from "../../core/codec/parse.js";
import type * as Append from "./append.js";
import type * as Read from "./read.js";
import type * as Scan from "./scan.js";
import type * as WholeWrite from "./whole-write.js";

export let DuasLineParser: typeof Parse.DuasLineParser;
export let feedHeader: typeof Scan.feedHeader;
export let fileLines: typeof Read.fileLines;
export let readFileWhole: typeof Read.readFileWhole;
export let readHead: typeof Scan.readHead;
export let rewrite: typeof WholeWrite.rewrite;
export let tryAppend: typeof Append.tryAppend;
export let validInfo: typeof Append.validInfo;

let codecLoaded: Promise<void> | undefined;
/** Binds the functions above (once; later calls return the same settled promise). */
export function loadCodec(): Promise<void> {
  codecLoaded ??= Promise.all([
    import("../../core/codec/parse.js"),
    import("./append.js"),
    import("./read.js"),
    import("./scan.js"),
    import("./whole-write.js"),
  ]).then(([parse, append, read, scan, whole]) => {
    ({ DuasLineParser } = parse);
    ({ tryAppend, validInfo } = append);
    ({ fileLines, readFileWhole } = read);
    ({ feedHeader, readHead } = scan);
    ({ rewrite } = whole);
  });
  return codecLoaded;
}
