/**
 * The one SPEC syntax that names a store in a string: the CLI's `--backend`
 * (sessions), `convert --from/--to`, `--journal` (durable runs) and `--store`
 * (workflow checkpoints), and the library's `store: "sqlite:chats.db"`
 * options, all parse their value here, so a form that works for one works for
 * all (where the store kind makes sense).
 *
 * Forms (both spellings of the servers' URLs are accepted):
 *
 * | kind     | forms                                                   |
 * | -------- | ------------------------------------------------------- |
 * | file     | `file:DIR`                                              |
 * | sqlite   | `sqlite:PATH`                                           |
 * | postgres | `postgres://…`, `postgresql://…`, `postgres:postgres://…` |
 * | redis    | `redis://…`, `rediss://…`, `redis:redis://…`            |
 * | memory   | `memory:`                                               |
 *
 * A bare word (`file`, `sqlite`, a registered backend name) is a name, which
 * only `--backend` takes; `redis`/`postgres` alone get a hint to add the URL.
 *
 * @module
 */
import { InvalidOptionError } from "../core/errors.js";
import { suggestOption } from "../core/options.js";
import { redactUrl } from "./options.js";

/** Kinds of store a SPEC can name. */
export type SpecKind = "file" | "sqlite" | "postgres" | "redis" | "memory";

/** A parsed SPEC. */
export type Spec =
  | {
      /** `file` or `sqlite`. */
      kind: "file" | "sqlite";
      /** The directory or database file, as written. */
      path: string;
      /** The SPEC as written. */
      text: string;
    }
  | {
      /** `postgres` or `redis`. */
      kind: "postgres" | "redis";
      /** The connection URL without the `schema`/`prefix` parameter. */
      url: string;
      /** `?schema=…` (postgres) or `?prefix=…` (redis), when given. */
      param?: string;
      /** For messages: the canonical form with any password hidden. */
      label: string;
      /** The SPEC as written. */
      text: string;
    }
  | { kind: "memory"; text: string }
  | {
      /** A bare registered backend name (`--backend` only). */
      kind: "name";
      name: string;
      text: string;
    };

/** The example of each kind, as help texts and messages show them. */
const FORMS: Record<SpecKind, string> = {
  file: "file:DIR",
  sqlite: "sqlite:PATH",
  postgres: "postgres://URL (or postgres:postgres://URL; ?schema=NAME)",
  redis: "redis://URL (or redis:redis://URL; ?prefix=P)",
  memory: "memory:",
};

/**
 * The forms a store option accepts, for `--help` and error messages.
 *
 * @param kinds - the kinds the option takes
 * @param names - whether a bare registered backend name is also taken
 * @returns e.g. `sqlite:PATH, postgres://URL (or postgres:postgres://URL; ?schema=NAME)`
 */
export function specForms(kinds: readonly SpecKind[], names = false): string {
  return [...kinds.map((k) => FORMS[k]), ...(names ? ["or a registered backend name (file, sqlite, …)"] : [])].join(
    ", ",
  );
}

/** Every kind: what `--backend` and `convert` take. */
export const SESSION_KINDS: readonly SpecKind[] = ["file", "sqlite", "postgres", "redis", "memory"];

/**
 * Parses a SPEC.
 *
 * @param text - the option's value
 * @param options - `kinds` the option accepts; `names`: a bare word is a backend name (else an error);
 *   `option`: the option's name for messages
 * @returns the parsed SPEC
 * @throws {InvalidOptionError} (component `spec`, the option's name) for an unknown form, a kind the
 *   option does not take, a missing location or a bad URL
 *   (the message lists the accepted forms; never shows a URL's password)
 * @example
 * parseSpec("postgres://u@h/db?schema=s", { kinds: ["sqlite", "postgres"], option: "--store" })
 * // { kind: "postgres", url: "postgres://u@h/db", param: "s", label: "postgres://u@h/db?schema=s", text: … }
 */
export function parseSpec(
  text: string,
  options: { kinds: readonly SpecKind[]; names?: boolean; option: string },
): Spec {
  const { kinds, option } = options;
  const forms = specForms(kinds, options.names === true);
  const shown = JSON.stringify(safe(text));
  const refuse = (why: string): never => {
    throw new InvalidOptionError("spec", option, `${shown}: ${why}; write ${forms}`);
  };
  const colon = text.indexOf(":");
  if (colon < 0) {
    if (text === "") refuse("is empty");
    if (text === "redis" || text === "postgres" || text === "postgresql") {
      const kind = text === "redis" ? "redis" : "postgres";
      if (kinds.includes(kind)) {
        refuse(
          `needs the server's URL, e.g. ${kind === "redis" ? "redis:redis://127.0.0.1:6379" : "postgres:postgres://postgres@127.0.0.1:5432/db"}`,
        );
      }
    }
    if (options.names === true) return { kind: "name", name: text, text };
    refuse("is not a store");
  }
  const scheme = text.slice(0, colon).toLowerCase();
  const rest = text.slice(colon + 1);
  let kind: SpecKind;
  let url: string | undefined;
  switch (scheme) {
    case "file":
    case "sqlite":
      kind = scheme;
      break;
    case "memory":
      kind = "memory";
      if (rest !== "") refuse("memory: takes no location");
      break;
    case "postgres":
    case "postgresql":
      kind = "postgres";
      url = rest.startsWith("//") ? text : rest;
      break;
    case "redis":
    case "rediss":
      kind = "redis";
      url = rest.startsWith("//") ? text : scheme === "rediss" ? refuse("write rediss://URL") : rest;
      break;
    default:
      return refuse(`unknown kind ${JSON.stringify(scheme)}`);
  }
  if (!kinds.includes(kind)) refuse(`a ${kind} store is not accepted here`);
  if (kind === "memory") return { kind, text };
  if (kind === "file" || kind === "sqlite") {
    if (rest === "") refuse(`needs a ${kind === "file" ? "directory" : "database file"}`);
    return { kind, path: rest, text };
  }
  if (url === undefined || url === "") {
    return refuse(
      `needs the server's URL, e.g. ${kind === "redis" ? "redis:redis://127.0.0.1:6379" : "postgres:postgres://postgres@127.0.0.1:5432/db"}`,
    );
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return refuse(`${JSON.stringify(safe(url))} is not a URL`);
  }
  const protocols = kind === "postgres" ? ["postgres:", "postgresql:"] : ["redis:", "rediss:"];
  if (!protocols.includes(parsed.protocol)) {
    refuse(`a ${kind} store needs a ${protocols.map((p) => `${p}//`).join(" or ")} URL`);
  }
  const name = kind === "postgres" ? "schema" : "prefix";
  // Other parameters belong to the driver (`sslmode`, `application_name`, …); one that is
  // a misspelling of ours would silently open the default schema or prefix instead.
  for (const key of parsed.searchParams.keys()) {
    if (key !== name && suggestOption(key, [name]) === name)
      refuse(`unknown parameter ?${key}=; did you mean ?${name}=`);
  }
  const param = parsed.searchParams.get(name) ?? undefined;
  parsed.searchParams.delete(name);
  return { kind, url: parsed.href, param, label: redactUrl(url), text };
}

/** A SPEC for messages: any URL password hidden. */
function safe(text: string): string {
  const at = text.indexOf("://");
  if (at < 0) return text;
  const colon = text.indexOf(":");
  // `postgres:postgres://…`: the URL starts after the first colon; `postgres://…`: it is the whole text
  const urlStart = colon < at && !text.slice(colon + 1).startsWith("//") ? colon + 1 : 0;
  return text.slice(0, urlStart) + redactUrl(text.slice(urlStart));
}
