import { MemoryBackend } from "../../src/backends/memory.js";
import { runBackendConformance } from "../../src/testing/conformance.js";

runBackendConformance("memory", () => new MemoryBackend());
