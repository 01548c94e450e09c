/**
 * `DUMPLINGS_PERSISTENCE_BACKEND` naming a backend that is not registered: the call that uses the default
 * backend throws `UnknownBackendError` (code `UNKNOWN_BACKEND`, as before) whose message and `variable` name the
 * environment variable, so the user knows where "bogus" came from; the same in the CLI. A name given in code
 * or on the command line names no variable.
 */
import { afterEach, describe, expect, it } from "vitest";
import { BaseAgent, MemoryBackend, registerBackend, saveState, UnknownBackendError } from "../../src/index.js";
import { openBackendAsync } from "../../src/ops/backend.js";
import { loadEnvironmentConfig } from "../../src/persistence/config.js";
import { resetBackendRegistry } from "../../src/testing/index.js";

afterEach(() => {
  resetBackendRegistry();
  loadEnvironmentConfig({});
});

async function thrown(fn: () => unknown): Promise<unknown> {
  try {
    await fn();
  } catch (error) {
    return error;
  }
  return "did not throw";
}

describe("an unknown backend name in DUMPLINGS_PERSISTENCE_BACKEND", () => {
  it("saveState without { backend } names the variable", async () => {
    loadEnvironmentConfig({ DUMPLINGS_PERSISTENCE_BACKEND: "bogus" });
    const error = await thrown(() => saveState(new BaseAgent({ name: "e" }), "k"));
    expect(error).toBeInstanceOf(UnknownBackendError);
    expect(error).toMatchObject({
      code: "UNKNOWN_BACKEND",
      backendName: "bogus",
      variable: "DUMPLINGS_PERSISTENCE_BACKEND",
    });
    expect((error as Error).message).toMatch(
      /unknown backend "bogus" \(the value of the environment variable DUMPLINGS_PERSISTENCE_BACKEND\); known backends: .*file/,
    );
  });

  it("a name given in code names no variable; a name registered after import is used", async () => {
    const error = await thrown(() => saveState(new BaseAgent({ name: "e" }), "k", { backend: "bogus" }));
    expect(error).toBeInstanceOf(UnknownBackendError);
    expect((error as UnknownBackendError).variable).toBeUndefined();
    expect((error as Error).message).not.toContain("DUMPLINGS_PERSISTENCE_BACKEND");
    loadEnvironmentConfig({ DUMPLINGS_PERSISTENCE_BACKEND: "late" });
    const late = new MemoryBackend();
    registerBackend("late", late);
    await saveState(new BaseAgent({ name: "e" }), "k");
    expect(await late.listKeys()).toEqual(["k"]);
  });

  it("the CLI names the variable too, and not for --backend", async () => {
    const fromEnv = await thrown(() => openBackendAsync({}, { DUMPLINGS_PERSISTENCE_BACKEND: "bogus" }));
    expect(fromEnv).toBeInstanceOf(UnknownBackendError);
    expect((fromEnv as Error).message).toContain(
      "(the value of the environment variable DUMPLINGS_PERSISTENCE_BACKEND)",
    );
    await expect(openBackendAsync({ backend: "bogus" }, {})).rejects.toThrow(
      /^unknown backend "bogus"; known backends/,
    );
  });
});
