#!/usr/bin/env bash
# Build plotly.js with only the trace types the app draws into OUT (scripts/setup.sh passes the path
# dash_app/plotly_bundle.py looks in): npm's plotly.js package of the version the installed plotly package ships,
# bundled by esbuild with the settings of plotly.js's own esbuild-config.js, minified, under an opening line that
# names the version and the traces (dash_app/plotly_bundle.py: banner(); TRACES lists them) and then plotly.js's own
# license (its package's LICENSE, MIT). About 30 s and 60 MB of npm packages, in a staging folder removed afterwards.
#   bash scripts/build_plotly_bundle.sh OUT
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: bash scripts/build_plotly_bundle.sh OUT" >&2; exit 2; }
cd "$(dirname "$0")/.."
OUT=$(realpath -m "$1")
PYTHON=.venv/bin/python
VERSION=$("$PYTHON" -c 'from plotly.offline import get_plotlyjs_version as v; print(v())')
REQUIRES=$("$PYTHON" -c 'from dash_app.plotly_bundle import TRACES; print(", ".join(f"require(\"plotly.js/lib/{t}\")" for t in TRACES))')
STAGING=$(mktemp -d)
trap 'rm -rf "$STAGING"' EXIT
"$PYTHON" -c 'from dash_app.plotly_bundle import banner; print(banner(), end="")' > "$STAGING/banner.txt"
cd "$STAGING"
npm pack --silent "plotly.js@$VERSION" >/dev/null
echo '{"private": true}' > package.json
# plotly.js with its own dependencies, and the build tools at the versions plotly.js builds with
npm install --silent --no-audit --no-fund --ignore-scripts "./plotly.js-$VERSION.tgz" esbuild@0.28.2 \
  esbuild-plugin-glsl@1.4.2 esbuild-plugin-inline-css@0.0.1 esbuild-plugin-environment@0.5.0 stream-browserify@3.0.0 buffer@6.0.3
{ printf 'plotly.js, its license:\n'; cat node_modules/plotly.js/LICENSE; printf '*/\n'; } >> banner.txt
cat > entry.js <<JS
var Plotly = require("plotly.js/lib/core");
Plotly.register([$REQUIRES]);
module.exports = Plotly;
JS
cat > build.js <<'JS'
const fs = require("fs");
const esbuild = require("esbuild");
const { environmentPlugin } = require("esbuild-plugin-environment");
const { glsl } = require("esbuild-plugin-glsl");
const InlineCSSPlugin = require("esbuild-plugin-inline-css");
esbuild.build({
  entryPoints: ["entry.js"], outfile: process.argv[2], format: "iife", globalName: "Plotly", bundle: true,
  minify: true, legalComments: "none", banner: { js: fs.readFileSync("banner.txt", "utf8") },
  plugins: [InlineCSSPlugin(), glsl({ minify: true }), environmentPlugin({ NODE_DEBUG: false })],
  alias: { regl: "@plotly/regl", stream: "stream-browserify" },
  define: { global: "window", "define.amd": "false" }, target: "es2016", logLevel: "warning",
}).catch(() => process.exit(1));
JS
mkdir -p "$(dirname "$OUT")"
node build.js "$OUT.partial"
mv "$OUT.partial" "$OUT"
