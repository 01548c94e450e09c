/**
 * A Redis write that reaches the server after its deadline (a huge message, a slow link) is refused by the
 * script and not applied; the error says which option bounds it (`commandTimeoutMs`) and its value, so a
 * user with large messages knows what to raise. The deadline is put in the past by giving the backend a
 * server-clock offset an hour behind (no timing in the test).
 */
import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { RedisBackend } from "../../src/backends/redis.js";
import { BackendError } from "../../src/core/errors.js";
import { makeState } from "../../src/testing/states.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const skip = await redisSkipReason();

describe.skipIf(!!skip)(`redis late write${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("names commandTimeoutMs and applies nothing", async () => {
    const backend = new RedisBackend({ url: REDIS_URL, keyPrefix: `late-${randomUUID()}:`, commandTimeoutMs: 2500 });
    try {
      const first = makeState([{ role: "user", content: "one" }], { name: "late" });
      await backend.write("k", first);
      // The server clock as the backend believes it: an hour behind, so the write's deadline has passed.
      (backend as unknown as { clockOffsetMs: number }).clockOffsetMs = -3_600_000;
      const second = makeState(
        [
          { role: "user", content: "one" },
          { role: "user", content: "two" },
        ],
        { name: "late" },
      );
      const error = await backend.write("k", second).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(BackendError);
      expect((error as Error).message).toMatch(/after its deadline .*commandTimeoutMs.*2500 ms.*not applied/);
      expect((await backend.read("k"))?.state.history).toEqual(first.history);
    } finally {
      await backend.close();
    }
  });
});
