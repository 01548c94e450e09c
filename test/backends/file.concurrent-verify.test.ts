/**
 * Readers verify what they return (header_crc32, history_crc32) while another
 * process writes the same session: a header spanning pages (updated in place
 * through the journal), appends and whole-file writes. A reader that catches a
 * header half-way through an update reads again instead of reporting a false
 * FormatError; every load and every stream is exactly one saved state.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import type { Message } from "../../src/core/messages.js";
import { stateAt } from "../fixtures/crash/file-history.js";

const writer = fileURLToPath(new URL("../fixtures/crash/file-writer.ts", import.meta.url));
const dir = mkdtempSync(path.join(os.tmpdir(), "dumplings-file-verify-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it("loads and streams during another process's saves of a long header are always one saved state", async () => {
  const child = spawn(process.execPath, ["--import", "tsx", writer, dir, "k", "long"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let acks = 0;
  child.stdout.on("data", (d: Buffer) => {
    acks += String(d)
      .split("\n")
      .filter((l) => l.startsWith("ack")).length;
  });
  for (let i = 0; i < 1500 && acks < 2; i++) await new Promise((r) => setTimeout(r, 20));
  expect(acks).toBeGreaterThanOrEqual(2);
  const backend = new FileBackend({ baseDir: dir });
  const errors: string[] = [];
  let reads = 0;
  const until = Date.now() + 4000;
  while (Date.now() < until) {
    try {
      const state = await backend.load("k");
      expect(state).toEqual(stateAt(state.history.length, true));
      const streamed: Message[] = [];
      for await (const m of backend.iterHistory("k")) streamed.push(m);
      // the stream is one saved state too (possibly a later one than the load)
      expect(streamed.length).toBeGreaterThanOrEqual(state.history.length);
      expect(streamed).toEqual(stateAt(streamed.length, true).history);
      reads++;
    } catch (e) {
      errors.push(String((e as Error).message));
    }
  }
  child.kill("SIGKILL");
  expect(errors).toEqual([]);
  expect(reads).toBeGreaterThan(5);
  expect(acks).toBeGreaterThan(10);
}, 60_000);
