/**
 * kill -9 in the middle of FileBackend saves: a real child process appends to
 * one session in a loop and is SIGKILLed at random moments, several rounds.
 * Afterwards the session is exactly the last acknowledged save or the one in
 * flight — header and history consistent, never torn — and the next save
 * works (repairing any uncommitted tail).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { decodeStateBytes } from "../../src/core/codec/bytes.js";
import { historyAt, stateAt } from "../fixtures/crash/file-history.js";

const child = fileURLToPath(new URL("../fixtures/crash/file-writer.ts", import.meta.url));
const dir = mkdtempSync(path.join(tmpdir(), "duas-file-crash-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs the writer until it has acknowledged `minAcks` saves plus a random extra delay, then SIGKILLs it. */
function runAndKill(
  key: string,
  mode: string,
  minAcks: number,
  extraMs: number,
): Promise<{ acked: number; modes: Set<string> }> {
  return new Promise((resolve, reject) => {
    const proc: ChildProcess = spawn(process.execPath, ["--import", "tsx", child, dir, key, mode], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let acked = 0;
    let seen = 0;
    let buffered = "";
    let stderr = "";
    const modes = new Set<string>();
    let timer: NodeJS.Timeout | undefined;
    proc.stdout?.on("data", (chunk: Buffer) => {
      buffered += chunk.toString("utf8");
      let nl = buffered.indexOf("\n");
      while (nl >= 0) {
        const [, n, , mode] = buffered.slice(0, nl).split(" ");
        acked = Number(n);
        if (mode) modes.add(mode);
        seen++;
        buffered = buffered.slice(nl + 1);
        nl = buffered.indexOf("\n");
      }
      if (seen >= minAcks && timer === undefined) timer = setTimeout(() => proc.kill("SIGKILL"), extraMs);
    });
    proc.stderr?.on("data", (c: Buffer) => {
      stderr += c.toString("utf8");
    });
    proc.on("error", reject);
    proc.on("exit", (code, signal) => {
      if (signal !== "SIGKILL") reject(new Error(`writer exited with ${code}/${signal}: ${stderr}`));
      else resolve({ acked, modes });
    });
  });
}

describe("file backend: kill -9 mid-save", () => {
  it.each([
    ["short", false],
    ["long", true],
  ])(
    "each round leaves the last acknowledged save or the one in flight (%s header), and saving goes on",
    async (mode, long) => {
      const key = `crash-${mode}`;
      const allModes = new Set<string>();
      let previous = 0;
      for (let round = 0; round < 3; round++) {
        const { acked, modes } = await runAndKill(key, mode, 15, Math.floor(Math.random() * 150));
        for (const m of modes) allModes.add(m);
        expect(acked).toBeGreaterThan(previous);
        const backend = new FileBackend({ baseDir: dir });
        const read = await backend.read(key);
        expect(read).toBeDefined();
        const n = read?.state.history.length ?? -1;
        expect([acked, acked + 1], `round ${round}: stored ${n}, acknowledged ${acked}`).toContain(n);
        // header and history belong to the same save: never torn
        expect(read?.state).toEqual(stateAt(n, long));
        expect(read?.state.state.fields).toEqual({ n });
        const streamed = [];
        for await (const m of backend.iterHistory(key)) streamed.push(m);
        expect(streamed).toEqual(historyAt(n));
        expect((await backend.readHeader(key))?.header.state.currentTaskId).toBe(stateAt(n, long).state.currentTaskId);
        previous = n;
        if (round === 2) {
          // a further save works (a new process: no cache) and leaves a strictly valid file
          const w = await backend.write(key, stateAt(n + 1, long), { expectedRevision: read?.revision, baseLength: n });
          expect(w.revision).toBe((read?.revision ?? 0) + 1);
          const bytes = readFileSync(path.join(dir, `${key}.duas`));
          expect(decodeStateBytes(bytes)).toEqual(stateAt(n + 1, long));
        }
      }
      expect(allModes.has("append")).toBe(true);
      expect(allModes.has("rewrite")).toBe(true);
    },
  );
});

describe("file backend: several processes, one key", () => {
  it("CAS appends from 3 processes never lose or duplicate a message", async () => {
    const script = fileURLToPath(new URL("../fixtures/crash/file-cas-writer.ts", import.meta.url));
    const key = "shared-session";
    const perChild = 25;
    const outputs = await Promise.all(
      ["a", "b", "c"].map(
        (id) =>
          new Promise<string>((resolve, reject) => {
            const proc = spawn(process.execPath, ["--import", "tsx", script, dir, key, id, String(perChild)], {
              stdio: ["ignore", "pipe", "pipe"],
            });
            let out = "";
            let err = "";
            proc.stdout?.on("data", (c: Buffer) => {
              out += c.toString();
            });
            proc.stderr?.on("data", (c: Buffer) => {
              err += c.toString();
            });
            proc.on("error", reject);
            proc.on("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`child ${id} failed: ${err}`))));
          }),
      ),
    );
    for (const out of outputs) expect(out).toMatch(/^done \d+\n$/);
    const read = await new FileBackend({ baseDir: dir }).read(key);
    const contents = read?.state.history.map((m) => m.content as string) ?? [];
    expect(contents).toHaveLength(3 * perChild);
    expect(new Set(contents).size).toBe(3 * perChild);
    for (const id of ["a", "b", "c"]) {
      // each writer's own messages are in its order
      const mine = contents.filter((c) => c.startsWith(`${id}-`));
      expect(mine).toEqual(Array.from({ length: perChild }, (_, j) => `${id}-${j}`));
    }
    expect(read?.revision).toBe(3 * perChild);
    expect(decodeStateBytes(readFileSync(path.join(dir, `${key}.duas`)))).toEqual(read?.state);
  });
});
