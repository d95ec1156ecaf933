#!/usr/bin/env bash
# The main job on the embedded default (local processes, no Docker):
# build .venv from the project's files, run the Part 5 experiment and its
# report, then bring up a local three-node cluster, run the cross-agent smoke
# test against it and tear it down again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
P=.venv/bin/provnet
$P experiment run --out results
$P experiment report --out results
# Set before 'up': a start that fails half-way still has its nodes stopped.
trap '$P cluster down' EXIT
$P cluster up
$P cluster status
$P cluster smoke
