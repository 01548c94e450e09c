/**
 * The library's one way to say something nobody asked for: a failed auto-save nobody listens to, a
 * hot tier that went down, a warning at load. Every such line goes to the {@link Logger} set with
 * `configure({ logger })` (or a component's own `logger` option), or, by default, to `console`
 * (warnings and errors only, one `[dumplings]` line each, as before). The per-feature events
 * (`persistError`, `hookError`, `onWarning`, `onHotError`) stay: a line is logged only when nobody
 * handles the event.
 *
 * The shape is the one `console`, winston and most loggers share: `warn(message, fields)`. pino takes
 * its fields first (`warn(fields, message)`); a pino logger (recognised by its `bindings()` and `levels`)
 * is called that way, so it can be passed as it is.
 *
 * @module
 */
import { InvalidOptionError } from "./errors.js";
import { shownValue } from "./options.js";

/** Structured fields of a log line (a run id, a key, an error code…): flat JSON values. */
export type LogFields = Record<string, string | number | boolean | null | undefined>;

/** A log level the library writes at. */
export type LogLevel = "debug" | "info" | "warn" | "error";

/**
 * Where the library's log lines go: `console`, a pino or a winston logger, or any object with these
 * methods. `warn` and `error` are required; `debug` and `info` are used when present. A method that
 * throws is ignored (logging never fails an operation).
 *
 * @example
 * import pino from "pino";
 * configure({ logger: pino() });          // fields first, as pino expects
 * configure({ logger: console });         // message, then the fields object
 * configure({ logger: winston.createLogger({ transports: [new winston.transports.Console()] }) });
 */
export interface Logger {
  debug?(message: string, fields?: LogFields): void;
  info?(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

/** The default: warnings and errors on the console, one `[dumplings]` line each (fields not printed). */
const consoleLogger: Logger = {
  warn: (message) => console.warn(`[dumplings] ${message}`),
  error: (message) => console.error(`[dumplings] ${message}`),
};

let current: Logger = consoleLogger;

/**
 * What keeps `value` from being a {@link Logger} (an object with `warn` and `error` functions, and
 * `debug`/`info` functions when present), or undefined when it is one.
 */
export function loggerProblem(value: unknown): string | undefined {
  const v = value as Record<string, unknown> | null;
  const isObject = v !== null && (typeof v === "object" || typeof v === "function");
  const missing = isObject ? (["warn", "error"] as const).filter((m) => typeof v[m] !== "function") : ["warn", "error"];
  const wrong = isObject
    ? (["debug", "info"] as const).filter((m) => v[m] !== undefined && typeof v[m] !== "function")
    : [];
  if (missing.length === 0 && wrong.length === 0) return undefined;
  return `expected a logger (an object with warn and error methods, like console, pino or winston)${
    missing.length > 0 ? `; missing ${missing.join(" and ")}` : ""
  }${wrong.length > 0 ? `; ${wrong.join(" and ")} must be ${wrong.length > 1 ? "functions" : "a function"}` : ""}, got ${shownValue(value)}`;
}

/**
 * A component's `logger` option, checked.
 * @throws {InvalidOptionError} naming the component when it is not a {@link Logger}
 */
export function checkLogger(component: string, value: unknown): Logger {
  const problem = loggerProblem(value);
  if (problem !== undefined) throw new InvalidOptionError(component, "logger", problem);
  return value as Logger;
}

/**
 * Sets the library's logger (`configure({ logger })` calls this); `undefined` restores the default
 * (the console).
 */
export function setLogger(logger: Logger | undefined): void {
  current = logger ?? consoleLogger;
}

/** The logger set by `configure({ logger })`, else the console default. */
export function currentLogger(): Logger {
  return current;
}

/** Whether `logger` is a pino logger, which takes its fields before its message. */
function fieldsFirst(logger: Logger): boolean {
  const l = logger as unknown as { bindings?: unknown; levels?: unknown };
  return typeof l.bindings === "function" && typeof l.levels === "object" && l.levels !== null;
}

/**
 * Writes one line at `level` to `logger` (default: {@link currentLogger}). A level the logger lacks
 * (`debug`, `info`) is skipped; a logger that throws is ignored.
 *
 * @param level - the level
 * @param message - one line of text, without the `[dumplings]` prefix
 * @param fields - structured fields (a key, a run id, an error code)
 * @param logger - a component's own logger, if it was given one
 */
export function log(level: LogLevel, message: string, fields?: LogFields, logger: Logger = current): void {
  const method = logger[level] as ((...args: unknown[]) => void) | undefined;
  if (typeof method !== "function") return;
  try {
    if (fields === undefined) method.call(logger, message);
    else if (fieldsFirst(logger)) method.call(logger, fields, message);
    else method.call(logger, message, fields);
  } catch {
    // logging never fails an operation
  }
}
