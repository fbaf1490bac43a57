#!/usr/bin/env python3
"""Builds the libFuzzer targets of fuzz/ on stable Rust and runs them.

  python3 fuzz/run.py fuzz [--seconds 20] [TARGET ...]
      Each target for its time from the committed corpus (fuzz/corpus/<t>)
      and its dictionary; new inputs are merged back and the corpus is
      minimized (-merge=1); fuzz/RESULTS.md gets the figures.
  python3 fuzz/run.py merge [TARGET ...]
      Only minimizes the committed corpus.
  python3 fuzz/run.py ci [--seconds 5] [TARGET ...]
      Replays the whole corpus and fuzz/regressions/<t>, then fuzzes a few
      seconds per target; the committed corpus is left as it is.

One input running longer than 1 s is a failure (-timeout=1), as is a
panic. Failing inputs are saved in fuzz/artifacts/<t>/; the run goes on with
the other targets and exits 1. Exits 2 when the build fails.
"""

import argparse
import datetime
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

FUZZ = pathlib.Path(__file__).resolve().parent
ROOT = FUZZ.parent
TARGETS = ["config", "state", "key", "check", "answer", "rls_answer", "rls_yaml", "rls_request", "cost_extract", "pattern"]
# Larger inputs where the parser's cost grows with size (huge headers,
# long configurations); libFuzzer's default elsewhere.
MAX_LEN = {"key": 65536, "config": 16384, "rls_yaml": 16384}

# What `cargo fuzz build --sanitizer none` passes, all stable rustc flags.
RUSTFLAGS = " ".join([
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "-Cllvm-args=-simplifycfg-branch-fold-threshold=0",
    "--cfg fuzzing",
    "-Cdebug-assertions",
    "-Coverflow-checks",
])


def host_triple():
    out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    return re.search(r"^host: (\S+)", out, re.M).group(1)


def build():
    """Builds every target; the instrumented flags apply only to the target
    triple, so build scripts and proc macros build as usual."""
    triple = host_triple()
    env = dict(os.environ, RUSTFLAGS=RUSTFLAGS)
    env.pop("CARGO_TARGET_DIR", None)
    cmd = ["cargo", "build", "--release", "--locked", "--manifest-path", str(FUZZ / "Cargo.toml"),
           "--target", triple]
    started = time.monotonic()
    r = subprocess.run(cmd, env=env)
    if r.returncode != 0:
        sys.exit(2)
    print(f"fuzz: built in {time.monotonic() - started:.0f} s", flush=True)
    return FUZZ / "target" / triple / "release"


def stats(log):
    """The figures of libFuzzer's final stats and its last status line."""
    out = {}
    for key, name in [("number_of_executed_units", "execs"), ("average_exec_per_sec", "exec_s"),
                      ("new_units_added", "new"), ("slowest_unit_time_sec", "slowest"),
                      ("peak_rss_mb", "rss")]:
        m = re.search(rf"stat::{key}:\s+(\d+)", log)
        out[name] = int(m.group(1)) if m else 0
    status = [line for line in log.splitlines() if re.match(r"#\d+\s+\w+\s+cov:", line)]
    inited = [line for line in status if "INITED" in line]
    for label, lines in [("start", inited[:1]), ("end", status[-1:])]:
        for field in ("cov", "ft"):
            m = re.search(rf"{field}: (\d+)", lines[0]) if lines else None
            out[f"{field}_{label}"] = int(m.group(1)) if m else 0
    return out


def run_target(binary, target, seconds, ci, artifacts):
    corpus = FUZZ / "corpus" / target
    corpus.mkdir(parents=True, exist_ok=True)
    regressions = FUZZ / "regressions" / target
    art = artifacts / target
    art.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix=f"sluice-fuzz-{target}-"))
    new = work / "new"
    new.mkdir()
    args = [str(binary / target), str(new), str(corpus)]
    if regressions.is_dir():
        args.append(str(regressions))
    dictionary = FUZZ / "dict" / f"{target}.dict"
    if dictionary.exists():
        args.append(f"-dict={dictionary}")
    if target in MAX_LEN:
        args.append(f"-max_len={MAX_LEN[target]}")
    args += [f"-max_total_time={seconds}", "-timeout=1", "-rss_limit_mb=2048",
             "-print_final_stats=1", f"-artifact_prefix={art}/", "-close_fd_mask=1"]
    before = set(art.iterdir())
    started = time.monotonic()
    try:
        # libFuzzer stops itself; this bound catches a fuzzer that does not.
        p = subprocess.run(args, capture_output=True, text=True, errors="replace",
                           timeout=seconds + 300)
        log, code = p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        log, code = (e.stderr or b"").decode(errors="replace") + "\nfuzz: watchdog expired", -1
    elapsed = time.monotonic() - started
    (work / "log").write_text(log)
    logs = FUZZ / "target" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{target}.log").write_text(log)
    found = sorted(set(art.iterdir()) - before)
    s = stats(log)
    s.update(target=target, seconds=round(elapsed), code=code, crashes=len(found), artifacts=found)
    if code != 0 and not found:
        s["crashes"] = 1
    if code != 0:
        tail = "\n".join(log.splitlines()[-30:])
        print(f"fuzz: {target} FAILED (exit {code}); inputs: {[str(f) for f in found]}\n{tail}",
              file=sys.stderr, flush=True)
    if not ci and code == 0:
        merge(binary, target, corpus, new, work)
    s["files"] = len(list(corpus.iterdir()))
    s["bytes"] = sum(f.stat().st_size for f in corpus.iterdir())
    shutil.rmtree(work, ignore_errors=True)
    print(f"fuzz: {target}: {s['execs']} runs, {s['exec_s']} exec/s, cov {s['cov_start']}->{s['cov_end']}, "
          f"ft {s['ft_start']}->{s['ft_end']}, corpus {s['files']} files, crashes {s['crashes']}", flush=True)
    return s


def merge(binary, target, corpus, new, work):
    """The corpus and what this run found, minimized into the corpus."""
    merged = work / "merged"
    merged.mkdir()
    # Edges only (no hit counts, no compared values), fewest inputs that
    # cover them: the committed corpus stays small; fuzzing regains the rest.
    args = [str(binary / target), "-merge=1", "-set_cover_merge=1", "-use_counters=0", "-use_cmp=0",
            "-timeout=1", "-rss_limit_mb=2048", "-close_fd_mask=1", str(merged), str(corpus), str(new)]
    if target in MAX_LEN:
        args.append(f"-max_len={MAX_LEN[target]}")
    p = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=600)
    if p.returncode != 0 or not any(merged.iterdir()):
        print(f"fuzz: {target}: merge failed (exit {p.returncode}); corpus left as it was",
              file=sys.stderr)
        return
    for f in corpus.iterdir():
        f.unlink()
    for f in merged.iterdir():
        shutil.move(str(f), corpus / f.name)


def git(*args):
    r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip()


def results(rows, seconds, command):
    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!fuzz/corpus", ":!fuzz/RESULTS.md")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Fuzzing results",
        "",
        f"`{command}` on commit `{commit}`{' (with uncommitted changes)' if dirty else ''}, {when},",
        f"{seconds} s per target, libFuzzer (libfuzzer-sys) on stable `{git_rustc()}`,",
        f"{os.cpu_count()} cores shared with other work: exec/s figures are noisy.",
        "",
        "cov: code edges covered, ft: libFuzzer's features (edges with hit counts and compares),",
        "at the start (committed corpus replayed) and at the end of the run. New inputs: what",
        "libFuzzer kept during the run. Corpus: files after the merge (`-merge=1`, set cover of",
        "the edges: minimized). A crash is a panic or an input running over 1 s.",
        "",
        "| target | executions | exec/s | cov start → end | ft start → end | new inputs | corpus files | corpus KiB | crashes |",
        "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for s in rows:
        lines.append(
            f"| {s['target']} | {s['execs']:,} | {s['exec_s']:,} | {s['cov_start']} → {s['cov_end']} | "
            f"{s['ft_start']} → {s['ft_end']} | {s['new']} | {s['files']} | {s['bytes'] // 1024} | {s['crashes']} |")
    total = sum(s["execs"] for s in rows)
    lines += ["", f"Total: {total:,} executions, {sum(s['crashes'] for s in rows)} crashes, "
              f"{sum(s['files'] for s in rows)} corpus files ({sum(s['bytes'] for s in rows) // 1024} KiB).", ""]
    (FUZZ / "RESULTS.md").write_text("\n".join(lines))


def git_rustc():
    return subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["fuzz", "ci", "merge"])
    ap.add_argument("--seconds", type=int)
    ap.add_argument("targets", nargs="*")
    a = ap.parse_intermixed_args()
    seconds = a.seconds or (20 if a.mode == "fuzz" else 5)
    targets = a.targets or TARGETS
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        sys.exit(f"fuzz: unknown targets {unknown}; known: {' '.join(TARGETS)}")
    binary = build()
    if a.mode == "merge":
        for t in targets:
            work = pathlib.Path(tempfile.mkdtemp(prefix=f"sluice-fuzz-{t}-"))
            (work / "new").mkdir()
            merge(binary, t, FUZZ / "corpus" / t, work / "new", work)
            shutil.rmtree(work, ignore_errors=True)
            print(f"fuzz: {t}: corpus {len(list((FUZZ / 'corpus' / t).iterdir()))} files", flush=True)
        return
    artifacts = FUZZ / "artifacts"
    rows = [run_target(binary, t, seconds, a.mode == "ci", artifacts) for t in targets]
    if a.mode == "fuzz" and targets == TARGETS:
        results(rows, seconds, f"make fuzz FUZZ_SECONDS={seconds}")
    failed = [s["target"] for s in rows if s["crashes"]]
    print(f"fuzz: {len(rows)} targets, {sum(s['execs'] for s in rows):,} executions, "
          f"{sum(s['crashes'] for s in rows)} crashes")
    if failed:
        print(f"fuzz: FAILED: {' '.join(failed)}; failing inputs in {artifacts}/", file=sys.stderr)
    # The closing line test runners print: one target, one test.
    print(f"fuzz: {len(rows) - len(failed)} passed, {len(failed)} failed", flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
