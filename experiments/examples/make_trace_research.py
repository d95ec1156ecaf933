"""Regenerate ``trace-research.jsonl``: a support/research agent's log.

The log is synthetic but shaped like a real one — web fetches with a
verification flag, cache reads with an age, model calls that sometimes fall
back to a smaller model, tool calls with a status, merges of earlier
results, explicit decision records, and ops the event model does not know
(``user_message``, ``heartbeat``), which trace mode skips and counts.

    python experiments/examples/make_trace_research.py > experiments/examples/trace-research.jsonl
"""

from __future__ import annotations

import json
import random
import sys
from datetime import UTC, datetime, timedelta

STEPS = 400
SEED = 7


def main() -> None:
    rng = random.Random(SEED)
    start = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)
    created: list[int] = [1]
    lines: list[dict[str, object]] = [
        {
            "step": 1,
            "op": "fetch",
            "ts": start.isoformat().replace("+00:00", "Z"),
            "fields": {"url": "https://docs.example.org/kb/1", "verified": True, "status": 200},
        }
    ]
    for step in range(2, STEPS + 1):
        ts = (start + timedelta(seconds=7 * step)).isoformat().replace("+00:00", "Z")
        roll = rng.random()
        record: dict[str, object] = {"step": step, "ts": ts}
        if roll < 0.15:
            verified = rng.random() > 0.2
            record |= {
                "op": "fetch",
                "fields": {
                    "url": f"https://{'docs.example.org' if verified else 'forum.example.net'}"
                    f"/p/{rng.randrange(10_000)}",
                    "verified": verified,
                    "status": 200,
                },
            }
            created.append(step)
        elif roll < 0.33:
            record |= {
                "op": "cache_read",
                "fields": {
                    "key": f"kb:{rng.randrange(500)}",
                    "age_s": rng.choice([30, 600, 5400, 90000]),
                },
            }
        elif roll < 0.58:
            model = "primary-large" if rng.random() > 0.15 else "fallback-small"
            record |= {
                "op": "llm_call",
                "fields": {"model": model, "tokens": rng.randrange(200, 4000)},
            }
        elif roll < 0.78:
            status = rng.choices(["ok", "error", "timeout"], weights=[0.88, 0.07, 0.05])[0]
            record |= {
                "op": "tool_call",
                "fields": {
                    "tool": rng.choice(["search", "crm_lookup", "calculator"]),
                    "status": status,
                    "latency_ms": rng.randrange(20, 3000),
                },
            }
        elif roll < 0.84:
            record |= {
                "op": "db_query",
                "fields": {"table": "orders", "replica_lag_s": rng.choice([0, 2, 45])},
            }
        elif roll < 0.90 and len(created) > 1:
            picks = rng.sample(created[-6:], k=min(2, len(created[-6:])))
            record |= {
                "op": "merge",
                "fields": {"reason": "combine sources"},
                "merge_with": sorted(picks),
            }
            created.append(step)
        elif roll < 0.95:
            record |= {"op": rng.choice(["user_message", "heartbeat"]), "fields": {}}
        else:
            record |= {"op": "decision", "fields": {"action": rng.choice(["send_email", "refund"])}}
        lines.append(record)
    order = ("step", "op", "ts", "fields", "merge_with")
    for record in lines:
        ordered = {key: record[key] for key in order if key in record}
        sys.stdout.write(json.dumps(ordered, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
