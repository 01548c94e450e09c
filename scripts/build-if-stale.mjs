#!/usr/bin/env node
/**
 * Rebuilds `dist/` only when it is stale: when a file under `src/` or a
 * tsconfig is newer than the oldest `.js` file in `dist/` (a build rewrites
 * every output, so an interrupted or partial build is stale too), or when
 * `dist/` is missing. The `npm run demo*` scripts run it first, so a demo
 * starts at once on an up-to-date build instead of running `tsc` every time.
 *
 * Usage: node scripts/build-if-stale.mjs   (exit code: tsc's, or 0 when fresh)
 */
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

const src = path.join(root, "src");
const dist = path.join(root, "dist");
const configs = ["tsconfig.json", "tsconfig.build.json", "package.json"].map((f) => path.join(root, f));

/** Whether the build is stale: a source or config newer than its output, or an output missing. */
function stale() {
  if (!existsSync(dist)) return "building dist/ (first run)…";
  const newestConfig = Math.max(...configs.filter(existsSync).map((f) => statSync(f).mtimeMs));
  for (const entry of readdirSync(src, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile() || !/\.(ts|mts)$/.test(entry.name) || entry.name.endsWith(".d.ts")) continue;
    const file = path.join(entry.parentPath ?? entry.path, entry.name);
    const out = path.join(dist, path.relative(src, file)).replace(/\.(m?)ts$/, ".$1js");
    if (!existsSync(out)) return `dist/ lacks ${path.relative(root, out)}: rebuilding…`;
    const built = statSync(out).mtimeMs;
    if (statSync(file).mtimeMs > built || newestConfig > built) {
      return `${path.relative(root, file)} changed since the last build: rebuilding dist/…`;
    }
  }
  return undefined;
}

const why = stale();
if (why === undefined) process.exit(0);
process.stderr.write(`${why}\n`);
const tsc = path.join(root, "node_modules", "typescript", "bin", "tsc");
const result = spawnSync(process.execPath, [tsc, "-p", path.join(root, "tsconfig.build.json")], {
  stdio: "inherit",
  cwd: root,
});
process.exit(result.status ?? 1);
