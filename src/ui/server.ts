/**
 * `startUi`: serves the web inspector (`createUiApp`) over HTTP with
 * `@hono/node-server`, on 127.0.0.1 by default, with a fresh token per start.
 * `dumplings ui` loads this module only when it runs, so no other command
 * loads hono.
 *
 * @module
 */
import { isIP } from "node:net";
import { serve } from "@hono/node-server";
import { InvalidOptionError } from "../core/errors.js";
import { createUiApp } from "./app.js";
import { newToken } from "./auth.js";
import type { UiSources } from "./sources.js";

/** Options of {@link startUi}. */
export interface StartUiOptions {
  /** Address to bind. @default "127.0.0.1" */
  host?: string;
  /** Port; 0 picks any free port. @default 0 */
  port?: number;
  /** The token (tests); a fresh random one when omitted. */
  token?: string;
}

/** A running inspector. */
export interface RunningUi {
  /** The address to open, with the token: `http://127.0.0.1:N/?token=…`. */
  url: string;
  /** The address without the token. */
  origin: string;
  /** The port it listens on. */
  port: number;
  /** This start's token. */
  token: string;
  /** Stops listening and ends open connections (live feeds included). */
  close(): Promise<void>;
}

/**
 * Whether an address is a loopback one (only then is the Host header restricted to loopback names).
 *
 * @param host - the bind address
 * @returns true for 127.0.0.0/8, ::1 and `localhost`
 */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || (isIP(host) === 4 && host.startsWith("127."));
}

/**
 * Starts the inspector.
 *
 * @param sources - the stores to show (see {@link UiSources})
 * @param options - `host` (default 127.0.0.1), `port` (default 0: any free port), `token`
 * @returns the running server with its address
 * @throws {InvalidOptionError} for a port outside 0..65535
 * @throws {Error} (`EADDRINUSE`, `EACCES`…) when the address cannot be bound
 * @example
 * const ui = await startUi({ sessions, workflows, journal }, { port: 0 });
 * console.log(ui.url); // http://127.0.0.1:41234/?token=…
 */
export async function startUi(sources: UiSources, options: StartUiOptions = {}): Promise<RunningUi> {
  const host = options.host ?? "127.0.0.1";
  const wanted = options.port ?? 0;
  if (!Number.isInteger(wanted) || wanted < 0 || wanted > 65535) {
    throw new InvalidOptionError("ui", "port", `must be an integer 0..65535, got ${wanted}`);
  }
  const token = options.token ?? newToken();
  let port = wanted;
  const app = createUiApp(sources, { token, port: () => port, loopback: isLoopback(host) });
  const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
    const s = serve({ fetch: app.fetch, hostname: host, port: wanted }, (info) => {
      port = info.port;
      resolve(s);
    });
    s.once("error", reject);
  });
  const shown = host.includes(":") ? `[${host}]` : host === "0.0.0.0" ? "127.0.0.1" : host;
  const origin = `http://${shown}:${port}`;
  return {
    url: `${origin}/?token=${token}`,
    origin,
    port,
    token,
    close: () =>
      new Promise<void>((resolve) => {
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}
