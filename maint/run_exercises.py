#!/usr/bin/env python3
"""Runs the exercises' checks unattended and records the verdict of each.

Every exercise on a chapter page (docs/NN_name.md, "## Exercises") has a
`Check:` block of shell commands (maint/check_exercises.py checks that they
would run). This tool runs them. What decides is the page's own
`<!-- verdict: REGEX -->` line(s) under the exercise: the verdict of a run
is every match of those patterns in the check's output, in order (a
pattern's groups where it has them), so an exercise whose answer is an
exact count (`longest_write_run 8`, the threads' names, a threading level)
gives the same verdict every time. An exercise whose answer is a rate or a
ratio that moves with the machine's load says instead

  <!-- unattended: no: <why> -->

and is listed, with its reason, never run.

  python3 maint/run_exercises.py                       # every exercise once
  python3 maint/run_exercises.py --only 11.1 14.1 --repeat 5
  python3 maint/run_exercises.py --repeat 5 --record results/exercises-2core
  python3 maint/run_exercises.py --bin-dir DIR         # no Bazel: DIR/<chapter>/server ...

A check runs with bash in the checkout (cwd), one at a time. Its `sed -i`
edits change files of the checkout, which the check itself restores with
`git checkout`; this tool refuses to start when one of those files has
changes of yours, and restores them after each run whatever happened.

--bin-dir (the Bazel test //docs:exercises_run_test) runs what needs no
build: it drops `bazel build` lines, gives run_chapter.py --bin-dir, and
skips (saying why) the checks that edit the code, which need a rebuild, or
that run `bazel run`/`bazel test`, which cannot run inside a Bazel test.

A simnic run that its tools flag ("run flagged (preempted...)": its rate
is the machine's, not the model's) still prints its counts, and the
verdicts read counts: a check whose every run was flagged gives its
verdict all the same, and the table says how many runs were flagged.

Exits 1 when a check gives no verdict, when repeated runs of one exercise
disagree, or when a check cannot start; 0 otherwise.
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import shlex
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import check_exercises  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
VERDICT = re.compile(r"<!--\s*verdict:\s*(.*?)\s*-->")
UNATTENDED = re.compile(r"<!--\s*unattended:\s*no:\s*(.*?)\s*-->", re.S)


def exercise_list(root):
    """[(id "11.1", title, page, check lines, verdict patterns, why not)]."""
    found = []
    for page in check_exercises.chapter_pages(root):
        lines = check_exercises.section(page.read_text(), "Exercises") or []
        chapter = page.stem[:2].lstrip("0")
        for number, (title, body) in enumerate(check_exercises.exercises(lines), 1):
            text = "\n".join(body)
            blocks = check_exercises.sh_blocks(body)
            why = UNATTENDED.search(text)
            found.append({"id": f"{chapter}.{number}", "title": title, "page": page.name,
                          "check": [ln for block in blocks for ln in block],
                          "verdict": VERDICT.findall(text),
                          "why_not": " ".join(why.group(1).split()) if why else None})
    return found


def edited_files(check):
    """The files a check's `sed -i` lines edit."""
    files = []
    for line in check:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        if words[:1] == ["sed"] and "-i" in words:
            rest = [w for w in words[1:] if w != "-i"]
            scripts = [i + 1 for i, w in enumerate(rest) if w == "-e"]
            names = [w for i, w in enumerate(rest)
                     if w != "-e" and i not in scripts]
            files += names[1:] if not scripts else names
    return sorted(set(files))


def for_bin_dir(check, bin_dir):
    """The check without a build, or the reason it needs one."""
    if edited_files(check):
        return None, "it edits the code, which needs a rebuild"
    out = []
    for line in check:
        stripped = line.strip()
        if re.match(r"bazel (run|test)\b", stripped):
            return None, "it runs `bazel run` or `bazel test`"
        if re.match(r"bazel build\b", stripped):
            continue
        line = line.replace(" --no-build", "")
        line = re.sub(r"(python3 tools/run_chapter\.py \S+)", rf"\1 --bin-dir {bin_dir}", line)
        out.append(line)
    return out, None


def verdict_of(patterns, output):
    found = []
    for line in output.splitlines():
        for pattern in patterns:
            for m in re.finditer(pattern, line):
                found.append(" ".join(g for g in m.groups() if g is not None) if m.groups()
                             else m.group(0))
    return found


def flagged_runs(output):
    """How many chapter runs of a check's output were flagged (simnic:
    preempted, engine behind); their counts stand, their rates do not."""
    return len(re.findall(r"^\s*run flagged \(", output, re.M))


def run_check(root, exercise, check, timeout):
    files = edited_files(check)
    script = "\n".join(check) + "\n"
    started = time.monotonic()
    try:
        run = subprocess.run(["bash", "-c", script], cwd=root, capture_output=True, text=True,
                             timeout=timeout, start_new_session=True)
        output, rc = run.stdout + run.stderr, run.returncode
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) \
            else (e.stdout or "")
        output, rc = output + f"\nrun_exercises: no end within {timeout} s", 124
    finally:
        if files:
            subprocess.run(["git", "checkout", "--", *files], cwd=root, capture_output=True)
    return output, rc, time.monotonic() - started


def dirty(root, files):
    if not files:
        return []
    run = subprocess.run(["git", "status", "--porcelain", "--", *files], cwd=root,
                         capture_output=True, text=True)
    return [ln[3:] for ln in run.stdout.splitlines()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, default=ROOT,
                        help="the checkout (default: this tool's)")
    parser.add_argument("--only", nargs="+", default=None, metavar="N.M",
                        help="exercise ids, e.g. 11.1 14.1 (default: all)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each check")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for one check")
    parser.add_argument("--bin-dir", type=pathlib.Path, default=None,
                        help="binaries: DIR/<chapter>/server and client; no Bazel")
    parser.add_argument("--record", type=pathlib.Path, default=None, metavar="DIR",
                        help="write DIR/verdicts.md and DIR/runs.jsonl")
    parser.add_argument("--note", default=None,
                        help="one line for the recording's header: what else ran (stress-ng ...)")
    parser.add_argument("--list", action="store_true", help="list the exercises and exit")
    args = parser.parse_args()
    root = args.root.resolve()
    exercises = exercise_list(root)
    if args.only:
        unknown = set(args.only) - {e["id"] for e in exercises}
        if unknown:
            print(f"run_exercises: no exercise {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        exercises = [e for e in exercises if e["id"] in args.only]
    if args.list:
        for e in exercises:
            state = (f"not unattended: {e['why_not']}" if e["why_not"] else
                     f"verdict: {' | '.join(e['verdict'])}" if e["verdict"] else "NO VERDICT")
            print(f"{e['id']:5} {e['title']}: {state}")
        return 0

    runs, table, failed = [], [], False
    started = time.monotonic()
    for e in exercises:
        if e["why_not"]:
            table.append((e, "not run", f"cannot run unattended: {e['why_not']}"))
            continue
        if not e["verdict"]:
            table.append((e, "NO VERDICT", "the page gives no <!-- verdict: ... --> line"))
            failed = True
            continue
        check = e["check"]
        if args.bin_dir:
            check, why = for_bin_dir(check, args.bin_dir.resolve())
            if check is None:
                table.append((e, "skipped", f"not with --bin-dir: {why}"))
                continue
        mine = dirty(root, edited_files(check))
        if mine:
            print(f"run_exercises: {e['id']}: {', '.join(mine)} has changes of yours; "
                  "commit or stash them first", file=sys.stderr)
            return 2
        verdicts, flagged = [], 0
        for i in range(1, args.repeat + 1):
            output, rc, seconds = run_check(root, e, check, args.timeout)
            verdict = verdict_of(e["verdict"], output)
            verdicts.append(verdict)
            flags = flagged_runs(output)
            flagged += bool(flags)
            runs.append({"exercise": e["id"], "run": i, "rc": rc, "seconds": round(seconds, 1),
                         "verdict": verdict, "flagged_chapter_runs": flags,
                         "output_tail": output.strip().splitlines()[-40:]})
            print(f"{e['id']} run {i}/{args.repeat}: {'; '.join(verdict) or 'NO VERDICT'} "
                  f"({seconds:.0f} s{f', {flags} flagged chapter run(s)' if flags else ''})",
                  flush=True)
            if not verdict:
                print("\n".join(f"    | {ln}" for ln in output.strip().splitlines()[-8:]))
        same = sum(v == verdicts[0] for v in verdicts)
        ok = bool(verdicts[0]) and same == len(verdicts)
        failed |= not ok
        state = f"{same}/{len(verdicts)} same" if verdicts[0] else "NO VERDICT"
        if flagged:
            state += f" ({flagged} with flagged runs)"
        table.append((e, state, "; ".join(verdicts[0]) or "-"))

    print()
    for e, state, verdict in table:
        print(f"{e['id']:5} {state:12} {verdict}")
    if any("flagged" in state for _, state, _ in table):
        print("(a flagged run's rate is the machine's, not the model's; its counts, which the "
              "verdicts read, stand)")
    if args.record:
        record(args, root, table, runs, time.monotonic() - started)
    return 1 if failed else 0


def record(args, root, table, runs, seconds):
    out = args.record if args.record.is_absolute() else root / args.record
    out.mkdir(parents=True, exist_ok=True)
    code = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                          capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()
    with open(out / "runs.jsonl", "w") as f:
        for r in runs:
            f.write(json.dumps(r) + "\n")
    lines = [
        "# The exercises' checks, run unattended",
        "",
        "Recorded by `maint/run_exercises.py`: every exercise's `Check:` block run "
        f"{args.repeat} time(s), its verdict read with the page's `<!-- verdict: ... -->` "
        "patterns (runs.jsonl has every run).",
        "",
        f"- machine: {os.cpu_count()} CPUs, {platform.platform()}",
        f"- code: {code}",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ} "
        f"(took {seconds:.0f} s)",
        f"- load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
        "- command: `python3 maint/run_exercises.py "
        + " ".join(sys.argv[1:]) + "`",
    ] + ([f"- beside it: {args.note}"] if args.note else []) + [
        "",
        "| exercise | page | runs that agree | verdict |",
        "|---|---|---|---|",
    ]
    for e, state, verdict in table:
        lines.append(f"| {e['id']} {e['title']} | [{e['page']}](../../docs/{e['page']}) | "
                     f"{state} | {verdict.replace('|', '/')} |")
    (out / "verdicts.md").write_text("\n".join(lines) + "\n")
    print(f"run_exercises: wrote {out / 'verdicts.md'}")


if __name__ == "__main__":
    sys.exit(main())
