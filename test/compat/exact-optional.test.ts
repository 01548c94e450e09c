/**
 * The library's declarations under a user's `exactOptionalPropertyTypes: true` (with
 * `noUncheckedIndexedAccess`): every built-in backend is a `StateBackend` (`createChatStore({ store: new
 * SQLiteBackend(…) })`), an optional option passed as `undefined` (`hot: url ? new RedisHotTier(…) : undefined`)
 * and `ctx.interrupt({ payload: s.sharedMemory.plan })` compile. The declarations are emitted from src into a
 * scratch package `dumplings-ai` (its package.json's exports) and test/compat/exact-optional/consumer.ts is
 * typechecked against them with that flag, as an application that installed the package would be (its own
 * package.json, so `dumplings-ai` is the scratch package, not the repository's self-reference to dist/).
 */
import { execFile } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "../..");
const tsc = path.join(root, "node_modules/typescript/bin/tsc");
// Under the repository's node_modules, so the declarations' own imports (ai, zod, pg…) resolve.
mkdirSync(path.join(root, "node_modules/.cache"), { recursive: true });
const dir = mkdtempSync(path.join(root, "node_modules/.cache/dumplings-eopt-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("exactOptionalPropertyTypes", () => {
  it("a program using the backends, CheckpointStore and interrupt typechecks with the flag on", async () => {
    const pkg = path.join(dir, "node_modules/dumplings-ai");
    mkdirSync(pkg, { recursive: true });
    copyFileSync(path.join(root, "package.json"), path.join(pkg, "package.json"));
    await run(
      process.execPath,
      [
        tsc,
        "-p",
        "tsconfig.build.json",
        "--emitDeclarationOnly",
        "--declarationMap",
        "false",
        "--sourceMap",
        "false",
        "--outDir",
        path.join(pkg, "dist"),
      ],
      { cwd: root, timeout: 240_000 },
    );
    for (const file of ["consumer.ts", "tsconfig.json", "package.json"]) {
      copyFileSync(path.join(root, "test/compat/exact-optional", file), path.join(dir, file));
    }
    const checked = await run(process.execPath, [tsc, "-p", path.join(dir, "tsconfig.json")], {
      cwd: dir,
      timeout: 120_000,
    }).then(
      () => "",
      (error: { stdout?: string }) => error.stdout ?? String(error),
    );
    expect(checked).toBe("");
  }, 360_000);
});
