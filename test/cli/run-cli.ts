/**
 * Runs the real `dumplings` CLI (built, or `src/cli/index.ts` through tsx) as
 * a child process, so tests see exactly what a user sees: stdout, stderr, exit code.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/** Project root. */
export const ROOT = fileURLToPath(new URL("../../", import.meta.url));

function newestMtime(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile() && entry.name.endsWith(".ts")) {
      newest = Math.max(newest, statSync(path.join(entry.parentPath, entry.name)).mtimeMs);
    }
  }
  return newest;
}

/**
 * The node arguments that run a program of the package: its built
 * `dist/<name>.js` when that is newer than every source file (as after
 * `npm run build`, which `npm test` runs first: a plain `node` start, several
 * times faster), else `src/<name>.ts` through tsx. `DUMPLINGS_TEST_CLI=tsx|dist`
 * forces one.
 *
 * @param name - path below `src/` without extension, e.g. `cli/index`
 * @param forced - `tsx` or `dist` to choose (default: `DUMPLINGS_TEST_CLI`)
 */
export function programArgs(name: string, forced = process.env.DUMPLINGS_TEST_CLI): string[] {
  const built = path.join(ROOT, "dist", `${name}.js`);
  const useBuilt =
    forced === "dist" || (forced !== "tsx" && existsSync(built) && statSync(built).mtimeMs >= newestSourceMtime());
  // tsx by absolute URL: a test may run the CLI in a directory of its own, where `--import tsx` would not resolve
  const tsx = pathToFileURL(path.join(ROOT, "node_modules", "tsx", "dist", "loader.mjs")).href;
  return useBuilt ? [built] : ["--import", tsx, path.join(ROOT, "src", `${name}.ts`)];
}

let newestCache: number | undefined;
function newestSourceMtime(): number {
  newestCache ??= newestMtime(path.join(ROOT, "src"));
  return newestCache;
}
const COMMAND = programArgs("cli/index");

/** Output of one CLI run. */
export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `dumplings <args>`.
 *
 * @param args - command-line arguments
 * @param options - extra environment (the DUMPLINGS_* variables of the parent are removed first), cwd,
 *   `input`: what the command reads on stdin (default: nothing, stdin closed), `sources`: run `src/` through
 *   tsx even when `dist/` is built (a `--import` fixture that registers into the source modules needs it)
 */
export function runCli(
  args: string[],
  options: { env?: Record<string, string>; cwd?: string; input?: string | Buffer; sources?: boolean } = {},
): CliResult {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && !k.startsWith("DUMPLINGS_")) env[k] = v;
  }
  Object.assign(env, options.env ?? {});
  const command = options.sources ? programArgs("cli/index", "tsx") : COMMAND;
  const result = spawnSync(process.execPath, [...command, ...args], {
    cwd: options.cwd ?? ROOT,
    env,
    input: options.input ?? "",
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  if (result.error) throw result.error;
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

/**
 * Runs the CLI and parses its stdout as JSON, failing loudly on a non-zero exit.
 *
 * @param args - arguments (`--json` is added)
 * @param options - as {@link runCli}
 */
export function runJson<T = Record<string, unknown>>(
  args: string[],
  options: { env?: Record<string, string>; cwd?: string } = {},
): T {
  const r = runCli([...args, "--json"], options);
  if (r.code !== 0) throw new Error(`dumplings ${args.join(" ")} exited ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout) as T;
}
