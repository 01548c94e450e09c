/**
 * A custom backend's own not-found error — Node's `ENOENT` from reading a missing file, or an
 * error named `FileNotFoundError` as a port of the original design's Python backend throws — is
 * `STATE_NOT_FOUND` on every read path (`loadState`, `iterHistory`, `dumplings show`/`ls`/`rm`, the
 * inspector, the AI SDK chat store, the OpenAI Agents session), not `BACKEND_ERROR` or a raw error;
 * `deleteState` of such a key is `false`. Other errors of the backend stay `BACKEND_ERROR` (issue 25).
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { createChatStore } from "../../src/ai-sdk/chat-store.js";
import { BackendError, StateNotFoundError } from "../../src/core/errors.js";
import { BaseAgent, deleteState, iterHistory, loadState, saveState } from "../../src/index.js";
import { DumplingsSession } from "../../src/openai-agents/session.js";
import { createUiApp } from "../../src/ui/app.js";
import { ROOT, runCli } from "../cli/run-cli.js";
import { SeedFileBackend } from "../fixtures/backends/seed-file-backend.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-custom-not-found-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;
const freshDir = () => {
  const dir = path.join(tmp, `d${n++}`);
  mkdirSync(dir, { recursive: true });
  return dir;
};

async function caught(work: () => Promise<unknown>): Promise<unknown> {
  try {
    await work();
  } catch (e) {
    return e;
  }
  throw new Error("expected an error");
}

describe.each(["node", "python"] as const)("a custom backend whose missing key throws (%s style)", (style) => {
  const ownName = style === "node" ? "Error" : "FileNotFoundError";

  it("loadState and iterHistory: StateNotFoundError naming the key, the backend's error as cause", async () => {
    const backend = new SeedFileBackend(freshDir(), style);
    for (const read of [
      () => loadState("missing", { backend }),
      async () => {
        for await (const _ of iterHistory("missing", { backend })) {
          // nothing
        }
      },
    ]) {
      const e = await caught(read);
      expect(e).toBeInstanceOf(StateNotFoundError);
      expect(e).toMatchObject({ code: "STATE_NOT_FOUND", key: "missing", backend: "seedfile" });
      expect(((e as StateNotFoundError).cause as Error).name).toBe(ownName);
    }
    // a stored key still loads
    await saveState(new BaseAgent({ name: "here" }), "here", { backend });
    expect((await loadState("here", { backend })).name).toBe("here");
    // any other error of the backend is still a BackendError: a directory in place of the file (EISDIR)
    mkdirSync(path.join(backend.dir, "odd.json"));
    const odd = await caught(() => loadState("odd", { backend }));
    expect(odd).toBeInstanceOf(BackendError);
    expect(((odd as BackendError).cause as NodeJS.ErrnoException).code).toBe("EISDIR");
  });

  it("deleteState of a missing key is false, as the contract's own answer", async () => {
    const backend = new SeedFileBackend(freshDir(), style);
    expect(await deleteState("missing", { backend })).toBe(false);
  });

  it("the AI SDK chat store and the OpenAI Agents session read a missing key as nothing stored", async () => {
    const backend = new SeedFileBackend(freshDir(), style);
    expect(await createChatStore({ store: backend }).load("c1")).toBeUndefined();
    expect(await new DumplingsSession({ store: backend, sessionId: "s1" }).getItems()).toEqual([]);
  });
});

describe("the CLI and the inspector", () => {
  const tsx = pathToFileURL(path.join(ROOT, "node_modules", "tsx", "dist", "loader.mjs")).href;
  const fixture = pathToFileURL(path.join(ROOT, "test", "fixtures", "backends", "seed-file-backend.ts")).href;
  const cli = (dir: string, args: string[]) =>
    runCli([...args, "--backend", "seedfile"], {
      env: { NODE_OPTIONS: `--import=${tsx} --import=${fixture}`, SEED_BACKEND_DIR: dir },
      sources: true, // the fixture registers into the source modules: the CLI must run them, not dist/
    });

  it("dumplings show, ls and rm: STATE_NOT_FOUND (exit 3), a vanished key listed as unreadable", async () => {
    const dir = freshDir();
    await saveState(new BaseAgent({ name: "here" }), "here", { backend: new SeedFileBackend(dir) });
    const show = cli(dir, ["show", "missing"]);
    expect(show.stderr).toContain("STATE_NOT_FOUND");
    expect(show.code).toBe(3);
    const rm = cli(dir, ["rm", "missing"]);
    expect(rm.stderr).toContain("STATE_NOT_FOUND");
    expect(rm.code).toBe(3);
    // listed by the directory, gone when read: a dangling link
    symlinkSync(path.join(dir, "nowhere"), path.join(dir, "ghost.json"));
    const ls = cli(dir, ["ls", "--json"]);
    expect(ls.stderr).toContain("STATE_NOT_FOUND");
    expect(ls.code).toBe(6); // SESSIONS_UNREADABLE: every session is still listed
    const listed = JSON.parse(ls.stdout) as { sessions: { key: string; readError?: { code: string } }[] };
    expect(listed.sessions.map((s) => [s.key, s.readError?.code])).toEqual([
      ["ghost", "STATE_NOT_FOUND"],
      ["here", undefined],
    ]);
  });

  it("the inspector: a missing session is 404, a vanished one a row of the list", async () => {
    const dir = freshDir();
    const backend = new SeedFileBackend(dir, "python");
    await saveState(new BaseAgent({ name: "here" }), "here", { backend });
    symlinkSync(path.join(dir, "nowhere"), path.join(dir, "ghost.json"));
    const token = "t".repeat(32);
    const app = createUiApp(
      {
        sessions: { value: backend, label: "seedfile" },
        workflows: { label: "none", missing: "none" },
        journal: { label: "none", missing: "none" },
      },
      { token, port: () => 1 },
    );
    const headers = { host: "127.0.0.1:1", cookie: `dumplings_ui_1=${token}` };
    const page = await app.request("http://127.0.0.1:1/sessions/missing", { headers });
    expect(page.status).toBe(404);
    expect(await page.text()).toContain("STATE_NOT_FOUND");
    const list = await app.request("http://127.0.0.1:1/sessions", { headers });
    expect(list.status).toBe(200);
    expect(await list.text()).toMatch(/ghost<\/a><\/td><td[^>]*>unreadable: .*STATE_NOT_FOUND/);
  });
});
