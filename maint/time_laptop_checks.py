#!/usr/bin/env python3
"""Times the workshop's two-hour laptop plan (docs/workshop.md) on a machine
without Bazel, with the binaries maint/build_laptop_bins.sh made.

Each step's check (exercises 10.1, 11.1, 11.2, 12.1, 14.1, 16.1 as their
chapter pages give them, and tests/two_hosts_netns_test.py) runs under
`taskset -c CPUS bash -c CHECK` from the checkout, its `bazel` and `sed -i`
lines replaced by the carried binaries (11.1's two variants, 14.1's four);
rounds repeat while --budget lasts. Writes OUT/runs.jsonl (seconds, the
verdict the page's <!-- verdict --> patterns read, the output's tail) and
prints each run and the median per step.

  maint/build_laptop_bins.sh .devbin                        # here, with Bazel
  python3 maint/time_laptop_checks.py --bin-root .devbin --out /tmp/t --budget 120
  python3 maint/time_laptop_checks.py --summarize /tmp/t --label "MACHINE" --commit ID
                                                            # writes /tmp/t/results.md
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "maint"))
import run_exercises as rx  # noqa: E402


def checks(ex, d):
    def plain(eid):
        check, why = rx.for_bin_dir(ex[eid]["check"], d / "base")
        if check is None:
            sys.exit(f"time_laptop_checks: {eid}: {why}")
        return check

    def without(eid, prefixes):
        return [ln for ln in ex[eid]["check"] if not ln.strip().startswith(prefixes)]

    variants = iter([d / "v11cas", d / "v11store"])
    ex11 = [ln.replace("--no-build", f"--bin-dir {next(variants)}") if "--no-build" in ln else ln
            for ln in without("11.1", ("sed ", "bazel build", "git checkout"))]
    ex12 = [ln.replace("bazel run //chapters/12_pin:server --", str(d / "base/12_pin/server"))
            .replace("--no-build", f"--bin-dir {d / 'base'}")
            for ln in without("12.1", ("bazel build",))]
    ex14 = [re.sub(r"(run_chapter\.py 14_batch)", rf"\1 --bin-dir {d}/v14b$batch", ln)
            for ln in without("14.1", ("sed ", "git checkout"))]
    two_hosts = [f"TEST_SRCDIR={d}/ts TEST_WORKSPACE=w python3 tests/two_hosts_netns_test.py"]
    steps = {"10.1": plain("10.1"), "11.1": ex11, "11.2": plain("11.2"), "12.1": ex12,
             "14.1": ex14, "16.1": plain("16.1"), "two_hosts": two_hosts}
    # One default run of a chapter (the plan's first step, and what a learner
    # types first over simnic), and the whole simulated ladder.
    for chapter in ("09_multinet", "11_multithread", "14_batch"):
        for provider in ("shm", "simnic"):
            steps[f"run {chapter} {provider}"] = [
                f"python3 tools/run_chapter.py {chapter} --bin-dir {d / 'base'} --provider {provider}"]
    steps["ladder simnic"] = [
        f"python3 tools/compare.py --provider simnic --repeat 50 --bin-dir {d / 'base'} "
        "--out \"$(mktemp -d --suffix=-simnic)\" --no-docs"]
    return steps


# What a step that is no exercise shows, read from its output.
OTHER_VERDICTS = (
    "two hosts", "two_hosts_netns_test: SKIPPED", "OK", "FAILED", "Ran ",  # the two-hosts test
    "simnic layout:", "  client| Verified",  # run_chapter.py
    "run flagged",  # a simnic run that does not count
)


def summarize(folder, label, commit, command):
    """Writes FOLDER/results.md from FOLDER/runs.jsonl: every run, the median per step."""
    runs = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines() if line]
    steps = {}
    for run in runs:
        steps.setdefault(run["step"], []).append(run)
    cpus = sorted({run["cpus"] for run in runs})
    rows = []
    for step, its in steps.items():
        good = [r["seconds"] for r in its if r["rc"] == 0 and r["verdict"]]
        median = f"{statistics.median(good):.1f}" if good else "-"
        # The two-hosts test's lines carry its namespaces' names (from its pid)
        # and the run's rate and times: compared with those masked.
        verdicts = sorted({re.sub(r"tut\d+|\d+\.\d+ (s|Gbps|Mops/s)\b|\d+\.\d+s|\(\d+\.\d+ s\)",
                                  "#", " / ".join(r["verdict"])) for r in its})
        same = "the same verdict every run" if len(verdicts) == 1 else f"{len(verdicts)} verdicts"
        seconds = ", ".join(f"{r['seconds']:.1f}" for r in its)
        first = next((r for r in its if r["rc"] == 0 and r["verdict"]), its[0])
        shown = " / ".join(v.strip() for v in first["verdict"])
        shown = (shown[:237] + "...") if len(shown) > 240 else shown
        rows.append(f"| {step} | {median} | {seconds} | "
                    f"{len(good)} of {len(its)} | {same} | {shown.replace('|', '/')} |")
    text = "\n".join([
        "# The workshop's laptop plan on 4 cores: each step's check, timed",
        "",
        "Made by `maint/time_laptop_checks.py` (every check under `taskset -c "
        f"{', '.join(cpus)}`, binaries from `maint/build_laptop_bins.sh` carried over); "
        "this table by its `--summarize` from [runs.jsonl](runs.jsonl), which holds each run's "
        "command, verdict and output tail.",
        "",
        f"- machine: {label}",
        f"- binaries built at commit {commit}",
        f"- command: {command}",
        "- provider, memory, layout and page size: each step's own, as its check on the chapter "
        "page gives them (the `command` field of runs.jsonl): shm and simnic on host memory, "
        "tcp over a veth pair for the two-hosts test",
        "- seconds: the whole check, wall clock (servers and clients start, run, verify); "
        "no build (Bazel does not run there; build times come from the 2-core machine)",
        "",
        "| step | median seconds | runs (s) | runs with rc 0 and a verdict | verdicts | "
        "what the first such run showed |",
        "|---|---:|---|---|---|---|",
        *rows,
        "",
    ])
    (folder / "results.md").write_text(text)
    print(f"time_laptop_checks: wrote {folder / 'results.md'}")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summarize", type=pathlib.Path,
                        help="write FOLDER/results.md from FOLDER/runs.jsonl and stop")
    parser.add_argument("--label", default="(unnamed machine)", help="machine, for --summarize")
    parser.add_argument("--commit", default="(unknown)", help="binaries' commit, for --summarize")
    parser.add_argument("--command", default="(not given)", help="the timing command, for --summarize")
    parser.add_argument("--bin-root", type=pathlib.Path,
                        help="what maint/build_laptop_bins.sh wrote")
    parser.add_argument("--out", type=pathlib.Path, help="folder for runs.jsonl")
    parser.add_argument("--cpus", default="0-3", help="taskset's CPU list (default: %(default)s)")
    parser.add_argument("--budget", type=float, default=120,
                        help="seconds after which no new run starts (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each step at most")
    parser.add_argument("--only", nargs="+", default=None, help="steps, e.g. 14.1 two_hosts")
    args = parser.parse_args()
    if args.summarize:
        return summarize(args.summarize, args.label, args.commit, args.command)
    if not args.bin_root or not args.out:
        parser.error("--bin-root and --out are needed (or --summarize FOLDER)")
    d = args.bin_root.resolve()
    # Libraries the machine may lack; libstdc++ only where it has none; ip, ps
    # and taskset only where it has none.
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    libs = [str(d / "lib")]
    if "libstdc++.so.6 " not in subprocess.run(["sh", "-c", "ldconfig -p"], capture_output=True,
                                                text=True).stdout:
        libs.append(str(d / "lib2"))
    env["LD_LIBRARY_PATH"] = ":".join(libs + [p for p in [env.get("LD_LIBRARY_PATH")] if p])
    env["PATH"] = env.get("PATH", "/usr/bin:/bin") + f":{d / 'fb'}"
    ex = {e["id"]: e for e in rx.exercise_list(ROOT)}
    steps = checks(ex, d)
    if args.only:
        steps = {k: v for k, v in steps.items() if k in args.only}
    args.out.mkdir(parents=True, exist_ok=True)
    started, seconds = time.monotonic(), {}
    with open(args.out / "runs.jsonl", "w") as log:
        for rnd in range(1, args.rounds + 1):
            for step, lines in steps.items():
                if time.monotonic() - started > args.budget:
                    break
                t0 = time.monotonic()
                try:
                    run = subprocess.run(["taskset", "-c", args.cpus, "bash", "-c",
                                          "\n".join(lines) + "\n"], cwd=ROOT, env=env,
                                         capture_output=True, text=True, timeout=90,
                                         start_new_session=True)
                    output, rc = run.stdout + run.stderr, run.returncode
                except subprocess.TimeoutExpired as e:
                    output, rc = str(e.stdout or ""), 124
                took = time.monotonic() - t0
                verdict = (rx.verdict_of(ex[step]["verdict"], output) if step in ex else
                           [ln for ln in output.splitlines() if ln.startswith(OTHER_VERDICTS)])
                if step == "ladder simnic" and rc == 0:
                    verdict = [ln for ln in output.splitlines() if "simnic layout" in ln][:1]
                tail = output.strip().splitlines()[-25:]
                log.write(json.dumps({"step": step, "round": rnd, "rc": rc,
                                      "seconds": round(took, 2), "cpus": args.cpus,
                                      "verdict": verdict, "command": lines,
                                      "output_tail": tail}) + "\n")
                log.flush()
                print(f"{step} round {rnd}: rc {rc}, {took:.1f} s, verdict {verdict}", flush=True)
                if rc != 0 or not verdict:
                    print("\n".join(tail), flush=True)
                else:
                    seconds.setdefault(step, []).append(took)
    for step, values in seconds.items():
        print(f"median {step}: {statistics.median(values):.1f} s of {len(values)} "
              f"({', '.join(f'{v:.1f}' for v in values)})")
    print(f"total {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
