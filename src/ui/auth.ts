/**
 * Access control of the web inspector, as a hono middleware:
 *
 * - a random token per start travels once in the printed address
 *   (`/?token=…`); a request carrying the right token gets it as an `HttpOnly`,
 *   `SameSite=Strict` cookie and a redirect to the same address without it
 *   (so the token leaves the address bar and the history);
 * - every other request needs that cookie: without it, 401;
 * - a state-changing request must be a POST whose `Origin` is the inspector's
 *   own (the CSRF check; a missing or foreign Origin is 403), and on a loopback
 *   bind the `Host` must be a loopback name (DNS rebinding);
 * - every response carries a strict Content-Security-Policy (scripts and
 *   styles from the inspector itself only, no inline script), `nosniff`,
 *   no framing, no referrer to other origins, and `no-store`.
 *
 * @module
 */
import { randomBytes, timingSafeEqual } from "node:crypto";
import type { Context, MiddlewareHandler } from "hono";
import { getCookie, setCookie } from "hono/cookie";

/** The Content-Security-Policy of every response. */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join("; ");

/**
 * A fresh random token (192 bits, base64url).
 *
 * @returns the token
 */
export function newToken(): string {
  return randomBytes(24).toString("base64url");
}

/**
 * The cookie name for a port: cookies are shared by every port of a host, so two inspectors
 * on 127.0.0.1 would otherwise overwrite each other's cookie.
 *
 * @param port - the listening port
 * @returns `dumplings_ui_<port>`
 */
export function cookieName(port: number): string {
  return `dumplings_ui_${port}`;
}

/** What {@link authMiddleware} checks against. */
export interface AuthOptions {
  /** The token of this start. */
  token: string;
  /** The listening port (read at request time: with `--port 0` it is known only once listening). */
  port: () => number;
  /** True when bound to a loopback address: the Host header must then name a loopback host. */
  loopback: boolean;
}

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "localhost", "[::1]"]);

function sameToken(given: string | undefined, token: string): boolean {
  if (given === undefined) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

function refuse(c: Context, status: 401 | 403, why: string): Response {
  c.header("Content-Type", "text/plain; charset=utf-8");
  return c.body(`${status === 401 ? "401 Unauthorized" : "403 Forbidden"}: ${why}\n`, status);
}

/**
 * The middleware that guards every route (see the module comment).
 *
 * @param options - token, port, whether the bind is loopback
 * @returns the hono middleware
 */
export function authMiddleware(options: AuthOptions): MiddlewareHandler {
  return async (c, next) => {
    c.header("Content-Security-Policy", CONTENT_SECURITY_POLICY);
    c.header("X-Content-Type-Options", "nosniff");
    c.header("X-Frame-Options", "DENY");
    // same-origin, not no-referrer: under no-referrer Chromium sends `Origin: null` with the pages' own form POSTs
    c.header("Referrer-Policy", "same-origin");
    c.header("Cache-Control", "no-store");
    c.header("Cross-Origin-Resource-Policy", "same-origin");
    const host = c.req.header("host") ?? "";
    if (options.loopback && !LOOPBACK_HOSTS.has(host.replace(/:\d+$/, ""))) {
      return refuse(c, 403, `host ${JSON.stringify(host)} is not this inspector's (it listens on a loopback address)`);
    }
    const name = cookieName(options.port());
    const url = new URL(c.req.url);
    const queryToken = url.searchParams.get("token");
    if (queryToken !== null) {
      if (!sameToken(queryToken, options.token)) return refuse(c, 401, "wrong token");
      setCookie(c, name, options.token, { httpOnly: true, sameSite: "Strict", path: "/" });
      url.searchParams.delete("token");
      const rest = url.searchParams.toString();
      return c.redirect(`${url.pathname}${rest ? `?${rest}` : ""}`, 303);
    }
    if (!sameToken(getCookie(c, name), options.token)) {
      return refuse(c, 401, "open the address `dumplings ui` printed (it carries the token)");
    }
    const method = c.req.method;
    if (method !== "GET" && method !== "HEAD") {
      if (method !== "POST") return refuse(c, 403, `${method} is not allowed; state changes are POST`);
      const origin = c.req.header("origin");
      if (origin !== `http://${host}`) {
        return refuse(c, 403, `cross-site request refused (Origin ${JSON.stringify(origin ?? null)})`);
      }
      if (c.req.header("sec-fetch-site") === "cross-site") return refuse(c, 403, "cross-site request refused");
    }
    await next();
  };
}
