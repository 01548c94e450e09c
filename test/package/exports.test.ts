/**
 * Every `exports` entry of package.json (and the `bin`) exists after the build
 * and can be imported: a broken subpath is caught here, not by a user.
 * (`npm test` builds before it runs the tests.)
 */
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as {
  exports: Record<string, string | { types: string; default: string }>;
  bin: Record<string, string>;
};

describe("package exports", () => {
  for (const [subpath, target] of Object.entries(pkg.exports)) {
    if (typeof target === "string") continue;
    it(`${subpath} has its JavaScript and type declarations in dist and imports`, async () => {
      const js = path.join(root, target.default);
      const dts = path.join(root, target.types);
      expect(existsSync(js), `${target.default} missing: run npm run build`).toBe(true);
      expect(existsSync(dts), `${target.types} missing`).toBe(true);
      const mod = (await import(pathToFileURL(js).href)) as Record<string, unknown>;
      expect(Object.keys(mod).length).toBeGreaterThan(0);
    });
  }

  it("the dumplings bin exists and starts with a node shebang", () => {
    const bin = path.join(root, pkg.bin.dumplings!);
    expect(existsSync(bin)).toBe(true);
    expect(readFileSync(bin, "utf8").startsWith("#!/usr/bin/env node")).toBe(true);
  });
});
