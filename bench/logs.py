"""Log signature benchmark: lines/s of crash-signature matching, against `grep -E`.

Run: `python bench/logs.py [--lines 1000000] [--file LOG]`. Without --file a
realistic mixed vLLM log is generated (healthy serving lines: throughput
stats, access-log lines, request logs; one crash traceback from
tests/data/logs every --crash-every lines). Measures, on one core, in one run:

  (a) matching: SignatureSet.candidate_lines over chunks + match_line on the
      candidates (what decides whether a line matches a signature), with the
      Hyperscan prefilter where it is installed and with the literal one;
  (a2) the same from the file on disk, 1 MiB reads of bytes scanned as
      they are (SignatureSet.scan_bytes: what `sentinel logs classify` pays,
      minus the classifier);
  (b) the whole Classifier (feed_many + flush: grouping, excerpts, events),
      on LogEntry batches built beforehand;
  (c) `grep -c -E -f patterns.txt FILE` with the same patterns (translated
      to POSIX ERE), timed as a subprocess;
  (d) `sentinel logs classify FILE` itself, as a subprocess (start-up,
      reading, classifying, printing), beside (c).

First, start-up: the CPU of `sentinel logs classify` on an empty file, with
the on-disk signature cache cold (a fresh folder: the bundled file's shipped
anchors are used, Hyperscan is compiled) and then warm (target < 0.3 s both).
Sentinel's bytecode is compiled first, as an install does (`compileall`).

Each subprocess measurement (c), (d) and the start-up runs 3 times; the
figures are medians of CPU seconds (the machine may be shared: CPU, not
wall, is what compares). `--literal` also times the literal prefilter (a').

Two cases in one run, each against grep in that run:

  sparse: one crash every --crash-every lines (a quiet, healthy fleet);
  dense:  a crash storm: real crash logs from tests/data/logs/corpus/crash
          back to back, padded with healthy lines so that --dense-ratio
          (10 %) of all lines match a signature.

Design targets: sparse (a) at least 500,000 lines/s and at least (c)
(issue 3); dense (a) at least 1,000,000 lines/s and at least 0.5x (c)
(issue 13). The matching-line counts of (a) and (c) are printed too: they
must agree.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sentinel.logs import Classifier, SignatureSet, load_signature_file  # noqa: E402
from sentinel.logs.signatures import parse_signatures  # noqa: E402
from sentinel.model import LogEntry  # noqa: E402

CHUNK = 8192
CRASHES = ["tpu_hbm_oom.log", "gpu_cuda_oom.log"]
CORPUS = ROOT / "tests" / "data" / "logs" / "corpus" / "crash"


def healthy_line(rng: random.Random, t: int) -> str:
    """One healthy vLLM serving line, with varying numbers."""
    ts = f"{(t // 3600) % 24:02d}:{(t // 60) % 60:02d}:{t % 60:02d}"
    kind = rng.random()
    if kind < 0.55:
        return (f'(APIServer pid=1) INFO:     10.128.{rng.randint(0, 255)}.{rng.randint(1, 254)}:'
                f'{rng.randint(1024, 65535)} - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    if kind < 0.75:
        return (f"(APIServer pid=1) INFO 05-14 {ts} [loggers.py:127] Engine 000: Avg prompt "
                f"throughput: {rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: "
                f"{rng.uniform(0, 9000):.1f} tokens/s, Running: {rng.randint(0, 256)} reqs, "
                f"Waiting: {rng.randint(0, 40)} reqs, GPU KV cache usage: "
                f"{rng.uniform(0, 99):.1f}%, Prefix cache hit rate: {rng.uniform(0, 90):.1f}%")
    if kind < 0.9:
        return (f"(APIServer pid=1) INFO 05-14 {ts} [async_llm.py:270] Added request "
                f"chatcmpl-{rng.getrandbits(128):032x}.")
    if kind < 0.97:
        return (f'(APIServer pid=1) INFO:     10.128.0.7:{rng.randint(1024, 65535)} - '
                f'"GET /metrics HTTP/1.1" 200 OK')
    return (f"(APIServer pid=1) INFO 05-14 {ts} [logger.py:43] Received request "
            f"chatcmpl-{rng.getrandbits(64):016x}: prompt: None, params: SamplingParams(n=1, "
            f"temperature=0.7, top_p=0.95, max_tokens={rng.randint(16, 4096)}), "
            "lora_request: None.")


def generate(path: Path, lines: int, crash_every: int) -> None:
    """Write a mixed log of about `lines` lines."""
    rng = random.Random(42)
    crashes = [(ROOT / "tests/data/logs" / c).read_text().splitlines() for c in CRASHES]
    out: list[str] = []
    while len(out) < lines:
        if out and len(out) % crash_every == 0:
            out.extend(crashes[(len(out) // crash_every) % len(crashes)])
        out.append(healthy_line(rng, len(out)))
    path.write_text("\n".join(out[:lines]) + "\n")


def corpus_log(path: Path) -> list[str]:
    """The log lines of a corpus file, without its `#:` header."""
    return [line for line in path.read_text(encoding="utf-8").splitlines()
            if not line.startswith("#:")]


def generate_dense(path: Path, lines: int, ratio: float, sigs: SignatureSet) -> None:
    """A crash storm: real crash logs back to back, healthy padding up to `ratio` matching."""
    rng = random.Random(7)
    crashes = [corpus_log(p) for p in sorted(CORPUS.glob("*.log"))]
    crashes = [[x for x in c if x.isascii()] for c in crashes if c] or [
        (ROOT / "tests/data/logs" / c).read_text().splitlines() for c in CRASHES]
    out: list[str] = []
    i = 0
    while len(out) < lines:
        crash = crashes[i % len(crashes)]
        i += 1
        matching = sum(sigs.match_line(x) is not None for x in crash)
        out.extend(crash)
        for _ in range(max(0, int(matching / ratio) - len(crash))):
            out.append(healthy_line(rng, len(out)))
    path.write_text("\n".join(out[:lines]) + "\n")


def to_ere(pattern: str) -> str:
    """A Python pattern (the subset signatures.yaml uses) as POSIX ERE for grep -E."""
    for py, ere in ((r"(?:", "("), (r"\d", "[0-9]"), (r"\s", "[[:space:]]"),
                    (r"\S", "[^[:space:]]"), (r"\w", "[[:alnum:]_]")):
        pattern = pattern.replace(py, ere)
    return pattern


def bench_match(sigs: SignatureSet, text: str) -> tuple[float, int, int]:
    """Seconds, lines and matching lines for prefilter + combined regex over the text."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    blocks = ["\n".join(lines[i:i + CHUNK]) for i in range(0, len(lines), CHUNK)]
    chunk_lines = [lines[i:i + CHUNK] for i in range(0, len(lines), CHUNK)]
    del chunk_lines
    matched = 0
    start = time.perf_counter()
    for block in blocks:
        matched += sum(1 for _, sig, _ in sigs.scan(block) if sig is not None)
    return time.perf_counter() - start, len(lines), matched


def bench_file(sigs: SignatureSet, path: Path) -> tuple[float, int, int]:
    """Like bench_match, but from the file on disk: read, scan, match (as grep does)."""
    matched = lines = 0
    rest = b""
    start = time.perf_counter()
    with path.open("rb") as f:  # as the CLI reads: bytes, only hit lines decoded
        while chunk := f.read(1 << 20):
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            block, rest = data[:cut - 1], data[cut:]
            if cut == 0:
                rest = data
                continue
            lines += block.count(b"\n") + 1
            found = sigs.scan_bytes(block)
            if found is None:  # no Hyperscan: decode and scan the text
                found = [(i, 0, sig, tb) for i, sig, tb in sigs.scan(block.decode(
                    "utf-8", "replace"))]
            matched += sum(1 for _, _, sig, _ in found if sig is not None)
    return time.perf_counter() - start, lines + (1 if rest else 0), matched


def bench_classifier(sigs: SignatureSet, text: str) -> tuple[float, int]:
    """Seconds and events for the whole Classifier over the text."""
    entries = [LogEntry("bench", "file:bench", 0, line, n)
               for n, line in enumerate(text.splitlines(), start=1)]
    batches = [entries[i:i + CHUNK] for i in range(0, len(entries), CHUNK)]
    classifier = Classifier(sigs)
    events = 0
    start = time.perf_counter()
    for batch in batches:
        events += len(classifier.feed_many(batch))
    events += len(classifier.flush())
    return time.perf_counter() - start, events


def bench_grep(sigs: SignatureSet, path: Path,
               tmp: Path) -> tuple[float, int, float] | None:
    """Seconds, matching-line count and CPU seconds of `grep -c -E -f` (best of 3), or None."""
    grep = shutil.which("grep")
    if grep is None:
        return None
    patterns = tmp / "patterns.txt"
    patterns.write_text("\n".join(to_ere(p) for s in sigs.signatures for p in s.patterns) + "\n")
    walls, cpus = [], []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([grep, "-c", "-E", "-f", str(patterns), str(path)],
                              capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode not in (0, 1):
            print(f"grep failed: {done.stderr.strip()}")
            return None
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return statistics.median(walls), int(done.stdout.strip() or 0), statistics.median(cpus)


def run_case(name: str, path: Path, sigs: SignatureSet, literal: SignatureSet | None,
             tmp: Path) -> None:
    """The four measurements over one log, printed."""
    text = path.read_text(encoding="utf-8", errors="replace")
    mb = len(text.encode()) / 1e6
    print(f"--- {name}: {mb:.1f} MB, {len(sigs.signatures)} signatures, "
          f"{len(sigs.anchors)} anchors, prefilter: {sigs.engine}")
    if literal is not None and sigs.engine != "literal":
        lseconds, lines, lmatched = min((bench_match(literal, text) for _ in range(3)),
                                        key=lambda r: r[0])
        print(f"(a') literal prefilter: {lines / lseconds:11,.0f} lines/s "
              f"({lseconds * 1000:.0f} ms, {lmatched} matching lines)")
    seconds, lines, matched = min((bench_match(sigs, text) for _ in range(3)),
                                  key=lambda r: r[0])
    print(f"(a) sentinel matching : {lines / seconds:12,.0f} lines/s "
          f"({seconds * 1000:.0f} ms, {matched} matching lines = {matched / lines:.1%}, "
          f"{sigs.engine})")
    fseconds, lines, fmatched = min((bench_file(sigs, path) for _ in range(3)),
                                    key=lambda r: r[0])
    print(f"(a2) same, from the file: {lines / fseconds:10,.0f} lines/s "
          f"({fseconds * 1000:.0f} ms, {fmatched} matching lines: read, scan bytes, match)")
    cseconds, events = min((bench_classifier(sigs, text) for _ in range(3)),
                           key=lambda r: r[0])
    print(f"(b) sentinel classifier: {lines / cseconds:11,.0f} lines/s "
          f"({cseconds * 1000:.0f} ms, {events} events)")
    grep = bench_grep(sigs, path, tmp)
    if grep is None:
        print("(c) grep -E            : unavailable")
        return
    gseconds, gmatched, gcpu = grep
    print(f"(c) grep -c -E -f      : {lines / gseconds:12,.0f} lines/s "
          f"({gseconds * 1000:.0f} ms, {gmatched} matching lines)")
    runs = [cli_run(path, tmp / "sigcache") for _ in range(3)]
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    print(f"(d) sentinel logs classify FILE (whole CLI, subprocess): {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU (runs: {', '.join(f'{r[1]:.2f}' for r in runs)}); "
          f"grep {gseconds:.2f} s wall, {gcpu:.2f} s CPU")
    print(f"{name}: whole CLI CPU / grep -E CPU = {cpu / max(gcpu, 1e-9):.2f}x "
          f"(target <= 1.00x), wall {wall / gseconds:.2f}x")
    print(f"{name}: (a)/(c) = {gseconds / seconds:.2f}x; matching lines agree: "
          f"{matched == gmatched}")


def cli_run(path: Path, cache: Path) -> tuple[float, float]:
    """`sentinel logs classify PATH` as a subprocess: (wall seconds, CPU seconds)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SENTINEL_SIGNATURE_CACHE": str(cache)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from sentinel.cli import console; "
                    "sys.argv[0] = 'sentinel'; sys.exit(console())", "logs", "classify",
                    str(path)], env=env, check=False, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_startup(tmp: Path) -> None:
    """Start-up CPU of `sentinel logs classify` on an empty file: cache cold, then warm."""
    empty = tmp / "empty.log"
    empty.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "sentinel")],
                   env=env, check=False, stdout=subprocess.DEVNULL)
    cold, warm = [], []
    for i in range(3):
        cache = tmp / f"startup-cache-{i}"  # a fresh, empty cache folder: a first run
        cold.append(cli_run(empty, cache)[1])
        warm.append(cli_run(empty, cache)[1])
    print(f"--- start-up: sentinel logs classify on an empty file, CPU (median of 3): "
          f"cold (empty cache folder) {statistics.median(cold):.2f} s "
          f"[{', '.join(f'{c:.2f}' for c in cold)}]; warm {statistics.median(warm):.2f} s "
          f"[{', '.join(f'{c:.2f}' for c in warm)}] (target < 0.3 s)")
    cli_run(empty, tmp / "sigcache")  # the cases below measure a warm CLI


def main() -> None:
    """Generate (or read) the logs, run the measurements on each, print lines/s."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--crash-every", type=int, default=50_000)
    ap.add_argument("--dense-ratio", type=float, default=0.10)
    ap.add_argument("--case", choices=("both", "sparse", "dense"), default="both")
    ap.add_argument("--file", type=Path, help="use this log instead of generating them")
    ap.add_argument("--literal", action="store_true",
                    help="also time the literal prefilter (a'): minutes on 1M lines")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core, grep too
    sig_path = ROOT / "rules" / "signatures.yaml"
    sigs = load_signature_file(sig_path)
    literal = SignatureSet(parse_signatures(sig_path.read_text(), str(sig_path)), "literal",
                           anchors=sigs.anchors) if args.literal else None
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        bench_startup(tmp)
        if args.file is not None:
            run_case(args.file.name, args.file, sigs, literal, tmp)
            return
        if args.case in ("both", "sparse"):
            generate(tmp / "sparse.log", args.lines, args.crash_every)
            run_case("sparse", tmp / "sparse.log", sigs, literal, tmp)
        if args.case in ("both", "dense"):
            generate_dense(tmp / "dense.log", args.lines, args.dense_ratio, sigs)
            run_case("dense", tmp / "dense.log", sigs, literal, tmp)


if __name__ == "__main__":
    re.purge()
    main()
