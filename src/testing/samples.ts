/**
 * Real recorded agent conversations for tests, benchmarks and demos.
 *
 * Reads the subset bundled in the package (`data/trajectories/`) and, when it
 * is present, the full shared data set beside the project (`../shared/data/trajectories`,
 * or the directory named by `DUMPLINGS_TRAJECTORIES_DIR`).
 *
 * @module
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { Message, Protocol } from "../core/messages.js";

import { checkOptions, optionKeys } from "../core/options.js";

/** The keys of `loadSampleConversations`'s options: any other is an `InvalidOptionError`. */
const SAMPLE_OPTIONS = optionKeys<{ source?: unknown; protocol?: unknown }>({ source: true, protocol: true });

/** One recorded conversation. */
export interface SampleConversation {
  /** File stem, e.g. `taubench-airline-gpt-4o-task00-trial0` or `spotter-short.anthropic`. */
  id: string;
  /** `openai` for `*.jsonl`, `anthropic` for `*.anthropic.jsonl`. */
  protocol: Protocol;
  /** The messages, in order. */
  messages: Message[];
  /** Size of the source file in bytes. */
  bytes: number;
  /** Absolute path of the source file. */
  file: string;
}

/** Directory of the conversations bundled with the package. */
export const BUNDLED_TRAJECTORIES_DIR = fileURLToPath(new URL("../../data/trajectories/", import.meta.url));

/** Directory of the full shared data set, when it exists beside the project (else undefined). */
export function sharedTrajectoriesDir(): string | undefined {
  const candidates = [
    process.env.DUMPLINGS_TRAJECTORIES_DIR,
    path.resolve(BUNDLED_TRAJECTORIES_DIR, "../../../shared/data/trajectories"),
    path.resolve(process.cwd(), "../shared/data/trajectories"),
  ];
  return candidates.find((d): d is string => !!d && existsSync(d));
}

/**
 * Reads one JSONL conversation file.
 *
 * @param file - path of a `*.jsonl` file (one JSON message per line)
 * @returns the conversation
 * @throws {Error} when a line is not JSON (with the file and line number)
 */
export function readConversation(file: string): SampleConversation {
  const text = readFileSync(file, "utf8");
  const messages: Message[] = [];
  text.split("\n").forEach((line, i) => {
    if (line.trim() === "") return;
    try {
      messages.push(JSON.parse(line) as Message);
    } catch (e) {
      throw new Error(`${file}:${i + 1}: not JSON: ${(e as Error).message}`);
    }
  });
  const base = path.basename(file, ".jsonl");
  return {
    id: base,
    protocol: base.endsWith(".anthropic") ? "anthropic" : "openai",
    messages,
    bytes: Buffer.byteLength(text),
    file,
  };
}

/**
 * Loads recorded conversations.
 *
 * @param options - `source`: `"bundled"` (default), `"shared"` (the full set, when present,
 *   else the bundled one) or `"all"` (both, de-duplicated by id); `protocol` to keep one protocol only
 * @returns conversations sorted by id
 */
export function loadSampleConversations(
  options: { source?: "bundled" | "shared" | "all"; protocol?: Protocol } = {},
): SampleConversation[] {
  checkOptions("loadSampleConversations", options, SAMPLE_OPTIONS);
  const source = options.source ?? "bundled";
  const dirs: string[] = [];
  const shared = sharedTrajectoriesDir();
  if (source === "bundled" || source === "all" || !shared) dirs.push(BUNDLED_TRAJECTORIES_DIR);
  if ((source === "shared" || source === "all") && shared) dirs.push(shared);
  const byId = new Map<string, SampleConversation>();
  for (const dir of dirs) {
    for (const name of readdirSync(dir)) {
      if (!name.endsWith(".jsonl")) continue;
      const conv = readConversation(path.join(dir, name));
      if (options.protocol && conv.protocol !== options.protocol) continue;
      byId.set(conv.id, conv);
    }
  }
  return [...byId.values()].sort((a, b) => a.id.localeCompare(b.id));
}
