/**
 * The operator tools' view of the one SPEC syntax (see `drivers/spec.ts`, which the
 * library's `store: "…"` options share): the same parser, its refusals as
 * {@link UsageError}s (exit 2), and {@link oneOf} for a setting given both in
 * the SPEC and as an option.
 *
 * @module
 */
import { InvalidOptionError } from "../core/errors.js";
import { parseSpec as parseStoreSpec, type Spec, type SpecKind } from "../drivers/spec.js";
import { UsageError } from "./errors.js";

export { SESSION_KINDS, type Spec, type SpecKind, specForms } from "../drivers/spec.js";

/**
 * Parses a SPEC as a command's option.
 *
 * @param text - the option's value
 * @param options - `kinds` the option accepts; `names`: a bare word is a backend name; `option`: its name
 * @returns the parsed SPEC
 * @throws {UsageError} for what `drivers/spec.ts` refuses, with its message (`--backend "redis": needs …`)
 */
export function parseSpec(
  text: string,
  options: { kinds: readonly SpecKind[]; names?: boolean; option: string },
): Spec {
  try {
    return parseStoreSpec(text, options);
  } catch (error) {
    if (error instanceof InvalidOptionError) {
      throw new UsageError(`${options.option} ${error.message.slice(error.message.indexOf(": ") + 2)}`);
    }
    throw error;
  }
}

/**
 * Picks the one value of a setting given both in the SPEC (`?schema=`, `?prefix=`) and as an option.
 *
 * @param fromSpec - the value in the SPEC's URL
 * @param fromOption - the value of the option (`--schema`, `--prefix`)
 * @param what - the setting's name for the message
 * @returns the value, or undefined when neither gives one
 * @throws {UsageError} when both give different values
 */
export function oneOf(fromSpec: string | undefined, fromOption: string | undefined, what: string): string | undefined {
  if (fromSpec !== undefined && fromOption !== undefined && fromSpec !== fromOption) {
    throw new UsageError(`the ${what} is given twice, differently: ${fromSpec} in the URL and ${fromOption} as option`);
  }
  return fromSpec ?? fromOption;
}
