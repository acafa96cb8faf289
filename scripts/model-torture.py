#!/usr/bin/python3
"""The model-based tests (tests/integration/test_model_restart.py and
test_model_crash.py, contract in docs/contract.md), for longer.

  scripts/model-torture.py [--ops 50000] [--rounds 25] [--seed N] [--keep-going]
                           [--only restart|crash|reclaim|on_evict|write_through|none|everysec|always]

--ops/--rounds: operations and clean restarts of each restart variant
(CI: 4000 and 5); --rounds is also the number of kill -9 rounds of each crash
variant (CI: 10). Without --seed every run draws a fresh seed (printed, and in
every failure message with the command line to rerun it). --keep-going: a
failed full check is printed and the run goes on (the model takes what was
read as the truth), to count how many keys are wrong over many rounds.
The server is $TIERKV_SERVER (default build/src/server/tierkv-server).
"""
import argparse
import os
import random
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=50000)
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--keep-going", action="store_true")
    ap.add_argument("--only")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"model-torture: seed {seed}")
    env = dict(os.environ, TIERKV_MODEL_OPS=str(args.ops), TIERKV_MODEL_ROUNDS=str(args.rounds),
               TIERKV_MODEL_CRASH_ROUNDS=str(args.rounds), TIERKV_MODEL_SEED=str(seed))
    if args.keep_going:
        env["TIERKV_MODEL_KEEP_GOING"] = "1"
    env.setdefault("TIERKV_SERVER", os.path.join(ROOT, "build", "src", "server", "tierkv-server"))
    tests = [os.path.join(ROOT, "tests", "integration", f)
             for f in ("test_model_restart.py", "test_model_crash.py")]
    cmd = ["/usr/bin/python3", "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
           "--durations=0", "-k", f"model_ and {args.only}" if args.only else "model_", *tests]
    return subprocess.call(cmd, env=env, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())
