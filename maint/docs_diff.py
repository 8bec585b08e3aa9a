#!/usr/bin/env python3
"""Regenerates the generated parts of the docs pages from the code and results.

The pages in docs/ (and results/README.md, README.md) hold blocks between marker
comments; this tool writes them, so that no diff and no number is typed by
hand:

  <!-- diff:begin 10_warmup -->      the chapter's server.cc against the
  <!-- diff:end -->                  previous chapter's (and client.cc and
                                     BUILD.bazel where they differ in more
                                     than the chapter's name)
  <!-- source:begin chapters/09_multinet/server.cc -->
  <!-- source:end -->                a whole file
  <!-- code:begin common/network.cc#Network::ProgressPendingOps -->
  <!-- code:end -->                  one function of a file, from its
                                     definition line (with a `template <...>`
                                     line just above it) to its closing brace
                                     at the same indentation: the library
                                     code a chapter's option turns on. A
                                     method defined inside its class is found
                                     as Class::Method too; `#Name@2` picks the
                                     second of several definitions (overloads)
  <!-- series:begin ladder -->       the series' own ladder: Gbps, Mops/s and
  <!-- series:end -->                share of 3200 Gbps per chapter
  <!-- results:begin 10_warmup -->   the chapter page's one results table:
  <!-- results:end -->               the series' row on its p5, the simulated
                                     row of the recorded folder nearest a
                                     learner's machine (the fewest CPUs), an
                                     empty row with the command that fills
                                     it, and links to every recording and its
                                     counters
  <!-- counters:begin 14_batch -->    the chapter's counters beside the
  <!-- counters:end -->              previous chapter's, from every recording
                                     that has them (simulated ones labelled;
                                     results/counters.md)
  <!-- results:begin all -->         every chapter, every recorded folder
  <!-- results:end -->
  <!-- ladder:begin h200x2-fresh -->  the lessons' steps and the predictions'
  <!-- ladder:end -->                errors of every simnic folder under
                                     results/h200x2-fresh/, by page size
                                     and CPU count, round by round
                                     (tools/simnic_fit.py --summary); a
                                     results/<group>/README.md holding one
                                     is checked like the pages
  <!-- costs:begin simnic -->        simnic/costs.h as a table: each frozen
  <!-- costs:end -->                 cost, its variable and its rule
                                     (tools/simnic_fit.py --costs)
  <!-- model:begin FOLDER -->        the line simnic printed about its model
  <!-- model:end -->                 in a recording (results/FOLDER/
                                     results.json, every run's "model"),
                                     wrapped
  <!-- output:begin 14_batch -->     what a short run of the chapter prints
  <!-- output:end -->                ("What you should see"): the transcript
                                     docs/output/14_batch.txt, which
                                     maint/capture_output.py makes by running
                                     the chapter and //docs:output_check_test
                                     checks against the binaries

  <!-- value:begin EXPR -->240<!-- value:end -->
                                     one number inside a sentence, read from
                                     the code or a recording (VALUES below):
                                     `simnic.doorbell_ns` (simnic/model.h's
                                     defaults), `run_chapter.SIMNIC_NICS_PER_GPU`
                                     (a tool's constant), `code("chapters/14_batch/
                                     server.cc", "kBatchSize")` (a C++ constant),
                                     `count(FILE, REGEX)` (matching lines),
                                     `literal(FILE, REGEX)` (the number its
                                     group finds: a literal without a name),
                                     `series.gbps("12_pin")`, the series' p5
                                     (`series.gpus`, `series.nics`,
                                     `series.nics_per_gpu`, `series.nic_gbps`,
                                     `series.cores_per_gpu`), the short run of
                                     "What you should see" (`capture.gpus`,
                                     `capture.nics_per_gpu`, `capture.writes`,
                                     maint/capture_output.py's flags),
                                     `rec(FOLDER, CHAPTER, COLUMN)` (with
                                     `memory="host"` and the like where a
                                     folder holds several tables),
                                     `recs(GLOB)` (the folders a glob
                                     names), `meta(FOLDER, KEY, ...)` (its
                                     results.json's meta), `span(NUMBERS,
                                     FORMAT)` ("low-high");
                                     arithmetic allowed, `EXPR | FORMAT`
                                     formats (`.1f`, `,.0f`)

  python3 maint/docs_diff.py --write   # update the pages
  python3 maint/docs_diff.py --check   # exit 1 and list the stale pages

--check also fails, naming the page, when a code block names a function the
file no longer defines (renamed or moved: update the page's marker), and
when a page quotes the counters of a recording made under an older counter
rule than today's (common/counter_rule.h): a paragraph outside the
generated blocks that names such a recording's folder and a counter
(`doorbells`, `post_calls`, ...) beside a number. A learner's run counts by
today's rule; re-record the folder (`tools/compare.py ... --record`) or
drop the quote. The generated counter tables leave such recordings out and
say so.

--check also fails when a chapter page (or 00_concepts.md, README.md) types
a number with a unit (ns, us, Gbps, Mops/s, %) in its prose instead of
generating it with a value marker: a typed cost or rate goes stale the day
the code or the model changes. And when any page of docs/ types a number
that a constant of the code or of the series gives next to a word that
names it ("32 NICs", "16 WRITEs per visit", "4 NICs per GPU":
NAMED_CONSTANTS below lists them); the message gives the marker to write.

`bazel test //docs:docs_check_test` runs --check (part of `bazel test //...`).
"""
import argparse
import csv
import difflib
import fnmatch
import json
import pathlib
import re
import sys
import textwrap

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import series  # noqa: E402
import simnic_fit  # noqa: E402

BLOCK = re.compile(r"(<!-- (diff|source|results|code|series|counters|output|ladder|costs|model):begin ([^ ]+) -->\n)(.*?)"
                   r"(<!-- \2:end -->)", re.S)


VALUE = re.compile(r"<!-- value:begin (.+?) -->(.*?)<!-- value:end -->")


class BlockError(ValueError):
    """A block the page names cannot be made (a function that is gone)."""


def todays_counter_rule(root):
    """kCounterRule of common/counter_rule.h: what today's counters mean."""
    text = (pathlib.Path(root) / "common" / "counter_rule.h").read_text()
    return int(re.search(r"kCounterRule = (\d+);", text).group(1))


def recording_rule(rec):
    """The counter rule a compare.py recording was made under (its csv's
    counter_rule column), 1 for one recorded before recordings carried it."""
    first = next(iter(rec["rows"].values()))
    value = first.get("counter_rule", "")
    return int(value) if value not in ("", None) else 1


def is_simulated(folder, provider):
    """A recording of the simulated NIC (simnic): its numbers are simulated and
    never share a column with measured provider numbers."""
    return provider == "simnic" or "simnic" in folder.split("/")[0].split("-")


class Repo:
    def __init__(self, root):
        self.root = pathlib.Path(root)

    def chapters(self):
        base = self.root / "chapters"
        return sorted(p.name for p in base.iterdir() if (p / "server.cc").exists())

    def read(self, rel):
        return (self.root / rel).read_text()

    def previous(self, chapter):
        order = self.chapters()
        i = order.index(chapter)
        return order[i - 1] if i > 0 else None

    def result_sets(self):
        """Every recording (read once per Repo: each page's blocks ask)."""
        if not hasattr(self, "_result_sets"):
            self._result_sets = self._read_result_sets()
        return self._result_sets

    def _read_result_sets(self):
        """Every recording: one per folder written by tools/compare.py, one per
        (memory, page size, layout) found in a folder whose results.csv has
        one row per chapter and configuration (as maint/gpu_tables.py writes
        them). Each is a dict: folder, rows ({chapter: row}), with the
        rows in compare.py's columns."""
        sets = []
        results = self.root / "results"
        paths = sorted(results.glob("*/results.csv")) + sorted(results.glob("*/*/results.csv"))
        for path in paths:
            folder = path.parent.relative_to(results).as_posix()
            if "experiments" in folder.split("/"):
                continue  # one-off measurements, explained on their own pages
            with open(path, newline="") as f:
                # Only the chapters as shipped: a client run with a non-default
                # --poll-threads is an experiment.
                rows = [r for r in csv.DictReader(f) if r.get("poll_threads", "gpu") in ("", "gpu")]
            if not rows:
                continue
            if "gbps_median" in rows[0]:  # tools/compare.py
                sets.append({"folder": folder, "rows": {r["chapter"]: r for r in rows},
                             "kind": "compare",
                             "simulated": is_simulated(folder, rows[0].get("provider", ""))})
                continue
            if not {"chapter", "gbps"} <= set(rows[0]):
                continue  # a table of some other kind: not shown
            provider = next((t for t in folder.split("-") if t in ("shm", "tcp", "efa")), "")
            groups = {}
            for r in rows:
                key = (r.get("memory", ""), r.get("page_size", ""), r.get("gpus", ""),
                       r.get("nics_per_gpu", ""))
                groups.setdefault(key, []).append(r)
            for (memory, page, gpus, nics), group in groups.items():
                out = {}
                prev = None
                for r in sorted(group, key=lambda r: r["chapter"]):
                    g = _f(r, "gbps")
                    out[r["chapter"]] = {
                        "chapter": r["chapter"], "provider": provider, "memory": memory,
                        "gpus": gpus, "nics_per_gpu": nics, "page_size": page,
                        "gbps_median": r.get("gbps", ""), "mops_median": r.get("mops", ""),
                        "runs": r.get("runs", ""), "runs_ok": r.get("runs", ""),
                        "vs_previous": "" if g is None or not prev else g / prev - 1}
                    prev = g
                sets.append({"folder": folder, "rows": out, "kind": "gpu_tables",
                             "simulated": is_simulated(folder, provider)})
        return sets


# --- diffs -----------------------------------------------------------------

def unified(repo, a, b):
    lines = difflib.unified_diff(repo.read(a).splitlines(), repo.read(b).splitlines(),
                                 fromfile=a, tofile=b, lineterm="", n=3)
    return "\n".join(lines)


def _normalized(text, old, new):
    """The file with the chapter's name made equal, comments dropped."""
    text = text.replace(old, new)
    kept = [ln for ln in text.splitlines() if not re.match(r"\s*(#|//)", ln)]
    return "\n".join(kept)


def render_diff(repo, chapter):
    prev = repo.previous(chapter)
    if prev is None:
        raise ValueError(f"{chapter} is the first chapter: it has no diff (use source:)")
    out = [f"```diff\n{unified(repo, f'chapters/{prev}/server.cc', f'chapters/{chapter}/server.cc')}"
           "\n```"]
    same = []
    for name in ("client.cc", "BUILD.bazel"):
        a, b = f"chapters/{prev}/{name}", f"chapters/{chapter}/{name}"
        if _normalized(repo.read(a), prev, chapter) == _normalized(repo.read(b), prev, chapter):
            same.append(f"`{name}`")
        else:
            out.append(f"```diff\n{unified(repo, a, b)}\n```")
    if same:
        out.append(f"{' and '.join(same)} differ from {prev}'s only in the chapter's name"
                   + (" (the client is common: `common/client.cc`)." if "`client.cc`" in same
                      else "."))
    return "\n\n".join(out) + "\n"


def render_source(repo, rel):
    lang = "cpp" if rel.endswith((".cc", ".h")) else ""
    return f"```{lang}\n{repo.read(rel).rstrip()}\n```\n"


# --- one function of a library file ----------------------------------------

def _definition_at(lines, i):
    """(first line, last line) of the function whose name is on line i, or
    None when line i only declares it (a `;` comes before any `{`)."""
    first = i
    if i > 0 and re.match(r"\s*template\s*<.*>\s*$", lines[i - 1]):
        first = i - 1
    indent = re.match(r"\s*", lines[i]).group(0)
    depth = 0  # parentheses: a default argument may hold braces or semicolons
    for j in range(i, len(lines)):
        for ch in lines[j]:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif depth == 0 and ch == ";":
                return None
            elif depth == 0 and ch == "{":
                opening = lines[j][lines[j].index("{"):]
                if opening.count("{") == opening.count("}"):
                    return first, j  # a one-line body
                for k in range(j + 1, len(lines)):
                    if re.match(re.escape(indent) + r"\}", lines[k]):
                        return first, k
                return None
    return None


def _class_body(lines, cls):
    """(first, last) line of `class cls` / `struct cls`'s body, or None."""
    for i, line in enumerate(lines):
        if re.match(r"\s*(class|struct)\s+" + re.escape(cls) + r"\b[^;]*$", line):
            indent = re.match(r"\s*", line).group(0)
            for k in range(i + 1, len(lines)):
                if re.match(re.escape(indent) + r"\}", lines[k]):
                    return i + 1, k
    return None


def find_function(text, name):
    """The lines of function `name` in `text` (C++): `Class::Method`,
    `Function`, or either with `@N` for the N-th definition of that name.
    Raises BlockError when there is no such definition, or several and no
    `@N`."""
    name, _, nth = name.partition("@")
    lines = text.splitlines()
    found = []
    pattern = re.compile(r"(?<![\w:~])" + re.escape(name) + r"\s*\(")
    for i, line in enumerate(lines):
        if pattern.search(line) and not re.match(r"\s*(//|\*)", line):
            span = _definition_at(lines, i)
            if span:
                found.append(span)
    if not found and "::" in name:  # a method defined inside its class
        cls, _, method = name.rpartition("::")
        body = _class_body(lines, cls.rpartition("::")[2])
        if body:
            pattern = re.compile(r"(?<![\w:~.>])" + re.escape(method) + r"\s*\(")
            for i in range(*body):
                if pattern.search(lines[i]) and not re.match(r"\s*(//|\*|return\b)", lines[i]):
                    span = _definition_at(lines, i)
                    if span:
                        found.append(span)
    if not found:
        raise BlockError(f"defines no function {name}")
    if nth:
        if not nth.isdigit() or not 1 <= int(nth) <= len(found):
            raise BlockError(f"has {len(found)} definition(s) of {name}, not a number {nth}")
        found = [found[int(nth) - 1]]
    elif len(found) > 1:
        raise BlockError(f"has {len(found)} definitions of {name} (lines "
                         + ", ".join(str(a + 1) for a, _ in found) + "): add @N to pick one")
    first, last = found[0]
    body = lines[first:last + 1]
    indent = len(body[0]) - len(body[0].lstrip())  # a method's, inside its class
    return [ln[indent:] if ln[:indent].isspace() else ln for ln in body]


def render_code(repo, arg):
    """A fenced cpp block with one function of a file."""
    rel, sep, name = arg.partition("#")
    if not sep or not name:
        raise BlockError(f"code:begin {arg}: name a function as FILE#NAME")
    try:
        text = repo.read(rel)
    except OSError:
        raise BlockError(f"code:begin {arg}: no file {rel}")
    try:
        lines = find_function(text, name)
    except BlockError as e:
        raise BlockError(f"code:begin {arg}: {rel} {e}")
    return "```cpp\n" + "\n".join(lines) + "\n```\n"


# --- what a short run prints ------------------------------------------------

def render_output(repo, chapter):
    """docs/output/<chapter>.txt (maint/capture_output.py), as a text block."""
    rel = f"docs/output/{chapter}.txt"
    try:
        text = repo.read(rel)
    except OSError:
        raise BlockError(f"output:begin {chapter}: no {rel} (bazel build //chapters/... && "
                         f"python3 maint/capture_output.py --chapters {chapter})")
    return "```text\n" + text.rstrip("\n") + "\n```\n"


def render_model(repo, folder):
    """What simnic printed about itself in a recording, wrapped as a text
    block: the model line is quoted from a run, never typed."""
    try:
        records = json.loads((repo.root / "results" / folder / "results.json")
                             .read_text())["records"]
        models = {r["model"] for r in records if r.get("model")}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BlockError(f"model:begin {folder}: no results/{folder}/results.json records: {e}")
    if len(models) != 1:
        raise BlockError(f"model:begin {folder}: {len(models)} different model lines")
    line = models.pop()
    return "```text\n" + "\n".join(textwrap.wrap(line, 96)) + "\n```\n"


# --- the series' ladder ----------------------------------------------------

def render_ladder(repo, group):
    """tools/simnic_fit.py --summary of the compare.py folders under
    results/<group>/."""
    folders = sorted(p.parent for p in (repo.root / "results" / group).glob("*/results.json"))
    if not folders:
        raise BlockError(f"ladder:begin {group}: no results/{group}/*/results.json")
    return simnic_fit.summary_text(folders)


def render_costs(repo, arg):
    """simnic's frozen costs, each with its rule (tools/simnic_fit.py --costs)."""
    if arg != "simnic":
        raise BlockError(f"costs:begin {arg}: only `simnic` exists")
    return simnic_fit.costs_table(repo.root / "simnic" / "costs.h")


def render_series(arg):
    """The series' own numbers per chapter (tools/series.py), quoted."""
    if arg != "ladder":
        raise BlockError(f"series:begin {arg}: only `ladder` exists")
    lines = ["| chapter | the idea | Gbps | M WRITEs/s (the series' \"Mpps\") "
             "| share of 3200 Gbps |",
             "|---|---|---:|---:|---:|"]
    for chapter in series.CHAPTERS:
        lines.append(f"| {chapter} | {series.idea(chapter)} | {series.series_gbps(chapter):.3f} | "
                     f"{series.series_mops(chapter):.3f} | "
                     f"{100 * series.series_share(chapter):.1f}% |")
    return "\n".join(lines) + "\n"


# --- results ---------------------------------------------------------------

def _f(row, key):
    v = row.get(key, "") if row else ""
    return float(v) if v not in ("", None) else None


def _layout(row):
    size = int(row["page_size"])
    page = (f"{size / 2**20:g} MiB" if size >= 2**20 else
            f"{size / 1024:g} KiB" if size >= 1024 else f"{size} B")
    return f"{row['gpus']} x {row['nics_per_gpu']}, {page}"


def _change(x):
    return "" if x is None else f"{100 * x:+.1f}%"


def _series_change(chapter):
    prev = series.previous(chapter)
    return series.series_gbps(chapter) / series.series_gbps(prev) - 1 if prev else None


def _link(prefix, folder):
    return f"[{folder}]({prefix}{folder}/results.md)"


COUNTER_COLUMNS = [  # compare.py's results.csv columns, as the pages name them
    ("post_calls_per_write", "post calls / WRITE", 3),
    ("doorbells_per_write", "doorbells / WRITE", 3),
    ("cq_reads_per_write", "CQ reads / WRITE", 3),
    ("eagain_per_write", "EAGAIN / WRITE", 4),
    ("op_allocations_per_write", "allocations / WRITE", 4),
    ("ns_per_write_provider", "CPU ns / WRITE in provider", 1),
    ("ns_per_write_app", "CPU ns / WRITE in app", 1),
    ("migrations", "migrations", 0),
    ("involuntary_switches", "involuntary switches", 0),
]


def render_counters(repo, chapter, prefix):
    """The chapter's counters beside the previous chapter's, from every
    recording that has them: measured ones in one table, simulated ones in a
    table of their own, labelled (they never share a column)."""
    prev = repo.previous(chapter)
    shown = [c for c in (prev, chapter) if c]
    header = ["| chapter | recorded in | " + " | ".join(name for _, name, _ in COUNTER_COLUMNS)
              + " |", "|---|---|" + "---:|" * len(COUNTER_COLUMNS)]
    tables = {False: [], True: []}
    today = todays_counter_rule(repo.root)
    older = []
    for rec in repo.result_sets():
        rows = [rec["rows"].get(c) for c in shown]
        if any(r is None or _f(r, "cq_reads_per_write") is None for r in rows):
            continue
        if recording_rule(rec) < today:
            older.append(f"{_link(prefix, rec['folder'])} (rule {recording_rule(rec)})")
            continue
        for c, r in zip(shown, rows):
            cells = []
            for key, _, digits in COUNTER_COLUMNS:
                v = _f(r, key)
                cells.append("" if v is None else f"{v:.{digits}f}")
            tables[rec["simulated"]].append(f"| {c} | {_link(prefix, rec['folder'])} | "
                                            + " | ".join(cells) + " |")
    readme = "../results/README.md" if prefix else "README.md"
    what = "../docs/counters.md" if not prefix else "counters.md"
    out = [f"Medians over the runs, per WRITE of the writer's whole run ([what each counts]"
           f"({what})):", ""]
    if tables[False]:
        out += header + tables[False]
    else:
        out.append(f"_No measured run with the counters is recorded yet (see [results]({readme}))._")
    if tables[True]:
        out += ["", "Simulated, not measured on a NIC (`simnic`): counters of the simulated "
                "ladder, apart from the measured ones.", ""] + header + tables[True]
    if older:
        out += ["", f"Not shown: recorded under an older counter rule than today's ({today}, "
                "`common/counter_rule.h`), so a run of today's code counts differently: "
                + ", ".join(older) + "."]
    return "\n".join(out) + "\n"


def folder_cpus(folder):
    """How many CPUs a recording's runs could use, from its folder's name
    (`-taskset4-` before `-16core-`); None when the name does not say."""
    m = re.search(r"-taskset(\d+)-", folder) or re.search(r"(?:^|-)(\d+)core-", folder)
    return int(m.group(1)) if m else None


def nearest_simulated(repo, chapter):
    """The simulated recording nearest a learner's machine: the fewest CPUs
    (a laptop or a small VM has few), at the page size the tools choose for
    simnic (run_chapter.SIMNIC_PAGE_SIZE), made under the frozen model (its
    rows carry the prediction printed before its runs, as a learner's run
    does), then by name."""
    page = str(tool_constants(repo.root, "run_chapter").get("SIMNIC_PAGE_SIZE", ""))
    sims = [rec for rec in repo.result_sets() if rec["simulated"] and chapter in rec["rows"]
            and folder_cpus(rec["folder"]) is not None]
    sims.sort(key=lambda rec: (folder_cpus(rec["folder"]),
                               rec["rows"][chapter].get("page_size") != page,
                               rec["rows"][chapter].get("prediction_error") in (None, ""),
                               rec["folder"]))
    return sims[0] if sims else None


def render_results_chapter(repo, chapter, prefix):
    """A chapter page's one results table: the series' row on its p5, the
    simulated row of the recorded machine nearest a learner's, and an empty
    row with the command that fills it on the learner's machine."""
    prev = repo.previous(chapter)
    lines = ["| what | recorded in | provider, memory, GPUs x NICs, page | Gbps | "
             "M WRITEs/s | vs previous chapter |", "|---|---|---|---:|---:|---:|"]
    if chapter in series.CHAPTERS:
        lines.append(f"| the series on its p5 (measured) | {series.SERIES_SHORT} | efa, CUDA, "
                     f"{P5_LAYOUT} | {series.series_gbps(chapter):.3f} | "
                     f"{series.series_mops(chapter):.3f} | "
                     f"{_change(_series_change(chapter))} |")
    else:
        lines.append("| the series on its p5 | not in the series (a chapter of ours) | | | | |")
    rec = nearest_simulated(repo, chapter)
    if rec is not None:
        r = rec["rows"][chapter]
        g, m = _f(r, "gbps_median"), _f(r, "mops_median")
        lines.append(f"| **SIMULATED** (simnic), {folder_cpus(rec['folder'])} CPUs | "
                     f"{_link(prefix, rec['folder'])} | simnic, {r['memory']}, {_layout(r)} | "
                     f"{'failed' if g is None else f'{g:.3f}'} | "
                     f"{'' if m is None else f'{m:.4f}'} | {_change(_f(r, 'vs_previous'))} |")
    chapters = f"{prev} {chapter}" if prev else chapter
    lines.append(f"| your machine (SIMULATED): `python3 tools/compare.py --provider simnic "
                 f"--repeat 200 --chapters {chapters}` | `out/results/` | | | | |")
    readme = "../results/README.md" if prefix else "README.md"
    counters = "../results/counters.md" if prefix else "counters.md"
    return ("\n".join(lines) + "\n\nFill in the last row: the command prints where it wrote "
            "`results.md`; this chapter's row there is yours. It is simulated like the row above "
            "it: compare the two with each other, and the step between chapters with the "
            "series' step, never a simulated Gbps with the series' Gbps. Where its runs are "
            f"flagged (most on 2 cores; [chapter 09]({'' if prefix else '../docs/'}"
            "09_multinet.md#exercises) says why) the row reads \"not counted\": then the "
            "exact counts of the exercises below are what your machine shows. Every other "
            "recording (machines, providers, layouts, page "
            f"sizes): [all recordings]({readme}#all-recordings); their counters: "
            f"[counters]({counters}#{chapter}).\n")


P5_LAYOUT = (f"{series.P5_GPUS} x {series.P5_NICS_PER_GPU}, "
             f"{series.SERIES_PAGE_SIZE // 1024} KiB")


def render_results_all(repo, prefix):
    """One row per recording, one column per chapter: median Gbps."""
    chapters = repo.chapters()
    lines = ["| recorded on | provider, memory | GPUs x NICs, page | "
             + " | ".join(chapters) + " |",
             "|---|---|---|" + "---:|" * len(chapters)]
    for rec in [rec for rec in repo.result_sets() if not rec["simulated"]]:
        first = next(iter(rec["rows"].values()))
        cells = []
        for chapter in chapters:
            g = _f(rec["rows"].get(chapter), "gbps_median")
            cells.append("" if g is None else f"{g:.3f}")
        lines.append(f"| {_link(prefix, rec['folder'])} | "
                     f"{first['provider'] or '?'}, {first['memory']} | {_layout(first)} | "
                     + " | ".join(cells) + " |")
    cells = [f"{series.series_gbps(c):.3f} ({100 * series.series_share(c):.1f}%)"
             if c in series.CHAPTERS else "" for c in chapters]
    lines.append(f"| {series.SERIES_SHORT} (the series' own numbers, share of 3200 Gbps) | "
                 f"efa, CUDA | {P5_LAYOUT} | " + " | ".join(cells) + " |")
    sims = [rec for rec in repo.result_sets() if rec["simulated"]]
    if sims:  # the simulated NIC's ladder: a table of its own, labelled
        lines += ["", "Simulated, not measured on a NIC (`simnic`), median Gbps (simulated):",
                  "", "| simulated (simnic) | layout | " + " | ".join(chapters) + " |",
                  "|---|---|" + "---:|" * len(chapters)]
        for rec in sims:
            first = next(iter(rec["rows"].values()))
            cells = [("" if _f(rec["rows"].get(c), "gbps_median") is None
                      else f"{_f(rec['rows'][c], 'gbps_median'):.3f}") for c in chapters]
            lines.append(f"| {_link(prefix, rec['folder'])} | {first['memory']}, "
                         f"{_layout(first)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# --- numbers inside sentences ----------------------------------------------

class _Fields:
    """Attribute access to a dict of numbers (simnic.doorbell_ns)."""

    def __init__(self, what, values):
        self._what, self._values = what, values

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._values:
            raise BlockError(f"{self._what} has no {name}")
        return self._values[name]


def _number(text, names=None):
    """A C++ or Python number expression (`1 << 20`, `100e9 / 256`, `2`)."""
    text = re.sub(r"(?<=\d)[uUlLfF]+\b", "", text.strip())
    return eval(text, {"__builtins__": {}}, dict(names or {}))  # noqa: S307: our own sources


def simnic_model(root):
    """simnic/model.h's struct Model: every numeric default, and the
    one-line accessors (remote_doorbell_ns) computed from them."""
    text = (pathlib.Path(root) / "simnic" / "model.h").read_text()
    # The frozen costs the defaults name (simnic/costs.h, one a line).
    costs = {}
    costs_text = (pathlib.Path(root) / "simnic" / "costs.h").read_text()
    for m in re.finditer(r"^inline constexpr \w+ (k\w+) = ([0-9.]+);", costs_text, re.M):
        costs[m.group(1)] = _number(m.group(2))
    values = {}
    for m in re.finditer(r"^\s*(?:uint32_t|int|double|size_t|uint64_t)\s+(\w+)\s*=\s*([^;]+);",
                         text, re.M):
        values[m.group(1)] = _number(m.group(2).replace("costs::", ""), costs)
    for m in re.finditer(r"^\s*\w+\s+(\w+)\(\)\s+const\s*\{\s*return\s+([^;]+);\s*\}", text,
                         re.M):
        try:
            values[m.group(1)] = _number(m.group(2), values)
        except Exception:  # noqa: BLE001: an accessor that is not arithmetic
            continue
    return values


def tool_constants(root, tool):
    """Module-level NAME = number constants of tools/<tool>.py."""
    text = (pathlib.Path(root) / "tools" / f"{tool}.py").read_text()
    values = {}
    for m in re.finditer(r"^([A-Z][A-Z0-9_]*) = ([^#\n]+)", text, re.M):
        try:
            values[m.group(1)] = _number(m.group(2), values)
        except Exception:  # noqa: BLE001: not a number (a path, a list)
            continue
    return values


def code_constant(root, rel, name):
    """`name = VALUE;` (constexpr, const or an enum's) in a C++ file, or in
    the files a glob names (`common/*.h`: a constant that moves between
    files of a folder stays found; all its definitions must agree)."""
    root = pathlib.Path(root)
    values = set()
    for path in sorted(root.glob(rel)):
        for m in re.finditer(r"\b" + re.escape(name) + r"\s*=\s*([^;,}]+)[;,}]",
                             path.read_text()):
            values.add(_number(m.group(1)))
    if len(values) != 1:
        raise BlockError(f"{rel} defines {name} " + ("nowhere" if not values else
                                                      f"with values {sorted(values)}"))
    return values.pop()


def code_count(root, rel, pattern):
    """How many lines of a file (or of the files a glob names) match a
    regular expression, comment lines left out: `++posted_write_ops_`
    statements, say."""
    paths = sorted(pathlib.Path(root).glob(rel))
    if not paths:
        raise BlockError(f"no file {rel}")
    return sum(1 for path in paths for line in path.read_text().splitlines()
               if not re.match(r"\s*//", line) and re.search(pattern, line))


def capture_flags(root):
    """The numeric flags of maint/capture_output.py's short run (`--gpus 1`
    as capture.gpus), and the WRITEs it makes (capture.writes)."""
    text = (pathlib.Path(root) / "maint" / "capture_output.py").read_text()
    flags = {m.group(1).replace("-", "_"): _number(m.group(2))
             for m in re.finditer(r'"--([a-z-]+)",\s*"(\d+)"', text)}
    if {"gpus", "pages", "repeat"} <= set(flags):
        buffers = code_constant(root, "common/*.h", "kBuffersPerGpu")
        flags["writes"] = flags["gpus"] * buffers * flags["pages"] * flags["repeat"]
    return flags


def code_literal(root, rel, pattern):
    """The number a regular expression's first group finds in a file (or
    the files a glob names), comment lines left out: a literal the code
    does not name (`% (\\d+) == 0`). Every match must give the same."""
    paths = sorted(pathlib.Path(root).glob(rel))
    if not paths:
        raise BlockError(f"no file {rel}")
    values = {_number(m.group(1)) for path in paths for line in path.read_text().splitlines()
              if not re.match(r"\s*//", line) for m in re.finditer(pattern, line)}
    if len(values) != 1:
        raise BlockError(f"{rel} has " + ("no match" if not values else
                                           f"the values {sorted(values)}") + f" for {pattern}")
    return values.pop()


def value_names(repo):
    """What a value marker may name (each read once per Repo)."""
    if not hasattr(repo, "_value_names"):
        def rec(folder, chapter, column, **match):
            """A recording's number; `memory="host"`, `page_size="65536"`
            pick one of a folder's tables where it has several."""
            for r in repo.result_sets():
                first = next(iter(r["rows"].values()))
                if r["folder"] == folder and all(str(first.get(k)) == str(v)
                                                 for k, v in match.items()):
                    raw = (r["rows"].get(chapter) or {}).get(column)
                    try:
                        v = _f(r["rows"].get(chapter), column)
                    except ValueError:  # a word, where the column holds one (step_verdict)
                        v = raw
                    if v is None:
                        raise BlockError(f"results/{folder} has no {column} for {chapter}")
                    return v
            raise BlockError(f"no recorded folder results/{folder}")

        def recs(pattern):
            """The recorded folders whose name (under results/) matches a
            glob: `recs("h200x2-fresh/*page256")`."""
            found = sorted({r["folder"] for r in repo.result_sets()
                            if fnmatch.fnmatchcase(r["folder"], pattern)})
            if not found:
                raise BlockError(f"no recorded folder matches results/{pattern}")
            return found

        def meta(folder, *keys):
            """A field of a compare.py folder's results.json meta:
            `meta(FOLDER, "primitives", "line_ns")`, `meta(FOLDER, "seconds")`."""
            try:
                value = json.loads((repo.root / "results" / folder / "results.json")
                                   .read_text())["meta"]
                for key in keys:
                    value = value[key]
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise BlockError(f"results/{folder}/results.json has no meta {keys}: {e}")
            return value

        def span(values, fmt=".2f"):
            """"lowest-highest" of some numbers, each formatted."""
            values = list(values)
            lo, hi = format(min(values), fmt), format(max(values), fmt)
            return lo if lo == hi else f"{lo}-{hi}"

        repo._value_names = {
            "recs": recs, "meta": meta, "span": span, "sum": sum, "len": len,
            "simnic": _Fields("simnic/model.h's Model", simnic_model(repo.root)),
            "run_chapter": _Fields("tools/run_chapter.py", tool_constants(repo.root,
                                                                          "run_chapter")),
            "compare": _Fields("tools/compare.py", tool_constants(repo.root, "compare")),
            "code": lambda rel, name: code_constant(repo.root, rel, name),
            "count": lambda rel, pattern: code_count(repo.root, rel, pattern),
            "literal": lambda rel, pattern: code_literal(repo.root, rel, pattern),
            "series": _Fields("tools/series.py", {
                "gbps": series.series_gbps, "mops": series.series_mops,
                "share": lambda c: 100 * series.series_share(c),
                "link_gbps": series.SERIES_LINK_GBPS, "quote": series.QUOTES.get,
                "gpus": series.P5_GPUS, "nics": series.P5_NICS,
                "nics_per_gpu": series.P5_NICS_PER_GPU, "nic_gbps": series.P5_NIC_GBPS,
                "cores_per_gpu": series.P5_CORES_PER_GPU,
                "page_size": series.SERIES_PAGE_SIZE, "pages": series.SERIES_PAGES,
                "repeat": series.SERIES_REPEAT}),
            "capture": _Fields("maint/capture_output.py", capture_flags(repo.root)),
            "rec": rec, "round": round, "min": min, "max": max, "abs": abs, "int": int,
            "str": str, "range": range,
        }
    return repo._value_names


def render_value(repo, expr):
    """The text of one value marker: EXPR, or EXPR | FORMAT."""
    body, sep, fmt = expr.rpartition(" | ") if " | " in expr else (expr, "", "")
    try:
        # The names as globals, so that a generator inside EXPR sees them too.
        value = eval(body, {"__builtins__": {}, **value_names(repo)})  # noqa: S307
    except BlockError as e:
        raise BlockError(f"value:begin {expr}: {e}")
    except Exception as e:  # noqa: BLE001: a typo in the page
        raise BlockError(f"value:begin {expr}: {type(e).__name__}: {e}")
    if fmt:
        return format(value, fmt)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) and abs(value) >= 10000 else f"{value:g}" \
        if isinstance(value, float) else str(value)


# A number with a unit, typed into a chapter page's prose.
TYPED = re.compile(r"(?<![\w.-])\d[\d,.]*(?:\s*-\s*\d[\d,.]*)?\s*"
                   r"(?:ns|us|µs|Gbps|Mops/s|M WRITEs/s|%)(?![\w/])")


# Pages besides the chapters' that hold no typed number with a unit.
TYPED_ALSO = ("docs/00_concepts.md", "docs/README.md")


def typed_numbers(repo, page, text):
    """Numbers with a unit typed into a chapter page (or a page of
    TYPED_ALSO), outside the generated blocks, value markers, code and the
    series' title: each goes stale when the code, the model or a recording
    changes."""
    chapter_page = re.match(r"\d\d_", page.name) and (repo.root / "chapters" / page.stem).is_dir()
    if not chapter_page and page.as_posix() not in TYPED_ALSO:
        return []  # a chapter's page, or one a learner reads before them
    prose = BLOCK.sub("", text)
    prose = VALUE.sub("", prose)
    prose = re.sub(r"```.*?```", "", prose, flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    prose = prose.replace("3200Gbps", "")
    problems = []
    for number, line in enumerate(prose.splitlines(), 1):
        for m in TYPED.finditer(line):
            problems.append(f"{page}: types '{m.group(0)}' (in '{line.strip()[:60]}'): generate "
                            "it with <!-- value:begin EXPR --> ... <!-- value:end --> "
                            "(maint/docs_diff.py says what EXPR may name)")
    return problems


# Numbers the code or the series fixes, each with the words a page names it
# by: a page that types "32 NICs" or "16 WRITEs per visit" instead of a
# value marker goes stale the day the constant changes. (EXPR, words just
# before the number or "", words just after it); the number must stand
# alone, so chapter and section numbers ("chapter 12", "12.1", "12_pin")
# never match.
NAMED_CONSTANTS = [
    ("series.gpus", "", r"(?:H100s?|GPUs|groups)\b"),
    ("series.nics", "", r"(?:EFA )?(?:NICs|endpoints)\b|on (?:a|the|each) p5\b"),
    ("series.nics_per_gpu", "", r"EFA NICs\b|NICs (?:per|of each|of a|on each) GPU\b"),
    ("series.nic_gbps", "", r"Gbps\b"),
    ("series.cores_per_gpu", "", r"cores\b(?!\s+\d)"),  # not "on 12 cores 7 x 4"
    ("series.link_gbps | .0f", "", r"Gbps\b"),
    ("run_chapter.SIMNIC_NICS_PER_GPU", "", r"NICs per GPU\b"),
    ('code("chapters/14_batch/server.cc", "kBatchSize")', "", r"WRITEs (?:per|a|each) visit\b"),
    ('code("chapters/14_batch/server.cc", "kMaxPendingWrites")', "", r"(?:queued )?WRITEs\b|waiting\b"),
    ('code("common/network.h", "kCqReadCount")', "", r"(?:completion )?entries\b"),
    ('code("common/*.h", "kBuffersPerGpu")', "", r"buffers per GPU\b"),
    # the short run of "What you should see": "1 group x 2 NICs", "1000 WRITEs"
    ("capture.gpus", "", r"groups? x\b"),
    ("capture.nics_per_gpu", "group x ", r"NICs\b"),
    ("capture.writes", "", r"WRITEs\b"),
]


def _prose(text):
    """A page without what may hold numbers legitimately: generated blocks,
    value markers, code, link targets and comments."""
    prose = BLOCK.sub("", text)
    prose = VALUE.sub("", prose)
    prose = re.sub(r"```.*?```", "", prose, flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    prose = re.sub(r"\]\([^)\s]*\)", "]", prose)
    return re.sub(r"<!--.*?-->", "", prose, flags=re.S)


def named_constants(repo, page, text):
    """A number a page types where a constant of the code or of the series
    gives it, next to a word that names that constant ("32 NICs")."""
    known = []
    for expr, before, after in NAMED_CONSTANTS:
        value = render_value(repo, expr)
        pattern = re.compile((f"(?<={before})" if before else r"(?<![\w.,/-])")
                             + re.escape(value) + r"\s+(?:" + after + ")")
        known.append((expr, value, pattern))
    problems = []
    # Indented blocks (what a program prints) left out; a paragraph as one
    # line, so that "16\nWRITEs" is found too.
    kept = [ln for ln in _prose(text).splitlines() if not ln.startswith(("    ", "\t"))]
    for line in re.split(r"\n\s*\n", "\n".join(kept)):
        line = re.sub(r"\s*\n\s*", " ", line)
        for expr, value, pattern in known:
            for m in pattern.finditer(line):
                problems.append(f"{page}: types '{m.group(0)}' (in '{line.strip()[:60]}'), "
                                f"a number the code gives: write <!-- value:begin {expr} -->"
                                f"{value}<!-- value:end -->")
    return problems


# --- pages -----------------------------------------------------------------

def pages(repo):
    found = sorted((repo.root / "docs").glob("*.md"))
    for name in ("README.md", "counters.md"):
        page = repo.root / "results" / name
        if page.exists():
            found.append(page)
    # The checkout's README quotes a recording too (its value markers).
    if (repo.root / "README.md").exists():
        found.append(repo.root / "README.md")
    # A group of recordings whose README holds a generated summary.
    found += [page for page in sorted((repo.root / "results").glob("*/README.md"))
              if "<!-- ladder:begin " in page.read_text()]
    return found


def regenerate(repo, page):
    text = page.read_text()
    prefix = "../results/" if page.parent.name == "docs" else ""

    def block(m):
        kind, arg = m.group(2), m.group(3)
        if kind == "diff":
            body = render_diff(repo, arg)
        elif kind == "source":
            body = render_source(repo, arg)
        elif kind == "output":
            body = render_output(repo, arg)
        elif kind in ("code", "series"):
            body = render_code(repo, arg) if kind == "code" else render_series(arg)
        elif kind == "counters":
            body = render_counters(repo, arg, prefix)
        elif kind == "ladder":
            body = render_ladder(repo, arg)
        elif kind == "costs":
            body = render_costs(repo, arg)
        elif kind == "model":
            body = render_model(repo, arg)
        elif arg == "all":
            body = render_results_all(repo, prefix)
        else:
            body = render_results_chapter(repo, arg, prefix)
        return m.group(1) + body + m.group(5)

    text = BLOCK.sub(block, text)
    return VALUE.sub(lambda m: f"<!-- value:begin {m.group(1)} -->{render_value(repo, m.group(1))}"
                     "<!-- value:end -->", text)


COUNTER_WORDS = re.compile(r"`?\b(post_calls|doorbells?|eagain|cq_reads|cq_empty_reads|cq_entries|"
                           r"op_allocations|longest_write_run|ns_per_write_\w+|CQ reads)\b")


def stale_counter_quotes(repo, page, text):
    """Paragraphs (outside generated blocks) that quote counters of a
    recording made under an older counter rule: they name its folder, a
    counter and a number."""
    today = todays_counter_rule(repo.root)
    old = {rec["folder"]: recording_rule(rec) for rec in repo.result_sets()
           if rec["kind"] == "compare" and recording_rule(rec) < today
           and any(_f(r, "cq_reads_per_write") is not None for r in rec["rows"].values())}
    if not old:
        return []
    prose = BLOCK.sub("", text)
    problems = []
    for paragraph in re.split(r"\n\s*\n", prose):
        if not COUNTER_WORDS.search(paragraph) or not re.search(r"\d\.\d", paragraph):
            continue
        for folder, rule in old.items():
            # The folder, its tables or its README, not another file in it
            # (a model's costs, a log) that no counter rule governs.
            if re.search(re.escape(folder) + r"(?![\w-]|/(?!results\.|README))", paragraph):
                first = paragraph.strip().splitlines()[0][:60]
                problems.append(f"{page}: quotes counters of {folder}, recorded under counter "
                                f"rule {rule} (today's is {today}, common/counter_rule.h), in "
                                f"the paragraph starting '{first}': re-record it or drop the "
                                "quote")
    return problems


def missing_pages(repo):
    """Every chapter needs a page; every page after the first needs its diff."""
    problems = []
    chapters = repo.chapters()
    for i, chapter in enumerate(chapters):
        page = repo.root / "docs" / f"{chapter}.md"
        if not page.exists():
            problems.append(f"docs/{chapter}.md: missing")
            continue
        text = page.read_text()
        want = (f"<!-- diff:begin {chapter} -->" if i > 0
                else f"<!-- source:begin chapters/{chapter}/server.cc -->")
        if want not in text:
            problems.append(f"docs/{chapter}.md: has no {want} block")
        if f"<!-- output:begin {chapter} -->" not in text:
            problems.append(f"docs/{chapter}.md: has no <!-- output:begin {chapter} --> block "
                            "(What you should see)")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the generated blocks")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 if a page differs from what --write would make")
    parser.add_argument("--root", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent,
                        help="repository root (default: this checkout)")
    args = parser.parse_args()
    repo = Repo(args.root)

    stale = []
    broken = []
    for page in pages(repo):
        old = page.read_text()
        rel = page.relative_to(repo.root)
        try:
            new = regenerate(repo, page)
        except BlockError as e:
            broken.append(f"{rel}: {e}")
            continue
        broken += stale_counter_quotes(repo, rel, new)
        broken += typed_numbers(repo, rel, new)
        if rel.parts[0] == "docs":
            broken += named_constants(repo, rel, new)
        if new == old:
            continue
        if args.write:
            page.write_text(new)
            print(f"docs_diff: updated {rel}")
        else:
            stale.append(str(rel))
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), f"{rel} (page)",
                                        f"{rel} (from the code and results)", lineterm="", n=1)
            print("\n".join(list(diff)[:40]))
    problems = broken + missing_pages(repo)
    for p in problems:
        print(f"docs_diff: {p}")
    if stale:
        print("docs_diff: stale page(s): " + ", ".join(stale))
        print("docs_diff: run `python3 maint/docs_diff.py --write` and commit the pages")
    if stale or problems:
        return 1
    if args.check:
        print(f"docs_diff: {len(pages(repo))} page(s) match the code and the recorded results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
