#!/usr/bin/python3
"""The kill -9 torture of tests/integration/test_flash_crash.py, for longer.

  scripts/crash-torture.py [--rounds 200] [--only fsync_none|fsync_always|write_through]

The server is $TIERKV_SERVER (default build/src/server/tierkv-server). CI
runs 10 rounds of each variant; this runs as many as asked, then prints pytest's verdict.
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--only", choices=("fsync_none", "fsync_always", "write_through"))
    args = ap.parse_args()
    env = dict(os.environ, TIERKV_TORTURE_ROUNDS=str(args.rounds))
    env.setdefault("TIERKV_SERVER", os.path.join(ROOT, "build", "src", "server", "tierkv-server"))
    selector = f"torture_{args.only}" if args.only else "torture"
    cmd = ["/usr/bin/python3", "-m", "pytest", "-q", "--durations=0", "-k", selector,
           os.path.join(ROOT, "tests", "integration", "test_flash_crash.py")]
    return subprocess.call(cmd, env=env, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())
