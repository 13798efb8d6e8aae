#!/usr/bin/env bash
# Export the quickstart model, write the Markdown summary and JUnit XML, and fail (exit 1) when parity
# fails or any metric regressed against the committed baseline report. Used by parity-gate.yml; runs
# the same locally:  PYTHON=.venv/bin/python EDGE_EXPORT=.venv/bin/edge-export bash examples/ci/parity_gate.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
PYTHON="${PYTHON:-python}"
EDGE_EXPORT="${EDGE_EXPORT:-edge-export}"
OUT_DIR="${OUT_DIR:-reports}"
BASELINE="${BASELINE:-$here/baseline.report.json}"

mkdir -p "$OUT_DIR"
"$PYTHON" "$root/examples/quickstart/make_model.py"

status=0
"$EDGE_EXPORT" "$root/examples/quickstart/cnn.pt2" --channels-last \
  -o "$OUT_DIR/cnn.tflite" --junit "$OUT_DIR/parity.xml" --baseline "$BASELINE" || status=$?

# Publish the summary whatever the verdict (exit 1 still writes the report).
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$OUT_DIR/cnn.report.md" ]; then
  cat "$OUT_DIR/cnn.report.md" >> "$GITHUB_STEP_SUMMARY"
fi
exit "$status"
