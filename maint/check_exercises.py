#!/usr/bin/env python3
"""Checks the exercises and design notes of the chapter pages.

Every chapter page (docs/NN_name.md) ends its teaching part with

  ## Exercises
  ### 1. <title>       (two to four of them)
  <the task>
  Check:
  ```sh
  <commands that run here and show the answer>
  ```
  <what to read in their output>

and has a "## Design note" section. This tool makes sure that each exercise
has a check, and that every check command would run on today's code: the
Bazel targets exist, every flag given to a chapter's server or client or to
a tool in tools/ is one that its --help lists, every `sed -i` edit still
finds the text it changes (it is tried on a copy), every file named exists,
every SIMNIC_* variable is one that simnic reads, and nothing is written
to a shared folder such as /tmp (a check writes under the checkout's out/,
so two checkouts on one machine never touch each other's files). It runs nothing else:
the answers are measured by whoever does the exercise, never typed here.

  python3 maint/check_exercises.py                 # binaries from bazel-bin
  python3 maint/check_exercises.py --bin-dir DIR   # DIR/<chapter>/server ...

Exits 1 with one line per problem, 0 when every page is right.
"""
import argparse
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHAPTER_PAGE = re.compile(r"^(\d\d)_[a-z_]+\.md$")
# Commands a check may use; anything else is a problem (a typo or a tool a
# workshop machine may lack).
# No pgrep or pkill: on a shared machine a name matches other people's runs
# too; checks use the process ids that run_chapter.py --pid-dir writes.
ALLOWED = {"bazel", "python3", "git", "ps", "grep", "sed", "taskset", "diff", "cat", "head",
           "tail", "sort", "uniq", "nproc", "lscpu", "env", "for", "do", "done", "break",
           "seq", "sleep", "kill", "echo", "wc", "cp", "rm", "ls", "numactl", "perf", "time",
           "mkdir"}
# A check writes only under the checkout's out/ (git ignores it), so two
# checkouts on one machine never share a file: a fixed path in a shared
# folder would let one checkout's `rm -rf` or `kill $(cat ...)` reach the
# other's run.
SHARED_PATH = re.compile(r"(^|[=:>])(/tmp|/var/tmp|/dev/shm)(/|$)")


def chapter_pages(root):
    """docs/NN_name.md of every chapter in chapters/ (not 00_concepts.md)."""
    return sorted(p for p in (root / "docs").iterdir()
                  if CHAPTER_PAGE.match(p.name) and (root / "chapters" / p.stem).is_dir())


def section(text, heading):
    """The lines of the '## heading' section (up to the next '## ')."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"## {heading}")), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
               len(lines))
    return lines[start + 1:end]


def exercises(lines):
    """[(title, body lines)] of the '### ' subsections."""
    found = []
    for line in lines:
        if line.startswith("### "):
            found.append((line[4:].strip(), []))
        elif found:
            found[-1][1].append(line)
    return found


def sh_blocks(body):
    """The ```sh blocks after the 'Check:' line, as lists of lines."""
    blocks, inside, after_check = [], None, False
    for line in body:
        if inside is not None:
            if line.strip() == "```":
                blocks.append(inside)
                inside = None
            else:
                inside.append(line)
        elif re.match(r"^(\*\*)?Check(\*\*)?:", line.strip()):
            after_check = True
        elif line.strip() == "```sh" and after_check:
            inside = []
    return blocks


def commands(block):
    """Shell commands of a block: comments dropped, continuations joined,
    split at && || ; | into simple commands (each a list of words)."""
    joined, pending = [], ""
    for line in block:
        line = line.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    simple = []
    for line in joined:
        try:
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            words = list(lexer)
        except ValueError as e:
            simple.append(("!", str(e), line))
            continue
        current = []
        for word in words:
            if word in (";", "&&", "||", "|", "&"):
                if current:
                    simple.append(current)
                current = []
            else:
                current.append(word)
        if current:
            simple.append(current)
    return simple


class Helps:
    """--help text of the chapters' binaries and of the tools, run once each."""

    def __init__(self, root, bin_dir):
        self.root, self.bin_dir, self.cache = root, bin_dir, {}

    def of(self, argv):
        key = tuple(argv)
        if key not in self.cache:
            try:
                run = subprocess.run([*argv, "--help"], capture_output=True, text=True,
                                     timeout=60, cwd=self.root)
                self.cache[key] = run.stdout + run.stderr if run.returncode == 0 else None
            except (OSError, subprocess.TimeoutExpired):
                self.cache[key] = None
        return self.cache[key]

    def binary(self, package, name):
        if not package.startswith("chapters/"):
            return None
        return self.of([str(self.bin_dir / package.split("/", 1)[1] / name)])

    def tool(self, path):
        return self.of([sys.executable, str(self.root / path)])


def flags_of(words):
    """The --flags among words (--x=v gives --x)."""
    return [w.split("=", 1)[0] for w in words if w.startswith("--") and len(w) > 2]


def target_exists(root, label):
    """//pkg:name, //pkg or //pkg/... names a package whose BUILD has it."""
    match = re.fullmatch(r"//([\w/.-]*?)(/\.\.\.)?(?::([\w.+-]+))?", label)
    if not match:
        return False
    package, recursive, name = match.groups()
    build = root / package / "BUILD.bazel"
    if recursive:
        return (root / package).is_dir()
    if not build.exists():
        return False
    name = name or package.rsplit("/", 1)[-1]
    text = build.read_text()
    # A chapter's BUILD calls the chapter() macro: its targets are named in
    # chapters/chapter.bzl.
    if re.search(r"^chapter\(", text, re.M) and (root / "chapters" / "chapter.bzl").exists():
        text += (root / "chapters" / "chapter.bzl").read_text()
    return re.search(rf'name = "{re.escape(name)}"', text) is not None


def check_flags(where, flags, help_text, what):
    problems = []
    for flag in flags:
        if flag == "--help":
            continue
        if help_text is None:
            problems.append(f"{where}: cannot read the --help of {what}")
            break
        if not re.search(rf"(^|[\s,\[]){re.escape(flag)}([\s,=\]]|$)", help_text, re.M):
            problems.append(f"{where}: {what} has no flag {flag}")
    return problems


def check_bazel(root, helps, where, words):
    problems = []
    verb = words[1] if len(words) > 1 else ""
    if verb not in ("build", "run", "test", "query"):
        return [f"{where}: bazel {verb}: not a verb a check uses"]
    labels = [w for w in words[2:] if w.startswith("//")]
    args = words[words.index("--") + 1:] if "--" in words else []
    for label in labels:
        if label not in args and not target_exists(root, label.strip("'\"")):
            problems.append(f"{where}: no Bazel target {label}")
    if verb == "run" and labels:
        package, _, name = labels[0][2:].partition(":")
        help_text = helps.binary(package, name)
        if package.startswith("chapters/"):
            problems += check_flags(where, flags_of(args), help_text, labels[0])
    return problems


def check_python(root, helps, where, words):
    if len(words) < 2 or words[1] == "-c":
        return []
    path = words[1]
    if not (root / path).exists():
        return [f"{where}: no file {path}"]
    problems = check_flags(where, flags_of(words[2:]), helps.tool(path), path)
    # --server-arg=--flag / --client-arg=--flag reach the chapter's binaries.
    chapter = next((w for w in words[2:] if (root / "chapters" / w / "BUILD.bazel").exists()),
                   None)
    for i, word in enumerate(words):
        for side in ("server", "client"):
            inner = None
            if word.startswith(f"--{side}-arg="):
                inner = word.split("=", 1)[1]
            elif word == f"--{side}-arg" and i + 1 < len(words):
                inner = words[i + 1]
            if inner and inner.startswith("--") and chapter:
                problems += check_flags(where, flags_of([inner]),
                                        helps.binary(f"chapters/{chapter}", side),
                                        f"{chapter}'s {side}")
    return problems


def check_sed(root, where, words):
    if "-i" not in words:
        return []
    rest = [w for w in words[1:] if w != "-i"]
    scripts = [rest[i + 1] for i, w in enumerate(rest[:-1]) if w == "-e"]
    files = [w for i, w in enumerate(rest) if w != "-e" and (i == 0 or rest[i - 1] != "-e")]
    if not scripts and files:
        scripts, files = [files[0]], files[1:]
    problems = []
    for name in files:
        path = root / name
        if not path.exists():
            problems.append(f"{where}: no file {name}")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            copy = pathlib.Path(tmp) / path.name
            copy.write_bytes(path.read_bytes())
            run = subprocess.run(["sed", "-i", *sum((["-e", s] for s in scripts), []),
                                  str(copy)], capture_output=True, text=True)
            if run.returncode != 0:
                problems.append(f"{where}: sed fails on {name}: {run.stderr.strip()}")
            elif copy.read_bytes() == path.read_bytes():
                problems.append(f"{where}: the sed edit changes nothing in {name} "
                                "(the text it looks for is gone)")
    return problems


def check_paths(root, where, words):
    """Files named by git checkout/diff and cat/grep arguments under the tree."""
    problems = []
    for word in words[1:]:
        if word.startswith("-") or "<" in word or "*" in word:
            continue
        if re.match(r"^(chapters|common|simnic|tools|tests|docs|results)/", word) and \
                not (root / word).exists():
            problems.append(f"{where}: no file {word}")
    return problems


def check_env(root, where, words):
    problems = []
    simnic_sources = "".join(p.read_text() for p in (root / "simnic").glob("*.cc"))
    for word in words:
        name = word.split("=", 1)[0]
        if "=" in word and name.startswith("SIMNIC_") and f'"{name}"' not in simnic_sources:
            problems.append(f"{where}: simnic reads no variable {name}")
    return problems


def check_command(root, helps, where, words):
    if words and words[0] == "!":
        return [f"{where}: cannot split the command: {words[1]}"]
    problems = check_env(root, where, words)
    if any(re.search(r"\bp(grep|kill)\b", w) for w in words):
        problems.append(f"{where}: finds processes by name (pgrep/pkill), which matches other "
                        "users' runs on a shared machine: use run_chapter.py --pid-dir")
    shared = [w for w in words if SHARED_PATH.search(w)]
    if shared:
        problems.append(f"{where}: names {shared[0]}, a path another checkout may use too: "
                        "write under out/ (git ignores it)")
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]
    if not words:
        return problems
    program = words[0]
    if program not in ALLOWED:
        return problems + [f"{where}: '{program}' is not a command the checks use "
                           f"({', '.join(sorted(ALLOWED))})"]
    if program == "bazel":
        problems += check_bazel(root, helps, where, words)
    elif program == "python3":
        problems += check_python(root, helps, where, words)
    elif program == "sed":
        problems += check_sed(root, where, words)
    if program != "sed":
        problems += check_paths(root, where, words)
    return problems


def check_page(root, helps, page):
    text = page.read_text()
    name = f"docs/{page.name}"
    problems = []
    if section(text, "Design note") is None:
        problems.append(f"{name}: no '## Design note' section")
    lines = section(text, "Exercises")
    if lines is None:
        return problems + [f"{name}: no '## Exercises' section"]
    found = exercises(lines)
    if not 2 <= len(found) <= 4:
        problems.append(f"{name}: {len(found)} exercise(s) under '## Exercises'; 2 to 4 wanted")
    for number, (title, body) in enumerate(found, 1):
        where = f"{name}, exercise '{title}'"
        if not re.match(rf"^{number}\. ", title):
            problems.append(f"{where}: should be numbered '{number}. '")
        blocks = sh_blocks(body)
        if not blocks:
            problems.append(f"{where}: no 'Check:' line followed by a ```sh block")
        for block in blocks:
            for words in commands(block):
                problems += check_command(root, helps, where, words)
    return problems


def check(root, bin_dir):
    helps = Helps(root, bin_dir)
    problems = []
    pages = chapter_pages(root)
    if not pages:
        problems.append("docs/: no chapter pages")
    for page in pages:
        problems += check_page(root, helps, page)
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, default=ROOT,
                        help="the checkout (default: this tool's)")
    parser.add_argument("--bin-dir", type=pathlib.Path, default=None,
                        help="folder with <chapter>/server and <chapter>/client "
                        "(default: <root>/bazel-bin/chapters)")
    args = parser.parse_args()
    bin_dir = args.bin_dir or args.root / "bazel-bin" / "chapters"
    problems = check(args.root.resolve(), bin_dir)
    for problem in problems:
        print(problem)
    pages = len(chapter_pages(args.root))
    print(f"check_exercises: {pages} page(s), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
