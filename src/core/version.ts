/**
 * The package's own version, read from its `package.json` at run time (never
 * hard-coded), the `.duas` format version this build reads and writes, and
 * the file extensions of `.duas` files (here, not in `core/codec/`: the file
 * backend lists its keys without loading the codec and the zod schemas).
 *
 * @module
 */
import { readFileSync } from "node:fs";

/** The `.duas` format version written into `[META] format_version` (`duagent-state/1.0`). */
export const FORMAT_VERSION = "1.0";
/** Format versions this build can read. */
export const SUPPORTED_FORMAT_VERSIONS: readonly string[] = ["1.0"];
/** File extension of a plain `.duas` file. */
export const DUAS_EXTENSION = ".duas";
/** File extension of a gzip-compressed `.duas` file. */
export const DUAS_GZ_EXTENSION = ".duas.gz";

let cached: string | undefined;

/**
 * The version of the installed `dumplings-ai` package (`package.json` → `version`),
 * written as `schema_version` in every saved state.
 *
 * @returns a semver string such as `"0.1.0"`
 */
export function packageVersion(): string {
  if (cached === undefined) {
    // src/core/version.ts and dist/core/version.js are both two levels below the package root.
    const url = new URL("../../package.json", import.meta.url);
    const pkg = JSON.parse(readFileSync(url, "utf8")) as { version?: unknown };
    if (typeof pkg.version !== "string") throw new Error(`package.json at ${url.pathname} has no version`);
    cached = pkg.version;
  }
  return cached;
}
