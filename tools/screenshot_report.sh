#!/usr/bin/env bash
# The README's picture of the report: headless Chromium (Debian's `chromium`) renders a report.html to a PNG.
#   tools/screenshot_report.sh [REPORT_HTML] [OUT_PNG]
# defaults: the reference run's report, rendered first with `ppo-trt report --run-dir nbs/_reference/hopper`.
set -euo pipefail
cd "$(dirname "$0")/.."
html=${1:-nbs/_reference/hopper/report.html}
out=${2:-nbs/images/report.png}
command -v chromium >/dev/null || { echo "needs Chromium: apt-get install -y chromium"; exit 2; }
[ -f "$html" ] || { echo "$html not found: ppo-trt report --run-dir $(dirname "$html")"; exit 2; }
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --disable-background-networking --no-first-run \
  --window-size=1400,2200 --screenshot="$out" "file://$(realpath "$html")" 2>/dev/null
echo "wrote $out"
