#!/usr/bin/env python3
"""Run one command and print what it cost as JSON: wall seconds, CPU seconds (user + system of
the command and every process it waited for), peak RSS in MB (the largest of them), exit code.

Why not /usr/bin/time: a real GPU node or a job container often lacks it (GNU time is its own
package); wait4's rusage is what it reads anyway. Standard library only, Python 3.6+.

Usage: python3 bench/measure.py [--out FILE] -- COMMAND ARGS...
"""
import json
import os
import subprocess
import sys
import time


def measure(argv, stdout=subprocess.DEVNULL):
    """{wall_s, cpu_s, maxrss_mb, rc} of `argv` run to its end."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.STDOUT if stdout != subprocess.DEVNULL else stdout)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
    return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "maxrss_mb": round(usage.ru_maxrss / 1024, 1), "rc": proc.returncode}


def main():
    args = sys.argv[1:]
    out = None
    if args[:1] == ["--out"]:
        out, args = args[1], args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.exit(__doc__)
    if out:
        with open(out + ".log", "w") as log:
            result = measure(args, stdout=log)
    else:
        result = measure(args)
    text = json.dumps(dict(result, argv=args))
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
