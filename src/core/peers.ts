/**
 * The optional peer dependencies: packages only some features need (a
 * database driver, the inspector's web server), which a user installs
 * beside dumplings-ai when they use that feature. The library loads each
 * one at the point a store, worker or server is created, never when an entry
 * point is imported, and reports a missing one as a {@link MissingPeerError}
 * naming the install command.
 *
 * {@link OPTIONAL_PEERS} holds the version ranges this release is tested
 * with; they equal the `peerDependencies` of package.json (a test checks it).
 *
 * @module
 */
import { createRequire } from "node:module";
import { MissingPeerError } from "./errors.js";

/** Every optional peer a feature loads on use, with the range this release is tested with. */
export const OPTIONAL_PEERS = {
  "better-sqlite3": "^12.11.1",
  pg: "^8.23.1",
  ioredis: "^5.11.1",
  bullmq: "^5.81.5",
  hono: "^4.13.19",
  "@hono/node-server": "^2.1.9",
} as const;

/** The name of an optional peer of {@link OPTIONAL_PEERS}. */
export type OptionalPeer = keyof typeof OPTIONAL_PEERS;

const requireCjs = createRequire(import.meta.url);

/** Whether `e` says that `pkg` itself (not a package it depends on) cannot be found. */
function isMissing(e: unknown, pkg: string): boolean {
  const err = e as { code?: unknown; message?: unknown } | null;
  const code = err?.code;
  if (code !== "MODULE_NOT_FOUND" && code !== "ERR_MODULE_NOT_FOUND") return false;
  const message = typeof err?.message === "string" ? err.message : "";
  return message.includes(`'${pkg}'`) || message.includes(`"${pkg}"`);
}

/**
 * Loads an optional peer synchronously (`require`; each of them ships a
 * CommonJS build), so a constructor that opens a driver stays synchronous.
 *
 * @param component - what needs it, for the message (`sqlite`, `redis`, …)
 * @param pkg - the package
 * @returns the package's module
 * @throws {MissingPeerError} when the package is not installed
 * @example
 * const Database = requirePeer<typeof import("better-sqlite3")>("sqlite", "better-sqlite3");
 */
export function requirePeer<T>(component: string, pkg: OptionalPeer): T {
  try {
    return requireCjs(pkg) as T;
  } catch (e) {
    if (isMissing(e, pkg)) throw new MissingPeerError(component, pkg, OPTIONAL_PEERS[pkg], { cause: e });
    throw e;
  }
}

/**
 * Checks that optional peers are installed, before importing a module that
 * imports them statically (the inspector's server imports hono).
 *
 * @param component - what needs them, for the message
 * @param pkgs - the packages
 * @throws {MissingPeerError} for the first one that is not installed
 */
export function assertPeers(component: string, pkgs: readonly OptionalPeer[]): void {
  for (const pkg of pkgs) {
    try {
      requireCjs.resolve(pkg);
    } catch (e) {
      if (isMissing(e, pkg)) throw new MissingPeerError(component, pkg, OPTIONAL_PEERS[pkg], { cause: e });
      throw e;
    }
  }
}
