/**
 * The provider packages are optional peers, imported when an agent first
 * builds a model: a missing one is a `MissingPeerError`, one whose model
 * specification the installed `ai` cannot call is a `ProviderVersionError`,
 * both naming the install command for the installed `ai` major, before any
 * request is sent. (test/compat/fresh-app-providers.test.ts runs the same
 * errors with real packages in fresh applications.)
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import {
  assertProviderFits,
  createLanguageModel,
  loadProvider,
  type ProviderPackage,
  ProviderVersionError,
  providerInstallHint,
} from "../../src/agent/model.js";
import { DumplingsError, MissingPeerError } from "../../src/core/errors.js";

const aiVersion = (createRequire(import.meta.url)("ai/package.json") as { version: string }).version;
const settings = { apiProvider: "http://127.0.0.1:9/v1", modelName: "m", apiKeyEnv: "" };

/** A provider module whose models implement specification `spec`. */
function fakeProvider(spec: string) {
  const model = (modelId: string) => ({ specificationVersion: spec, provider: "fake", modelId });
  return async () => ({
    createOpenAICompatible: () => ({ chatModel: model }),
    createAnthropic: () => model,
  });
}

/** What Node's ESM loader throws for a package that is not installed. */
function notInstalled(name: ProviderPackage) {
  return async () => {
    throw Object.assign(new Error(`Cannot find package '${name}' imported from /app/node_modules/dumplings-ai/dist`), {
      code: "ERR_MODULE_NOT_FOUND",
    });
  };
}

describe("provider install hints per ai major", () => {
  it("ai@6 ↔ anthropic@3 / openai-compatible@2; ai@7 ↔ anthropic@4 / openai-compatible@3", () => {
    expect(providerInstallHint("@ai-sdk/anthropic", "6.0.326")).toBe("npm i @ai-sdk/anthropic@3");
    expect(providerInstallHint("@ai-sdk/openai-compatible", "6.0.0")).toBe("npm i @ai-sdk/openai-compatible@2");
    expect(providerInstallHint("@ai-sdk/anthropic", "7.0.173")).toBe("npm i @ai-sdk/anthropic@4");
    expect(providerInstallHint("@ai-sdk/openai-compatible", "7.1.0")).toBe("npm i @ai-sdk/openai-compatible@3");
    expect(providerInstallHint("@ai-sdk/anthropic", undefined)).toBe("npm i @ai-sdk/anthropic");
  });

  it("the majors named match the packages this repository tests with (ai@6 here, ai@7 in compat/ai7)", () => {
    const require = createRequire(import.meta.url);
    const major = (p: string) => (require(p) as { version: string }).version.split(".")[0];
    for (const name of ["@ai-sdk/anthropic", "@ai-sdk/openai-compatible"] as const) {
      expect(providerInstallHint(name, aiVersion)).toBe(`npm i ${name}@${major(`${name}/package.json`)}`);
    }
    const ai7 = JSON.parse(readFileSync(new URL("../../compat/ai7/package.json", import.meta.url), "utf8")) as {
      dependencies: Record<string, string>;
    };
    for (const name of ["@ai-sdk/anthropic", "@ai-sdk/openai-compatible"] as const) {
      expect(providerInstallHint(name, ai7.dependencies.ai as string)).toBe(
        `npm i ${name}@${(ai7.dependencies[name] as string).split(".")[0]}`,
      );
    }
  });
});

describe("assertProviderFits", () => {
  it("ai@6 calls v2 and v3; ai@7 calls v2 to v4", () => {
    expect(() => assertProviderFits("@ai-sdk/anthropic", "v3", "6.0.326")).not.toThrow();
    expect(() => assertProviderFits("@ai-sdk/anthropic", "v2", "6.0.326")).not.toThrow();
    expect(() => assertProviderFits("@ai-sdk/anthropic", "v4", "7.0.173")).not.toThrow();
    expect(() => assertProviderFits("@ai-sdk/anthropic", "v3", "7.0.173")).not.toThrow();
  });

  it("a v4 provider beside ai@6 is a ProviderVersionError naming both versions and the fix", () => {
    let error: unknown;
    try {
      assertProviderFits("@ai-sdk/openai-compatible", "v4", "6.0.326", "3.0.92");
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ProviderVersionError);
    expect(error).toBeInstanceOf(DumplingsError);
    const e = error as ProviderVersionError;
    expect(e.code).toBe("PROVIDER_VERSION");
    expect(e).toMatchObject({
      packageName: "@ai-sdk/openai-compatible",
      providerVersion: "3.0.92",
      specificationVersion: "v4",
      aiVersion: "6.0.326",
      fix: "npm i @ai-sdk/openai-compatible@2",
    });
    expect(e.message).toContain("@ai-sdk/openai-compatible@3.0.92 implements model specification v4");
    expect(e.message).toContain("ai@6.0.326 cannot call (it calls v2, v3)");
    expect(e.message).toContain("npm i @ai-sdk/openai-compatible@2");
  });

  it("a v5 provider beside ai@7 names the provider made for ai@7", () => {
    expect(() => assertProviderFits("@ai-sdk/anthropic", "v5", "7.0.0")).toThrow(/npm i @ai-sdk\/anthropic@4/);
  });
});

describe("createLanguageModel loads the provider when it builds a model", () => {
  it("builds the real providers of this repository (ai@6, spec v3)", async () => {
    const openai = (await createLanguageModel(settings, "openai")) as { specificationVersion: string };
    const anthropic = (await createLanguageModel(settings, "anthropic")) as { specificationVersion: string };
    expect(openai.specificationVersion).toBe("v3");
    expect(anthropic.specificationVersion).toBe("v3");
  });

  it("a provider whose specification the installed ai cannot call is refused before any request", async () => {
    const major = aiVersion.split(".")[0];
    const wrong = `v${Number(major) - 2}`; // one specification newer than this ai calls
    await expect(createLanguageModel(settings, "openai", {}, fakeProvider(wrong))).rejects.toMatchObject({
      code: "PROVIDER_VERSION",
      specificationVersion: wrong,
      aiVersion,
      fix: providerInstallHint("@ai-sdk/openai-compatible", aiVersion),
    });
    await expect(createLanguageModel(settings, "anthropic", {}, fakeProvider(wrong))).rejects.toBeInstanceOf(
      ProviderVersionError,
    );
    await expect(createLanguageModel(settings, "openai", {}, fakeProvider("v3"))).resolves.toMatchObject({
      specificationVersion: "v3",
    });
  });

  it("a provider that is not installed is a MissingPeerError naming the install command", async () => {
    const error = await createLanguageModel(settings, "anthropic", {}, notInstalled("@ai-sdk/anthropic")).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(MissingPeerError);
    expect(error).toMatchObject({
      code: "MISSING_PEER",
      package: "@ai-sdk/anthropic",
      install: providerInstallHint("@ai-sdk/anthropic", aiVersion),
    });
    expect((error as Error).message).toContain(`${providerInstallHint("@ai-sdk/anthropic", aiVersion)}`);
    expect((error as Error).cause).toMatchObject({ code: "ERR_MODULE_NOT_FOUND" });
  });

  it("another package missing inside the provider, or another failure, is not mistaken for it", async () => {
    const inner = async () => {
      throw Object.assign(new Error("Cannot find package '@ai-sdk/provider-utils' imported from /x"), {
        code: "ERR_MODULE_NOT_FOUND",
      });
    };
    await expect(loadProvider("@ai-sdk/openai-compatible", inner)).rejects.not.toBeInstanceOf(MissingPeerError);
    await expect(
      loadProvider("@ai-sdk/openai-compatible", async () => {
        throw new SyntaxError("broken");
      }),
    ).rejects.toThrow("broken");
  });
});
