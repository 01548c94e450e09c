/**
 * Child process for the env-var tests: imports the package fresh (so the
 * DUMPLINGS_PERSISTENCE* variables are read at import), reports the settings,
 * and auto-saves one agent with them. Prints one JSON line on stdout.
 */

import { builtinBackendSettings } from "../../../src/backends/registry.js";
import { autoSave, BaseAgent, isEnabled } from "../../../src/index.js";
import { persistenceSettings, resolveBackend } from "../../../src/persistence/config.js";

const out: Record<string, unknown> = {};
// autoSave first: it never throws, whatever the configuration.
{
  const agent = new BaseAgent({
    name: process.env.CHILD_AGENT_NAME ?? "child",
    history: [{ role: "user", content: "from the child" }],
  });
  agent.on("persistError", (e: Error & { code?: string }) => {
    out.persistError = e.code ?? e.message;
  });
  out.saved = await autoSave(agent);
  out.uuid = agent.uuid;
}
try {
  out.enabled = isEnabled();
  const s = persistenceSettings();
  out.keyStrategy = s.keyStrategy;
  out.backend = resolveBackend().name;
  out.builtin = builtinBackendSettings();
} catch (e) {
  out.error = { name: (e as Error).name, code: (e as { code?: string }).code, message: (e as Error).message };
}
process.stdout.write(`${JSON.stringify(out)}\n`);
