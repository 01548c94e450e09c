// Loaded with `node --import ./compat/ai7/hooks.mjs` (Node >= 22.15): the
// packages a user of dumplings-ai brings (`ai`, `@ai-sdk/*`) and the native
// better-sqlite3 resolve from this folder (ai@7, built for Node 22) instead of
// the repository's node_modules (ai@6, Node 20), for `import` and `require`
// alike. Everything else, dumplings-ai's dist included, resolves as usual: the
// same situation as an application that installed ai@7 beside dumplings-ai.
import { createRequire, registerHooks } from "node:module";
import { pathToFileURL } from "node:url";

const here = new URL("./package.json", import.meta.url).href;
const requireHere = createRequire(here);
const redirected = /^(ai|better-sqlite3|@ai-sdk\/[^/]+)(\/.*)?$/;

registerHooks({
  resolve(specifier, context, nextResolve) {
    if (!redirected.test(specifier)) return nextResolve(specifier, context);
    if (context.conditions?.includes("import")) return nextResolve(specifier, { ...context, parentURL: here });
    // require(): Node resolves a CommonJS request from the requiring file's folder
    // whatever parentURL says, so answer with the file found from here
    return { url: pathToFileURL(requireHere.resolve(specifier)).href, format: "commonjs", shortCircuit: true };
  },
});
