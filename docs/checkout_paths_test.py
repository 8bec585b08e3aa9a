"""Two checkouts on one machine can run `bazel test //...` side by side.

Every command a page gives (its ```sh blocks, the exercises' checks that
//docs:exercises_run_test runs word for word among them) and every test
writes only inside its checkout (under out/, which git ignores) or in a
folder it creates with mkdtemp and removes. A fixed path in a shared folder
(/tmp/ex11-10, /tmp/09.addr) would let one checkout's `rm -rf` or
`kill "$(cat .../server.pid)"` reach the other checkout's run. This test
fails, naming file and line, on any such path.
"""
import os
import pathlib
import re
import tempfile
import unittest

# A shared folder followed by a fixed name. `${TMPDIR:-/tmp}/x.XXXXXX`
# (mktemp) and a bare "/tmp" handed to mkdtemp are fine: the name is new.
FIXED = re.compile(r"(?<![\w.-])(/tmp|/var/tmp)/(?![^\s\"']*X{6})[\w.{}$-]+")
# What the tests run: the tests, CI, and the tools the tests call.
TEST_FILES = ["tests/**/*", ".ci/**/*", "docs/*.py", "tools/*_test.py", "maint/**/*_test.py",
              "tools/run_chapter.py", "tools/compare.py", "maint/run_exercises.py",
              "maint/check_exercises.py", "maint/capture_output.py", "maint/peer_processes.py",
              "simnic/*_test.cc"]


def source_root():
    """The checkout: Bazel's runfiles link docs/README.md to it."""
    runfiles = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"]
    return (runfiles / "docs" / "README.md").resolve().parent.parent


def command_lines(text):
    """(line number, line) of every ```sh block of a page."""
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            inside = line.strip() in ("```sh", "```bash") if not inside else False
            continue
        if inside:
            yield number, line


def shared_paths(root):
    """'file:line: path' for every fixed path in a shared folder."""
    root = pathlib.Path(root)
    found = []
    pages = sorted((root / "docs").glob("*.md")) + [root / "README.md"]
    for page in pages:
        if not page.is_file():
            continue
        for number, line in command_lines(page.read_text()):
            for m in FIXED.finditer(line):
                found.append(f"{page.relative_to(root)}:{number}: {m.group(0)}")
    files = sorted({p for pattern in TEST_FILES for p in root.glob(pattern) if p.is_file()})
    for path in files:
        if path.name == "checkout_paths_test.py":
            continue  # names the paths it looks for
        try:
            lines = path.read_text().splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(lines, 1):
            if re.match(r"\s*(#|//|\*)", line):
                continue  # a comment: nothing runs it
            for m in FIXED.finditer(line):
                found.append(f"{path.relative_to(root)}:{number}: {m.group(0)}")
    return found


class CheckoutPathsTest(unittest.TestCase):
    def test_no_command_or_test_writes_a_fixed_shared_path(self):
        self.assertEqual(shared_paths(source_root()), [])

    def test_a_fixed_shared_path_is_caught(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            (root / "docs").mkdir()
            (root / "tests").mkdir()
            (root / "docs" / "11_x.md").write_text(
                "text /tmp/not-a-command\n```sh\nmkdir -p out/ex11\n"
                "python3 tools/run_chapter.py 10_warmup --pid-dir /tmp/ex11-10 > out/a.out &\n"
                "work=$(mktemp -d \"${TMPDIR:-/tmp}/ex.XXXXXX\")\n```\n")
            (root / "tests" / "t.py").write_text(
                "# comment /tmp/x\nopen('/tmp/result.json', 'w')\n"
                "tempfile.mkdtemp(dir='/tmp')\n")
            self.assertEqual(shared_paths(root), ["docs/11_x.md:4: /tmp/ex11-10",
                                                  "tests/t.py:2: /tmp/result.json"])


if __name__ == "__main__":
    unittest.main()
