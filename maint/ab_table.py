#!/usr/bin/env python3
"""Two builds of the chapters, side by side: the table of an A/B recording.

Reads compare.py folders named <machine>-ab-<side>-r<round>-simnic-...
under DIR (side: `before`, and the build set beside it, `now` unless --after
names another), pools each side's counted runs over the rounds, and prints,
per chapter and page size, each side's geometric mean rate, their ratio with
the 95% interval of Welch's t-test (compare.py's rule for steps), the ratio
in each round on its own (the rounds' spread is the machine's drift, which
pooled runs do not show), and the program's and the provider's time per
WRITE.

  python3 maint/ab_table.py results/core-restructure-speed/interleaved
  python3 maint/ab_table.py results/core-restructure-speed/inlined --after lto
"""
import argparse
import collections
import json
import math
import pathlib
import re
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import compare  # noqa: E402

# compare.py's verdict on a step, in words for two builds of one chapter.
AB_WORDS = {"inside the noise": "unchanged within the noise", "gain": "faster", "LOSS": "SLOWER"}
FOLDER = re.compile(r"-ab-([a-z]+)-r(\d+)-simnic-host-(\d+x\d+)-page(\d+)$")


def collect(root):
    """{(page, layout, chapter): {side: [records]}} and the rounds seen."""
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    rounds = set()
    for path in sorted(root.glob("*/results.json")):
        m = FOLDER.search(path.parent.name)
        if not m:
            continue
        side, rnd, layout, page = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
        rounds.add(rnd)
        for r in json.loads(path.read_text())["records"]:
            if r.get("ok") and not r.get("flags") and r.get("gbps", 0) > 0:
                runs[(page, layout, r["chapter"])][side].append(dict(r, ab_round=rnd))
    return runs, sorted(rounds)


def gmean(rs):
    return math.exp(statistics.fmean(math.log(r["mops"]) for r in rs))


def by_round(b, a):
    """The after/before ratio of each round that ran both sides."""
    rounds = sorted({r["ab_round"] for r in b} & {r["ab_round"] for r in a})
    return " ".join(f"{gmean([r for r in a if r['ab_round'] == n]) / gmean([r for r in b if r['ab_round'] == n]):.3f}"
                    for n in rounds)


def table(runs, after="now"):
    lines = [f"| chapter | page | runs before / {after} | before Mops/s | {after} Mops/s | "
             f"{after} / before (95%, Welch) | verdict | {after} / before, each round | "
             f"ns app before / {after} | ns provider before / {after} |",
             "|---|---|---:|---:|---:|---:|---|---|---:|---:|"]
    for (page, layout, chapter) in sorted(runs, key=lambda k: (-k[0], k[2])):
        b, a = runs[(page, layout, chapter)]["before"], runs[(page, layout, chapter)][after]
        if not b or not a:
            continue
        step, noise = compare.step_between([math.log(r["gbps"]) for r in b],
                                           [math.log(r["gbps"]) for r in a])
        verdict = AB_WORDS.get(compare.step_verdict(step, noise), "noise unknown")

        def ns(rs, key):
            vals = [r[key] for r in rs if r.get(key) is not None]
            return f"{statistics.median(vals):.0f}" if vals else ""
        lines.append(f"| {chapter} | {layout}-page{page} | {len(b)} / {len(a)} | {gmean(b):.3f} | "
                     f"{gmean(a):.3f} | x{step:.3f} ±{noise:.3f} | {verdict} | {by_round(b, a)} | "
                     f"{ns(b, 'ns_per_write_app')} / {ns(a, 'ns_per_write_app')} | "
                     f"{ns(b, 'ns_per_write_provider')} / {ns(a, 'ns_per_write_provider')} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=pathlib.Path, help="folder holding the A/B recordings")
    parser.add_argument("--after", default="now",
                        help="the side compared with `before` (default: now)")
    args = parser.parse_args()
    runs, rounds = collect(args.dir)
    if not any(side[args.after] for side in runs.values()):
        parser.error(f"no <machine>-ab-<before|{args.after}>-r<N>-simnic-* folders in {args.dir}")
    print(f"Rounds {', '.join(map(str, rounds))}; runs pooled over them (SIMULATED).\n")
    print(table(runs, args.after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
