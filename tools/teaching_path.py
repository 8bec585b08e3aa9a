#!/usr/bin/env python3
"""Measures what a learner reads, and fails when it grows past the limits.

What is counted (docs/maintaining.md, "How much there is to read"):

* network.cc: every line of common/network.cc.
* Network's public interface: the members declared in the public part of
  `class Network` in common/network.h: each function (overloads counted
  one by one), constructor, destructor and data member; copy operations
  that are `= delete`d are not members one can use and are not counted.
* The hot path of a chapter: the non-blank lines (comments included: a
  learner reads them) of the chapter's server.cc, plus, in common/, the
  definitions that its posting loop and its polling reach (listed below,
  each with the comment right above it): the WRITE's path from
  PostWrite to fi_writemsg and the completion's from PollCompletion to
  the callback, the types they use, and of the classes the chapter calls
  (Network, WriteJob, ProgressLine) the public part only. The wrapper
  every provider call goes through (common/call_meter.h) is
  instrumentation and is not counted, nor is recovery
  (common/recovery*.h): the path only names them.

Usage: tools/teaching_path.py [--root DIR] [--check]
"""
import argparse
import os
import re
import sys

LIMITS = {"network_cc_lines": 650, "network_public_members": 22, "hot_path_14_batch": 650}

# (file, regex of the definition's first line, how far it goes):
#   "block": to the brace that closes the first one opened;
#   "public": a class up to its `private:`.
HOT_PATH_COMMON = [
    ("common/network.h", r"^using OpCallback", "line"),
    ("common/network.h", r"^struct RdmaWrite \{", "block"),
    ("common/network.h", r"^enum class OpType", "line"),
    ("common/network.h", r"^enum class OpState", "line"),
    ("common/network.h", r"^struct RdmaOp \{", "block"),
    ("common/network.h", r"^inline bool IsRemoteWrite", "block"),
    ("common/network.h", r"^class alignas\(64\) Network \{", "public"),
    ("common/network.cc", r"^void Network::PostWrite\(const RdmaWrite& write, OpCallback", "block"),
    ("common/network.cc", r"^RdmaOp\* Network::NewOp", "block"),
    ("common/network.cc", r"^void Network::FreeOp", "block"),
    ("common/network.cc", r"^void Network::Link\(", "block"),
    ("common/network.cc", r"^void Network::Unlink\(", "block"),
    ("common/network.cc", r"^void Network::Enqueue", "block"),
    ("common/network.cc", r"^void Network::ProgressPendingOps", "block"),
    ("common/network.cc", r"^ssize_t Network::Submit", "block"),
    ("common/network.cc", r"^ssize_t Network::PostToProvider", "block"),
    ("common/network.cc", r"^size_t Network::PollCompletion", "block"),
    ("common/network.cc", r"^void Network::HandleCompletion", "block"),
    ("common/network.cc", r"^void Network::HandleErrorCompletion", "block"),
    ("common/network.cc", r"^void Network::ReportFailed", "block"),
    ("common/network.cc", r"^void Network::Complete", "block"),
    ("common/post_queue.h", r"^void PostPendingQueue\(", "block"),
    ("common/network_group.h", r"^class NetworkGroup \{", "block"),
    ("common/server.h", r"^class WriteJob \{", "public"),
    ("common/server.h", r"^struct WriteOutcome \{", "block"),
    ("common/server.h", r"^int RunServer\(", "block"),
    ("common/server.cc", r"^RdmaWrite WriteJob::MakeWrite", "block"),
    ("common/server.cc", r"^bool WriteJob::Interrupted", "block"),
    ("common/progress.h", r"^class ProgressLine \{", "public"),
]


def read_lines(root, path):
    with open(os.path.join(root, path)) as f:
        return f.read().split("\n")


def definition(lines, pattern, kind):
    """The lines of one definition, with the comment (and template line) above."""
    regex = re.compile(pattern)
    starts = [i for i, line in enumerate(lines) if regex.search(line)]
    if len(starts) != 1:
        raise SystemExit(f"teaching_path: {pattern!r} matches {len(starts)} lines, not one")
    first = last = starts[0]
    while first > 0 and re.match(r"^\s*(//|template\b)", lines[first - 1]):
        first -= 1
    if kind == "line":
        while not lines[last].rstrip().endswith(";"):
            last += 1
    elif kind == "block":
        depth, opened = 0, False
        while True:
            code = lines[last].split("//")[0]
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            if opened and depth == 0:
                break
            last += 1
    elif kind == "public":
        while not re.match(r"^\s*private:", lines[last]):
            last += 1
        last -= 1
    return lines[first : last + 1]


def non_blank(lines):
    return sum(1 for line in lines if line.strip())


def public_members(lines):
    """Members declared in the public part of class Network (see the doc)."""
    body = definition(lines, r"^class alignas\(64\) Network \{", "public")
    body = body[next(i for i, line in enumerate(body) if line.startswith("class")) + 1 :]
    text = "\n".join(line.split("//")[0] for line in body)
    text = re.sub(r"^\s*public:\s*$", "", text, flags=re.M)
    members, depth, current = [], 0, ""
    for ch in text:
        current += ch
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                members.append(current)
                current = ""
        elif ch == ";" and depth == 0:
            members.append(current)
            current = ""
    members = [" ".join(m.split()) for m in members if m.strip(" \n;")]
    return [m for m in members if "= delete" not in m]


def measure(root, chapter="14_batch"):
    network_cc = read_lines(root, "common/network.cc")
    if network_cc and network_cc[-1] == "":
        network_cc = network_cc[:-1]
    members = public_members(read_lines(root, "common/network.h"))
    chapter_lines = non_blank(read_lines(root, f"chapters/{chapter}/server.cc"))
    parts = {}
    for path, pattern, kind in HOT_PATH_COMMON:
        parts.setdefault(path, 0)
        parts[path] += non_blank(definition(read_lines(root, path), pattern, kind))
    return {
        "network_cc_lines": len(network_cc),
        "network_public_members": len(members),
        f"hot_path_{chapter}": chapter_lines + sum(parts.values()),
        "hot_path_parts": {f"chapters/{chapter}/server.cc": chapter_lines, **parts},
        "members": members,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--check", action="store_true", help="exit 1 when a limit is passed")
    parser.add_argument("--members", action="store_true", help="list Network's public members")
    args = parser.parse_args()
    m = measure(args.root)
    if args.members:
        for member in m["members"]:
            print("  " + member)
    print(f"common/network.cc: {m['network_cc_lines']} lines (limit {LIMITS['network_cc_lines']})")
    print(f"Network's public members: {m['network_public_members']} "
          f"(limit {LIMITS['network_public_members']})")
    print(f"chapter 14's hot path: {m['hot_path_14_batch']} non-blank lines "
          f"(limit {LIMITS['hot_path_14_batch']})")
    for path, n in m["hot_path_parts"].items():
        print(f"  {n:4d}  {path}")
    failed = [k for k, limit in LIMITS.items() if m[k] > limit]
    if args.check and failed:
        print("over the limit: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
