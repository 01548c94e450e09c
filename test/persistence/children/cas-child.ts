/**
 * Child process for the two-writer test: loads one SQLite session, appends
 * its own messages one by one with a save after each, and on a
 * ConflictError reloads the session and retries the message. Prints
 * `{ conflicts }` as JSON.
 */
import { SQLiteBackend } from "../../../src/backends/sqlite.js";
import { type BaseAgent, ConflictError, loadState } from "../../../src/index.js";

const [dbPath, key, who, countText] = process.argv.slice(2) as [string, string, string, string];
const backend = new SQLiteBackend({ dbPath });
let agent: BaseAgent = await loadState(key, { backend });
let conflicts = 0;
for (let i = 0; i < Number(countText); i++) {
  const message = { role: "user" as const, content: `${who}-${i}` };
  for (;;) {
    agent.history.push(message);
    try {
      await agent.saveState();
      break;
    } catch (e) {
      if (!(e instanceof ConflictError)) throw e;
      conflicts++;
      agent = await loadState(key, { backend });
    }
  }
}
backend.close();
process.stdout.write(`${JSON.stringify({ conflicts })}\n`);
