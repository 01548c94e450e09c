/**
 * Pins the names every package entry point exports (`exports` of package.json):
 * the runtime values of the built module and the type-only names of its
 * declarations, compared with the committed snapshot
 * (`__snapshots__/entry-names.test.ts.snap`). Adding, renaming or removing an
 * export fails here until the snapshot is updated on purpose:
 * `npm run build && npx vitest run test/package -u`, then review the diff.
 */
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as {
  exports: Record<string, string | { types: string; default: string }>;
};
const entries = Object.entries(pkg.exports).flatMap(([subpath, target]) =>
  typeof target === "string"
    ? []
    : [{ subpath, js: path.join(root, target.default), dts: path.join(root, target.types) }],
);

/** Every name each declaration file exports (values and types), from one TypeScript program over all of them. */
function declaredNames(files: string[]): Map<string, string[]> {
  const program = ts.createProgram(files, {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2023,
    noEmit: true,
    skipLibCheck: true,
    types: ["node"],
  });
  const checker = program.getTypeChecker();
  const out = new Map<string, string[]>();
  for (const file of files) {
    const source = program.getSourceFile(file);
    const symbol = source && checker.getSymbolAtLocation(source);
    if (!symbol) throw new Error(`${path.relative(root, file)}: not a module`);
    out.set(
      file,
      checker
        .getExportsOfModule(symbol)
        .map((s) => s.getName())
        .sort(),
    );
  }
  return out;
}

/**
 * The most public names (values and types together) an entry may export: a small surface, each name
 * with a reason a user can see. Deprecated aliases count until they are removed.
 */
const NAME_LIMITS: Record<string, number> = { ".": 100, "./durable": 90, "./workflow": 50, "./testing": 32 };

describe("entry point export names", () => {
  const missing = entries.flatMap((e) => [e.js, e.dts]).filter((f) => !existsSync(f));
  let declared: Map<string, string[]> | undefined;
  const names = (dts: string) => {
    declared ??= declaredNames(entries.map((e) => e.dts));
    return declared.get(dts) ?? [];
  };

  it("the built entries exist (npm run build)", () => {
    expect(missing.map((f) => path.relative(root, f))).toEqual([]);
  });

  for (const { subpath, js, dts } of entries) {
    it(`${subpath} exports what the snapshot lists`, async (ctx) => {
      if (missing.length > 0) ctx.skip("run npm run build first");
      const values = Object.keys((await import(pathToFileURL(js).href)) as object).sort();
      const all = names(dts);
      // The declarations describe the module: every runtime export is declared.
      expect(values.filter((v) => !all.includes(v))).toEqual([]);
      expect({ values, types: all.filter((n) => !values.includes(n)) }).toMatchSnapshot();
    });
  }

  for (const [subpath, limit] of Object.entries(NAME_LIMITS)) {
    it(`${subpath} exports at most ${limit} names`, (ctx) => {
      const entry = entries.find((e) => e.subpath === subpath);
      if (!entry) throw new Error(`no entry ${subpath} in package.json`);
      if (missing.length > 0) ctx.skip("run npm run build first");
      expect(names(entry.dts).length).toBeLessThanOrEqual(limit);
    });
  }
});
