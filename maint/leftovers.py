#!/usr/bin/env python3
"""What a test run left in the shared folders: the entries of /tmp and
/dev/shm (top level) that are new since a snapshot and belong to this user.

Tests write only inside the checkout or a temp dir they remove, so two
clones can test at once; .ci/run checks it around the README's test
command on its fresh machine (on a shared machine other users' and other
clones' files would show too).

  python3 maint/leftovers.py snapshot before.txt
  bazel test //...
  python3 maint/leftovers.py check before.txt   # exit 1 and a list if any

--roots replaces the folders looked at (default: /tmp /dev/shm).
"""
import argparse
import os
import pathlib
import sys

DEFAULT_ROOTS = ["/tmp", "/dev/shm"]


def entries(roots):
    """Every top-level entry of `roots` owned by this user, as full paths."""
    found = set()
    for root in roots:
        try:
            with os.scandir(root) as it:
                for entry in it:
                    try:
                        if entry.stat(follow_symlinks=False).st_uid == os.getuid():
                            found.add(entry.path)
                    except FileNotFoundError:
                        pass  # gone while we looked: not left behind
        except FileNotFoundError:
            pass
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["snapshot", "check"])
    parser.add_argument("file", type=pathlib.Path, help="the snapshot to write or compare with")
    parser.add_argument("--roots", nargs="+", default=DEFAULT_ROOTS)
    args = parser.parse_args(argv)
    if args.action == "snapshot":
        args.file.write_text("".join(f"{path}\n" for path in sorted(entries(args.roots))))
        return 0
    before = set(args.file.read_text().splitlines())
    new = sorted(entries(args.roots) - before - {str(args.file)})
    if new:
        print(f"leftovers: {len(new)} new entr{'y' if len(new) == 1 else 'ies'} in "
              f"{', '.join(args.roots)}:")
        for path in new:
            print(f"  {path}")
        return 1
    print(f"leftovers: none in {', '.join(args.roots)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
