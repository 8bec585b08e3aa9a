#!/usr/bin/env python3
"""Lists every error message the programs can print, as message stems.

What counts as a message (the user-facing sources: common/, chapters/*/,
simnic/ but its tests and benchmark):
  - the text given to a thrown UsageError, RuntimeError, ProtocolError,
    ProviderError or std::runtime_error (main() prints it as
    "<program>: error: <text>");
  - the text given to Fail(...) in a writer and Abandon(...) in the
    transfer watch (the server prints "Transfer abandoned: <text>" and the
    client "the server abandoned the transfer: <text>");
  - the text of a REJECT (SendReject/Reject(...)), which the client prints;
  - every fprintf(stderr, ...) and std::cerr << "..." line, the watch
    messages formatted with snprintf(text or what, ...), and the lines
    printed to stdout that report a failure (their text has abandoned,
    error, warning, failed, cannot or Note:).
A message's stem comes from the first string literal of the call's
statement (adjacent literals joined; what comes before it, such as a NIC's
name, is left out):
the first piece between printf conversions (%s, %d, ...) that has 4 or
more characters, stripped of spaces, a leading "error:" or "warning:" and trailing
punctuation: the fixed words a user can search for. A literal with no such
piece (a lone ": ") says nothing and is left out.

tools/p5_check.py (the checks a p5 user runs first) counts too: the text
of each fail(...) and skip(...) it can print.

  python3 maint/error_messages.py            # one stem a line, with where
  python3 maint/error_messages.py --check docs/troubleshooting.md

--check exits 1 and lists the stems the page does not contain
(//docs:troubleshooting_check_test).
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# A call whose text reaches the user, up to the end of its statement.
CALLS = re.compile(r"(?:\bthrow\s+(?:tutorial::)?"
                   r"(?:UsageError|RuntimeError|ProtocolError|ProviderError)\s*\("
                   r"|\bstd::runtime_error\s*\(|(?<![\w.>])(?:Fail|Abandon|SendReject|Reject)\s*\("
                   r"|\bfprintf\(\s*stderr\s*,|\bstd::cerr\s*<<"
                   r"|\bsnprintf\(\s*(?:text|what)\s*,[^,]*,"
                   r"|\bprintf\(\s*(?=\"[^\"]*(?:abandoned|error|warning|failed|cannot|Note:)))"
                   r'((?:"(?:[^"\\]|\\.)*"|[^;"])*)')  # to the ; outside strings
# tools/p5_check.py: a FAIL or SKIP line's text, the call's first literals.
PY_CALLS = re.compile(r'\b(?:fail|skip)\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')
PY_SOURCES = ["tools/p5_check.py"]
LITERALS = re.compile(r'(?:"(?:[^"\\]|\\.)*"\s*)+')
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def sources(root):
    found = sorted((root / "common").glob("*.cc")) + sorted((root / "common").glob("*.h"))
    found += sorted((root / "chapters").glob("*/*.cc"))
    found += [p for p in sorted((root / "simnic").glob("*.cc"))
              if not p.name.endswith("_test.cc") and p.name != "simnic_bench.cc"]
    return found


def stem(literals):
    text = "".join(LITERAL.findall(literals))
    text = text.replace("\\n", " ").replace('\\"', '"').replace("\\\\", "\\")
    for chunk in re.split(r"%[-+ #0-9.*]*(?:hh|h|ll|l|z|j|t|L)?[a-zA-Z%]", text):
        chunk = re.sub(r"^[\s:,()]*(/?\w*:\s*error:\s*|error:\s*|warning:\s*)?", "", chunk)
        chunk = " ".join(chunk.split()).rstrip(" :,.(-")
        if len(chunk) >= 4:
            return chunk
    return ""


def messages(root=ROOT):
    """{stem: [file:line, ...]}"""
    found = {}
    for path in sources(root):
        text = path.read_text()
        for m in CALLS.finditer(text):
            literals = LITERALS.search(m.group(1))
            if literals:
                s = stem(literals.group(0))
                if len(s) < 4:
                    continue
                line = text.count("\n", 0, m.start()) + 1
                found.setdefault(s, []).append(f"{path.relative_to(root)}:{line}")
    for relative in PY_SOURCES:
        path = root / relative
        if not path.exists():
            continue
        text = path.read_text()
        for m in PY_CALLS.finditer(text):
            s = stem(m.group(1))
            if len(s) >= 4:
                line = text.count("\n", 0, m.start()) + 1
                found.setdefault(s, []).append(f"{relative}:{line}")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, default=ROOT)
    parser.add_argument("--check", type=pathlib.Path, default=None, metavar="PAGE",
                        help="exit 1 listing the stems PAGE does not contain")
    args = parser.parse_args()
    found = messages(args.root)
    if not args.check:
        for s, where in sorted(found.items()):
            print(f"{s}\t{', '.join(where)}")
        print(f"error_messages: {len(found)} message stem(s)", file=sys.stderr)
        return 0
    page = " ".join(args.check.read_text().replace("`", "").split())
    missing = [(s, w) for s, w in sorted(found.items()) if s not in page]
    for s, where in missing:
        print(f"{args.check.name}: no entry for \"{s}\" ({where[0]})")
    print(f"error_messages: {len(found)} message stem(s), {len(missing)} missing from "
          f"{args.check.name}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
