"""A stand-in for `docker` and `journalctl` in the command log source tests.

Installed on PATH under either name by the test. It reads what to print
from the JSON file named by $STANDIN_SPEC:

    {"lines": [...],  # docker: {"ts", "stream", "text"}; journal: records or raw strings
     "runs": [{"exit_after": 3, "code": 1, "stderr": "..."}, ...],  # per run; the last repeats
     "ignore_term": false,
     "start_when": "/tmp/.../go",  # optional: print nothing until this file exists
     "record": "/tmp/.../runs.jsonl"}  # one JSON line per run: argv and pid

It honours the resume flags as the real tools do: docker's `--since TS`
replays lines at or after TS; journalctl's `--after-cursor C` replays
records after C. Unless told to exit, it then follows forever.
"""

import json
import os
import signal
import sys
import time
from datetime import datetime


def ns(ts):
    base, _, frac = ts.rstrip("Z").partition(".")
    dt = datetime.fromisoformat(base + "+00:00")
    return int(dt.timestamp()) * 10**9 + int(frac.ljust(9, "0") or 0)


def docker_lines(spec, args):
    since = args[args.index("--since") + 1]
    for line in spec["lines"]:
        if (since.endswith("s") and since[:-1].isdigit()) or ns(line["ts"]) >= ns(since):
            stream = sys.stdout if line["stream"] == "out" else sys.stderr
            yield stream, f"{line['ts']} {line['text']}\n"


def journal_lines(spec, args):
    records = spec["lines"]
    if "--after-cursor" in args:
        cursor = args[args.index("--after-cursor") + 1]
        cursors = [r.get("__CURSOR") if isinstance(r, dict) else None for r in records]
        records = records[cursors.index(cursor) + 1 :]
    for r in records:
        yield sys.stdout, (r if isinstance(r, str) else json.dumps(r)) + "\n"


def main():
    spec = json.load(open(os.environ["STANDIN_SPEC"]))
    if spec.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    record = spec["record"]
    run = sum(1 for _ in open(record)) if os.path.exists(record) else 0
    with open(record, "a") as f:
        f.write(json.dumps({"argv": sys.argv[1:], "pid": os.getpid()}) + "\n")
    runs = spec.get("runs") or [{}]
    this = runs[min(run, len(runs) - 1)]
    tool = os.path.basename(sys.argv[0])
    lines = (docker_lines if tool == "docker" else journal_lines)(spec, sys.argv[1:])
    while spec.get("start_when") and not os.path.exists(spec["start_when"]):
        time.sleep(0.01)  # the test says when: after its first poll has drained the queue
    for i, (stream, text) in enumerate(lines):
        if this.get("exit_after") is not None and i >= this["exit_after"]:
            break
        stream.write(text)
        stream.flush()
    if this.get("exit_after") is not None:
        sys.stderr.write(this.get("stderr", "") + "\n")
        sys.exit(this.get("code", 1))
    with open(record + ".done", "a") as f:
        f.write(f"{run}\n")
    while True:  # follow: wait for lines that never come, until terminated
        time.sleep(3600)


main()
