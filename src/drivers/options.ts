/**
 * Option checks shared by the database drivers, so that every component of
 * every database refuses a bad option the same way: an
 * {@link InvalidOptionError} naming the component and the option, thrown by
 * the constructor before any connection is made.
 *
 * @module
 */
import { realpathSync } from "node:fs";
import path from "node:path";
import { InvalidOptionError } from "../core/errors.js";
import { shownValue } from "../core/options.js";

/**
 * Resolves a renamed option: the new name's value, else the deprecated old name's.
 *
 * @param component - e.g. `redis`, `postgres`
 * @param name - the option's name, e.g. `keyPrefix`
 * @param value - its value
 * @param oldName - the deprecated name, e.g. `prefix`
 * @param oldValue - the deprecated name's value
 * @returns the value to use (`undefined` when neither is given)
 * @throws {InvalidOptionError} when both are given and differ
 * @example
 * const keyPrefix = renamedOption("redis", "keyPrefix", options.keyPrefix, "prefix", options.prefix);
 */
export function renamedOption<T>(
  component: string,
  name: string,
  value: T | undefined,
  oldName: string,
  oldValue: T | undefined,
): T | undefined {
  if (value === undefined) return oldValue;
  if (oldValue !== undefined && oldValue !== value) {
    throw new InvalidOptionError(
      component,
      name,
      `${name} and its deprecated alias ${oldName} are both given and differ`,
    );
  }
  return value;
}

/**
 * Checks a positive numeric option (a timeout or TTL in ms, a pool size).
 *
 * @param component - e.g. `postgres`
 * @param option - its name, for the error
 * @param value - the given value
 * @param fallback - the default when `value` is undefined
 * @param unit - how the message names the unit @default "ms"
 * @returns `value` rounded up to a whole number, or `fallback`
 * @throws {InvalidOptionError} when `value` is not a positive finite number
 */
export function positiveOption(
  component: string,
  option: string,
  value: unknown,
  fallback: number,
  unit = "ms",
): number {
  if (value === undefined) return fallback;
  if (typeof value === "number" && Number.isFinite(value) && value > 0) return Math.ceil(value);
  throw new InvalidOptionError(
    component,
    option,
    `must be a positive number${unit ? ` of ${unit}` : ""}, got ${shownValue(value)}`,
  );
}

/**
 * Checks a boolean option (a switch such as `gzip`): `"yes"` or `1` is not
 * silently read as false.
 *
 * @returns `value`, or `fallback` when undefined
 * @throws {InvalidOptionError} when `value` is not a boolean
 */
export function booleanOption(component: string, option: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value === "boolean") return value;
  throw new InvalidOptionError(component, option, `must be true or false, got ${shownValue(value)}`);
}

/**
 * Checks a positive whole-number option (a pool size).
 *
 * @returns `value`, or `fallback` when undefined
 * @throws {InvalidOptionError} when `value` is not a positive safe integer
 */
export function wholeOption(component: string, option: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value === "number" && Number.isSafeInteger(value) && value > 0) return value;
  throw new InvalidOptionError(component, option, `must be a positive whole number, got ${shownValue(value)}`);
}

/**
/**
 * Query parameters that carry a secret in the connection URLs of PostgreSQL (libpq's `password`,
 * `sslpassword`), Redis (`password`) and common drivers and proxies (tokens, keys).
 */
const SECRET_PARAMS = /^(password|passwd|pwd|pass|sslpassword|secret|token|auth|auth_?token|access_?token|api_?key)$/i;

/**
 * A URL without its credentials, for messages and labels: the user name is
 * kept, a password becomes `***`, and so does the value of a query parameter
 * that carries a secret (`?password=`, `sslpassword`, `token`, `api_key`, …).
 * Anything after the scheme of a text that is not a parsable URL is dropped
 * (it may hold a password in any shape).
 *
 * @example
 * redactUrl("postgres://app:s3cret@db:5432/x") // "postgres://app:***@db:5432/x"
 * redactUrl("postgres://db/x?schema=s&password=s3cret") // "postgres://db/x?schema=s&password=***"
 */
export function redactUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return describeUnparsable(url);
  }
  if (u.password) u.password = "***";
  // (searchParams.set re-encodes the query, so it runs only where a secret is: other URLs keep their text)
  for (const name of [...new Set(u.searchParams.keys())]) {
    if (SECRET_PARAMS.test(name.replace(/-/g, "_"))) u.searchParams.set(name, "***");
  }
  return u.href;
}

/** What may be said of a text that does not parse as a URL: its scheme, never the rest. */
function describeUnparsable(text: string): string {
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(text)?.[1];
  return scheme
    ? `a ${scheme}: URL (not shown: it does not parse, and may hold a password)`
    : "a text that is not a URL";
}

/**
 * Parses a connection URL and checks its scheme.
 *
 * @param component - e.g. `redis`
 * @param url - the given value
 * @param protocols - accepted schemes with their colon, e.g. `["postgres:", "postgresql:"]`
 * @param source - where the URL came from, for the message (e.g. `REDIS_URL`)
 * @returns the parsed URL
 * @throws {InvalidOptionError} (option `url`) when it is not a string, does not parse, or has another scheme
 */
export function parseUrlOption(component: string, url: unknown, protocols: readonly string[], source?: string): URL {
  const from = source ? ` (read from ${source})` : "";
  if (typeof url !== "string" || url.trim() === "") {
    throw new InvalidOptionError(
      component,
      "url",
      `must be a URL, got ${typeof url === "string" ? "an empty text" : typeof url}${from}`,
    );
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    // No cause attached: Node's URL error carries the raw input, password included.
    throw new InvalidOptionError(component, "url", `${describeUnparsable(url)} is not a valid URL${from}`);
  }
  if (!protocols.includes(parsed.protocol)) {
    const names = protocols.map((p) => (p === "unix:" ? p : `${p}//`)).join(", ");
    throw new InvalidOptionError(component, "url", `${JSON.stringify(redactUrl(url))} is not a ${names} URL${from}`);
  }
  return parsed;
}

const instanceIds = new WeakMap<object, number>();
let nextInstanceId = 1;

/**
 * A store identity for a store known only by an object (an injected client,
 * pool or database handle): the same object gives the same identity, two
 * objects two identities.
 *
 * @param kind - e.g. `redis`, `postgres`
 * @param handle - the injected object
 * @returns e.g. `redis:instance#3`
 */
export function instanceIdentity(kind: string, handle: object): string {
  let id = instanceIds.get(handle);
  if (id === undefined) {
    id = nextInstanceId++;
    instanceIds.set(handle, id);
  }
  return `${kind}:instance#${id}`;
}

/**
 * A store identity for a file or directory: its real path (symbolic links
 * and `..` resolved, relative paths made absolute), also for a path that does
 * not exist yet (the real path of its deepest existing ancestor, plus the rest).
 *
 * @param kind - e.g. `file`, `sqlite`
 * @param file - the path as given
 * @returns e.g. `sqlite:/var/lib/app/sessions.db`
 */
export function pathIdentity(kind: string, file: string): string {
  let dir = path.resolve(file);
  const rest: string[] = [];
  for (;;) {
    try {
      return `${kind}:${path.join(realpathSync.native(dir), ...rest.reverse())}`;
    } catch {
      const parent = path.dirname(dir);
      if (parent === dir) return `${kind}:${path.resolve(file)}`;
      rest.push(path.basename(dir));
      dir = parent;
    }
  }
}

/**
 * A store identity for a server reached by URL: scheme family, user, lower-case
 * host, port (the default filled in), database path, and the component's
 * namespace (schema, key prefix). The password is never part of it.
 *
 * @param kind - e.g. `redis`, `postgres`
 * @param url - the connection URL
 * @param defaultPort - the scheme's default port, e.g. 6379
 * @param namespace - what separates stores on one server, e.g. the schema or key prefix
 * @param defaultPath - the path meaning the default database, e.g. `/0` for Redis
 * @returns e.g. `postgres://postgres@127.0.0.1:5432/test#dumplings`
 */
export function urlIdentity(
  kind: string,
  url: string,
  defaultPort: number,
  namespace: string,
  defaultPath = "",
): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return `${kind}:${JSON.stringify(namespace)}@${redactUrl(url)}`;
  }
  if (u.protocol === "unix:") {
    const db = u.searchParams.get("db") ?? "0";
    return `${kind}+unix:${u.pathname}?db=${db}#${JSON.stringify(namespace)}`;
  }
  const user = decodeURIComponent(u.username);
  const port = u.port === "" ? String(defaultPort) : u.port;
  const db = u.pathname === "" || u.pathname === "/" ? defaultPath : u.pathname;
  const tls = u.protocol === "rediss:" ? "s" : "";
  return `${kind}${tls}://${user ? `${user}@` : ""}${u.hostname.toLowerCase()}:${port}${db}#${JSON.stringify(namespace)}`;
}
