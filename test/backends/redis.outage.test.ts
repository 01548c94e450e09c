/**
 * pb-19 (ioredis#285): a dead or paused Redis must give a typed BackendError
 * within a bound, never a hang; a save reported as failed must not land later;
 * the backend recovers when Redis comes back.
 *
 * Uses a port nothing listens on, and a real `redis-server` this test starts
 * on a free port, pauses (SIGSTOP), resumes and kills (SIGKILL). Bounds are
 * generous (10 s) and only detect a hang; speed belongs in the bench.
 */
import { type ChildProcess, execFileSync } from "node:child_process";
import { afterAll, describe, expect, it } from "vitest";
import { RedisBackend } from "../../src/backends/redis.js";
import { BackendError, StateNotFoundError } from "../../src/core/errors.js";
import { makeState } from "../../src/testing/states.js";
import { freePort, startRedis as startPrivateRedis } from "../helpers/redis-server.js";

const HANG_BOUND_MS = 10_000;

function hasRedisServer(): boolean {
  try {
    execFileSync("redis-server", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}
const noServerBinary = hasRedisServer() ? undefined : "redis-server is not installed";
if (noServerBinary && process.env.DUMPLINGS_REQUIRE_SERVICES === "1") {
  throw new Error(`${noServerBinary} and DUMPLINGS_REQUIRE_SERVICES=1`);
}

/** A private redis-server on `port` (this test pauses and kills it). */
async function startRedis(port: number): Promise<ChildProcess> {
  return (await startPrivateRedis(port)).process;
}

/** Runs `fn`, expecting a BackendError within the hang bound. */
async function failsFast(fn: () => Promise<unknown>): Promise<BackendError> {
  const started = Date.now();
  let error: unknown;
  try {
    await fn();
  } catch (e) {
    error = e;
  }
  const elapsed = Date.now() - started;
  expect(error).toBeInstanceOf(BackendError);
  expect(elapsed, "a dead Redis must not hang the caller").toBeLessThan(HANG_BOUND_MS);
  return error as BackendError;
}

const state = (v: number) => makeState([{ role: "user", content: `v${v}` }], { fields: { v } });

describe("redis: nothing listens on the port (pb-19)", () => {
  it("save, load, delete, listKeys and iterHistory reject with BackendError, never hang", async () => {
    const port = await freePort();
    const backend = new RedisBackend({
      url: `redis://127.0.0.1:${port}`,
      connectTimeoutMs: 500,
      commandTimeoutMs: 500,
    });
    try {
      const e = await failsFast(() => backend.save("t19", state(2)));
      expect(e.key).toBe("t19");
      expect(e.backend).toBe("redis");
      expect(e.message).toContain('cannot save "t19"');
      await failsFast(() => backend.load("t19"));
      await failsFast(() => backend.delete("t19"));
      await failsFast(() => backend.listKeys());
      await failsFast(async () => {
        for await (const _ of backend.iterHistory("t19")) {
          // nothing
        }
      });
      // Many failing calls at once all settle, each with the typed error.
      const results = await Promise.allSettled(
        Array.from({ length: 200 }, (_, i) => backend.save(`t19-${i}`, state(i))),
      );
      expect(results.every((r) => r.status === "rejected" && r.reason instanceof BackendError)).toBe(true);
      // Known down, calls fail at once: 10,000 saves one after the other settle (no queue, no hang).
      const started = Date.now();
      let failed = 0;
      for (let i = 0; i < 10_000; i++) {
        try {
          await backend.save(`t19-${i}`, state(i));
        } catch (e) {
          if (e instanceof BackendError) failed++;
        }
      }
      expect(failed).toBe(10_000);
      expect(Date.now() - started, "10,000 saves to a known-dead Redis must not hang").toBeLessThan(HANG_BOUND_MS * 3);
    } finally {
      await backend.close();
    }
  });
});

describe.skipIf(!!noServerBinary)(
  `redis: a real redis-server paused, killed and restarted (pb-19)${noServerBinary ? ` (skipped: ${noServerBinary})` : ""}`,
  () => {
    const servers: ChildProcess[] = [];
    afterAll(() => {
      for (const s of servers) {
        s.kill("SIGCONT");
        s.kill("SIGKILL");
      }
    });

    it("fails typed and bounded while down, never lands a failed save, and recovers", async () => {
      const port = await freePort();
      let server = await startRedis(port);
      servers.push(server);
      const backend = new RedisBackend({
        url: `redis://127.0.0.1:${port}`,
        keyPrefix: "pb19:",
        connectTimeoutMs: 1000,
        commandTimeoutMs: 1000,
      });
      try {
        await backend.save("t19", state(1));
        expect((await backend.load("t19")).state.fields).toEqual({ v: 1 });

        // Paused: the connection is open but nothing answers. Writes time out...
        server.kill("SIGSTOP");
        await failsFast(() => backend.save("t19", state(2)));
        const paused = await Promise.allSettled(
          Array.from({ length: 20 }, (_, i) => backend.save(`t19-${i}`, state(i))),
        );
        expect(paused.every((r) => r.status === "rejected" && r.reason instanceof BackendError)).toBe(true);
        await failsFast(() => backend.load("t19"));
        // ...and when Redis resumes and runs the queued scripts, they see their deadline passed.
        server.kill("SIGCONT");
        expect((await backend.load("t19")).state.fields).toEqual({ v: 1 });
        expect((await backend.listKeys()).sort()).toEqual(["t19"]);
        for (let i = 0; i < 20; i++) await expect(backend.load(`t19-${i}`)).rejects.toBeInstanceOf(StateNotFoundError);

        // Killed: connection refused while reconnecting.
        server.kill("SIGKILL");
        await new Promise((r) => server.once("exit", r));
        await failsFast(() => backend.save("t19", state(3)));
        await failsFast(() => backend.load("t19"));

        // Back up (empty: no persistence): the same backend instance works again.
        server = await startRedis(port);
        servers.push(server);
        let recovered = false;
        for (let i = 0; i < 50 && !recovered; i++) {
          try {
            await backend.save("t19", state(4));
            recovered = true;
          } catch (e) {
            expect(e).toBeInstanceOf(BackendError);
            await new Promise((r) => setTimeout(r, 200));
          }
        }
        expect(recovered).toBe(true);
        expect((await backend.load("t19")).state.fields).toEqual({ v: 4 });
      } finally {
        await backend.close();
      }
    });
  },
);
