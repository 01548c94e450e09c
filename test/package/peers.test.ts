/**
 * The optional peers (database drivers, the inspector's server) are declared
 * once: `OPTIONAL_PEERS` (what the library's "install it" messages say)
 * equals package.json's optional `peerDependencies`, each is a devDependency
 * (the project's own `npm ci` installs what its tests need), none is a
 * dependency, and no built module outside the inspector imports one
 * statically (they are loaded where a store, worker or server is created).
 */
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { MissingPeerError } from "../../src/core/errors.js";
import { OPTIONAL_PEERS } from "../../src/core/peers.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  peerDependencies: Record<string, string>;
  peerDependenciesMeta: Record<string, { optional?: boolean }>;
};
const lock = JSON.parse(readFileSync(path.join(root, "package-lock.json"), "utf8")) as {
  packages: Record<string, { version?: string }>;
};

describe("optional peers", () => {
  for (const [name, range] of Object.entries(OPTIONAL_PEERS)) {
    it(`${name}: an optional peer at ${range}, a devDependency, not a dependency, and the locked version is in range`, () => {
      expect(pkg.peerDependencies[name]).toBe(range);
      expect(pkg.peerDependenciesMeta[name]?.optional).toBe(true);
      expect(pkg.devDependencies[name]).toBe(range);
      expect(pkg.dependencies[name]).toBeUndefined();
      // the range's floor is the version CI installs (package-lock)
      expect(range).toBe(`^${lock.packages[`node_modules/${name}`]?.version}`);
    });
  }

  it("MissingPeerError names the package and the install command", () => {
    const e = new MissingPeerError("sqlite", "better-sqlite3", OPTIONAL_PEERS["better-sqlite3"]);
    expect(e.code).toBe("MISSING_PEER");
    expect(e.install).toBe("npm i better-sqlite3@^12.11.1");
    expect(e.message).toContain("[dumplings:sqlite]");
    expect(e.message).toContain("`npm i better-sqlite3@^12.11.1`");
  });

  it("no built module imports a peer statically, except the inspector's (loaded by `dumplings ui` after a check)", () => {
    const names = Object.keys(OPTIONAL_PEERS).join("|").replace(/[/]/g, "\\/");
    const staticImport = new RegExp(`^import (?!type )[^;]*from "(${names})(/[^"]*)?";`, "m");
    const offenders: string[] = [];
    const walk = (dir: string): void => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const file = path.join(dir, e.name);
        if (e.isDirectory()) walk(file);
        else if (e.name.endsWith(".js") && staticImport.test(readFileSync(file, "utf8"))) {
          offenders.push(path.relative(root, file));
        }
      }
    };
    walk(path.join(root, "dist"));
    expect(offenders.filter((f) => !f.startsWith(`dist${path.sep}ui${path.sep}`))).toEqual([]);
    // the check works: the inspector's server does import hono statically
    expect(offenders).toContain(path.join("dist", "ui", "app.js"));
  });
});
