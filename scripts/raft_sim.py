#!/usr/bin/env python3
"""Run the deterministic Raft simulator over many seeds; print the first failing seed with its trace.

    python scripts/raft_sim.py --seeds 20000            # seeds 0..19999, the CI mix of cluster shapes
    python scripts/raft_sim.py --start 5000 --seeds 100 --steps 2000
    python scripts/raft_sim.py --replay 1234 --tail 200 # re-run one seed with a full event trace

A failure is replayable: the same seed (and --steps) gives the same run, event for event.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.sim.cluster import SafetyViolation, SimParams, Simulation, _fields, params_for_seed


def replay(seed: int, steps: int | None, tail: int) -> int:
    """Re-run one seed with tracing and print the end of the trace."""
    p = params_for_seed(seed, steps)
    sim = Simulation(seed, SimParams(**{**_fields(p), "trace": True}))
    try:
        stats = sim.run()
    except SafetyViolation as exc:
        print("\n".join(sim.trace[-tail:]))
        print(f"seed {seed} FAILED: {exc}")
        for n in sim.nodes.values():
            print(f"  {n.id}: {n.raft!r} applied={len(n.sm)} snapshot={n.durable.snapshot.index}")
        return 1
    print(f"seed {seed} ok: {stats} ({len(sim.trace)} trace lines)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=2000, help="how many seeds to run")
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--steps", type=int, default=None, help="chaotic phase length (default: the CI length)")
    ap.add_argument("--replay", type=int, default=None, help="re-run one seed with a trace")
    ap.add_argument("--tail", type=int, default=120, help="trace lines to print for a failure")
    ap.add_argument("--keep-going", action="store_true", help="report every failing seed, not only the first")
    args = ap.parse_args(argv)
    if args.replay is not None:
        return replay(args.replay, args.steps, args.tail)
    t0 = time.monotonic()
    failed: list[int] = []
    totals: dict[str, int] = {}
    for seed in range(args.start, args.start + args.seeds):
        try:
            stats = Simulation(seed, params_for_seed(seed, args.steps)).run()
        except SafetyViolation as exc:
            failed.append(seed)
            print(f"seed {seed} FAILED: {exc}", flush=True)
            if not args.keep_going:
                replay(seed, args.steps, args.tail)
                break
            continue
        for k, v in stats.items():
            totals[k] = totals.get(k, 0) + v
        done = seed - args.start + 1
        if done % 1000 == 0:
            print(f"  {done} seeds, {time.monotonic() - t0:.1f}s", flush=True)
    wall = time.monotonic() - t0
    ran = args.seeds if not failed or args.keep_going else failed[0] - args.start + 1
    last = args.start + ran - 1
    print(f"ran {ran} seeds ({args.start}..{last}) in {wall:.1f}s; failures: {failed or 'none'}")
    print(f"totals: {totals}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
