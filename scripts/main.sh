#!/usr/bin/env bash
# The main job on the embedded default (local processes, no Docker):
# build .venv from the project's files, run the Part 5 experiment and its
# report, then bring up a local three-node cluster, run the cross-agent smoke
# test and the boundary experiment's default slice on the cluster's nodes
# (node processes a = origin, b = holder, c = witness), print the cost table
# (in-process vs across) with the custody row under it and write the figures,
# and tear the cluster down.
# Each part's wall time is printed as it ends (docs/cluster.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/_venv.sh
. scripts/_venv.sh
ensure_venv ""   # installs only on first use or when pyproject.toml changed
P=.venv/bin/provnet
part() { local name=$1 t0=$SECONDS; shift; "$@"; echo "main: $name done in $((SECONDS - t0)) s" >&2; }
part "experiment run" $P experiment run --out results --no-progress
part "experiment report" $P experiment report --out results
# Set before 'up': a start that fails half-way still has its nodes stopped.
trap '$P cluster down' EXIT
part "cluster up" $P cluster up
$P cluster status
part "cluster smoke" $P cluster smoke
part "boundary on the cluster" $P experiment boundary --cluster --out results-boundary --no-progress
# One more cost-table row: rehydration availability with one custodian next to
# none, parties departing for good with p = 0.2 (in-process nodes; docs/custody.md).
part "custody row" $P experiment custody --k 0,1 --p 0.2 --departures independent --trials 64 \
    --out results-custody --no-progress --cost-line
echo "figures: results-boundary/boundary_costs.png results-boundary/boundary_cost_vs_flips.png results-boundary/boundary_bytes_by_cadence.png"
