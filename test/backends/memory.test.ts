import * as vitest from "vitest";
import { MemoryBackend } from "../../src/backends/memory.js";
import { runBackendConformance } from "../../src/testing/index.js";

runBackendConformance("memory", () => new MemoryBackend(), { test: vitest });
