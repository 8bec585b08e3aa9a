"""The teaching path stays short (tools/teaching_path.py says what counts),
and docs/maintaining.md states today's numbers.

Reads the source tree (found through the runfiles link of
teaching_path.py), so it is tagged "external": never cached.
"""
import os
import pathlib
import re
import subprocess
import sys
import unittest


def source_root():
    runfiles = pathlib.Path(os.environ.get("TEST_SRCDIR", "")) / os.environ.get("TEST_WORKSPACE", "")
    link = runfiles / "tools" / "teaching_path.py"
    path = link if link.exists() else pathlib.Path(__file__).parent / "teaching_path.py"
    return path.resolve().parent.parent


sys.path.insert(0, str(source_root() / "tools"))
import teaching_path  # noqa: E402


class TeachingPathTest(unittest.TestCase):
    def setUp(self):
        self.m = teaching_path.measure(str(source_root()))

    def test_within_the_limits(self):
        for key, limit in teaching_path.LIMITS.items():
            self.assertLessEqual(self.m[key], limit, key)
        result = subprocess.run(
            [sys.executable, str(source_root() / "tools" / "teaching_path.py"), "--check",
             "--root", str(source_root())], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_readme_states_todays_numbers(self):
        text = (source_root() / "docs" / "maintaining.md").read_text()
        section = text.split("## How much there is to read")[1].split("\n## ")[0]
        parts = self.m["hot_path_parts"]
        common = sum(n for path, n in parts.items() if path.startswith("common/"))
        self.assertIn(f"**{self.m['hot_path_14_batch']} lines**", section)
        self.assertIn(f"`server.cc` ({parts['chapters/14_batch/server.cc']})", section)
        self.assertIn(f"reaches ({common})", section.replace("\n", " "))
        self.assertIn(f"is {self.m['network_cc_lines']} lines", section.replace("\n", " "))
        self.assertRegex(section.replace("\n", " "),
                         rf"has {self.m['network_public_members']}\s+members")

    def test_recovery_lives_apart(self):
        network_cc = (source_root() / "common" / "network.cc").read_text()
        for name in ["DetachTransmits", "CancelQueuedTransmits", "CheckShmPeerExists",
                     "TakeEventError", "ResetEndpoint", "ReopenAt"]:
            self.assertIsNone(re.search(rf"^\S.*\b{name}\(", network_cc, re.M), name)

    def test_every_listed_definition_is_found_once(self):
        # measure() raises when a pattern matches no line or several.
        self.assertGreater(len(teaching_path.HOT_PATH_COMMON), 10)
        self.assertIn("size_t PollCompletion();", self.m["members"])


if __name__ == "__main__":
    unittest.main()
