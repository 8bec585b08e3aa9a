"""Checks that the docs pages' generated blocks match the code and results.

Runs maint/docs_diff.py --check on the source tree, and makes sure that the
check does catch a page whose diff no longer matches a chapter's code, a page
whose code block no longer matches the library function it shows, and a
code block whose function is gone; and that no page under docs/ or results/,
and no tool, cites a file outside the repository.
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest


def source_root():
    """The checkout: Bazel's runfiles link docs/README.md to it."""
    runfiles = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"]
    return (runfiles / "docs" / "README.md").resolve().parent.parent


def check(root):
    tool = source_root() / "maint" / "docs_diff.py"
    return subprocess.run([sys.executable, str(tool), "--check", "--root", str(root)],
                          capture_output=True, text=True)


def copy_tree(tmp):
    """The parts of the checkout the pages are made from, in tmp."""
    copy = pathlib.Path(tmp)
    for part in ("chapters", "common", "docs", "harness", "maint", "results", "simnic", "tests",
                 "tools"):
        shutil.copytree(source_root() / part, copy / part,
                        ignore=shutil.ignore_patterns("*.png"))
    return copy


def docs_diff():
    """maint/docs_diff.py as a module, for its function finder."""
    sys.path.insert(0, str(source_root() / "maint"))
    import docs_diff as module  # noqa: E402
    return module


# Files the project must not cite, since it does not hold them: the
# developers' notes and reference data live outside the repository.
OUTSIDE = [("DESIGN.md", re.compile(r"\bDESIGN\.md\b")),
           ("../shared", re.compile(r"(\.\./|/work/)shared\b")),
           ("reference/p5", re.compile(r"\breference/p5\b"))]


def outside_references(root):
    """Lines of pages under docs/ and results/, and of the code, tests and tools, that name a file
    outside the repository: "path:line: names X". A name the repository
    itself holds (a DESIGN.md or a reference/p5 of its own) is allowed."""
    root = pathlib.Path(root)
    files = sorted(p for top in ("docs", "results") for p in (root / top).rglob("*.md"))
    files += sorted(p for top in ("tools", "maint", "tests", "common", "harness", "chapters",
                                  "simnic", ".ci")
                    for p in (root / top).rglob("*") if p.is_file())
    files += [p for p in (root / "README.md", root / "docs" / "BUILD.bazel") if p.is_file()]
    # This test names the patterns it looks for.
    files = [p for p in files if p.name != "docs_check_test.py"]
    held = {"DESIGN.md": any(p.name == "DESIGN.md"
                             for top in ("docs", "results", "tools", "maint", ".")
                             for p in (root / top).glob("DESIGN.md")),
            "reference/p5": (root / "reference" / "p5").exists(),
            "../shared": False}
    found = []
    for path in files:
        try:
            lines = path.read_text().splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(lines, 1):
            for name, pattern in OUTSIDE:
                if not held[name] and pattern.search(line):
                    found.append(f"{path.relative_to(root)}:{number}: names {name}")
    return found


class DocsCheckTest(unittest.TestCase):
    def test_no_page_or_tool_cites_a_file_outside_the_repository(self):
        self.assertEqual(outside_references(source_root()), [])

    def test_a_citation_of_a_file_outside_is_caught(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            for part in ("docs", "results/x", "tools", "tests"):
                (root / part).mkdir(parents=True)
            (root / "docs" / "a.md").write_text("ok\nsee DESIGN.md, the ladder\n")
            (root / "results" / "x" / "README.md").write_text("(`reference/p5/fi_info.yaml`)\n")
            (root / "tools" / "t.py").write_text("# see ../shared/seeds\n")
            (root / "tests" / "t.cc").write_text("// rules in /work/shared/x.md\n")
            self.assertEqual(outside_references(root),
                             ["docs/a.md:2: names DESIGN.md",
                              "results/x/README.md:1: names reference/p5",
                              "tests/t.cc:1: names ../shared",
                              "tools/t.py:1: names ../shared"])
            # A DESIGN.md of the repository's own may be cited.
            (root / "DESIGN.md").write_text("# design\n")
            self.assertEqual(len(outside_references(root)), 3)

    def test_pages_match_code_and_results(self):
        result = check(source_root())
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_check_catches_a_stale_diff(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = copy_tree(tmp)
            server = copy / "chapters" / "12_pin" / "server.cc"
            text = server.read_text()
            self.assertIn("PinThisThread(preferred_cpu);", text)
            server.write_text(text.replace("PinThisThread(preferred_cpu);",
                                           "PinThisThread(preferred_cpu);  // changed", 1))
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            # The chapter's own page and the next one's both show that file.
            self.assertIn("docs/12_pin.md", result.stdout)
            self.assertIn("docs/13_shard.md", result.stdout)
            self.assertNotIn("docs/11_multithread.md", result.stdout.split("stale page(s):")[-1])

    def test_check_catches_a_quote_of_an_older_counter_rule(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = copy_tree(tmp)
            page = copy / "docs" / "workshop.md"
            old = "h200x2-32core-simnic-host-8x4-page256"
            page.write_text(page.read_text() + f"\nIn [{old}](../results/{old}/results.md) "
                            "18 rang 0.250 doorbells per WRITE.\n")
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn(f"docs/workshop.md: quotes counters of {old}, recorded under counter "
                          "rule 1", result.stdout)
            # Raising the rule makes every recording of today old: their
            # counter tables go, each page saying why.
            rule = copy / "common" / "counter_rule.h"
            text = rule.read_text()
            today = int(text.split("kCounterRule = ")[1].split(";")[0])
            rule.write_text(text.replace(f"kCounterRule = {today};",
                                         f"kCounterRule = {today + 1};"))
            page.write_text((source_root() / "docs" / "workshop.md").read_text())
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("results/counters.md", result.stdout)
            self.assertIn("Not shown: recorded under an older counter rule", result.stdout)

    def test_check_catches_a_missing_page(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = copy_tree(tmp)
            (copy / "docs" / "14_batch.md").unlink()
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("docs/14_batch.md: missing", result.stdout)

    def test_check_catches_a_missing_or_stale_transcript(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = copy_tree(tmp)
            transcript = copy / "docs" / "output" / "14_batch.txt"
            transcript.write_text(transcript.read_text().replace("every byte correct",
                                                                 "every byte wrong"))
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("docs/14_batch.md", result.stdout.split("stale page(s):")[-1])
            transcript.unlink()
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("docs/14_batch.md: output:begin 14_batch: no docs/output/14_batch.txt",
                          result.stdout)

    def test_every_chapter_page_shows_what_you_should_see(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = copy_tree(tmp)
            page = copy / "docs" / "13_shard.md"
            text = page.read_text()
            start = text.index("<!-- output:begin 13_shard -->")
            end = text.index("<!-- output:end -->", start) + len("<!-- output:end -->")
            page.write_text(text[:start] + text[end:])
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("docs/13_shard.md: has no <!-- output:begin 13_shard --> block",
                          result.stdout)

    def copy(self, tmp):
        return copy_tree(tmp)

    def write(self, root):
        tool = source_root() / "maint" / "docs_diff.py"
        return subprocess.run([sys.executable, str(tool), "--write", "--root", str(root)],
                              capture_output=True, text=True)

    def test_a_chapter_page_has_one_results_table_of_three_rows(self):
        text = (source_root() / "docs" / "12_pin.md").read_text()
        block = text.split("<!-- results:begin 12_pin -->")[1].split("<!-- results:end -->")[0]
        rows = [line for line in block.splitlines() if line.startswith("| ")][1:]
        self.assertEqual(len(rows), 3, block)
        self.assertIn("the series on its p5", rows[0])
        self.assertIn("**SIMULATED** (simnic)", rows[1])
        self.assertIn("your machine (SIMULATED): `python3 tools/compare.py --provider simnic --repeat 200",
                      rows[2])
        self.assertIn("--chapters 11_multithread 12_pin`", rows[2])
        self.assertIn("(../results/README.md#all-recordings)", block)
        self.assertIn("(../results/counters.md#12_pin)", block)

    def test_chapter_pages_keep_history_and_extra_tables_out(self):
        sys.path.insert(0, str(source_root() / "maint"))
        import check_exercises  # noqa: E402
        for page in check_exercises.chapter_pages(source_root()):
            text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
            tables = [line for line in text.splitlines() if re.match(r"\|\s*-{3}", line)]
            self.assertLessEqual(len(tables), 1, f"{page.name}: more than one table")
            self.assertNotRegex(text, r"(?i)counter[- ]rule", page.name)
            prose = re.sub(r"<!-- .*? -->", "", text)
            for word in re.findall(r"\b[0-9a-f]{7,40}\b", prose):
                self.assertFalse(re.search(r"[a-f]", word) and re.search(r"\d", word),
                                 f"{page.name} names what looks like a commit: {word}")

    def test_check_catches_a_number_the_code_no_longer_gives(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = copy_tree(tmp)
            # simnic/model.h's default names the frozen cost in costs.h.
            model = copy / "simnic" / "costs.h"
            text = model.read_text()
            self.assertIn("kDoorbellNs = ", text)
            model.write_text(re.sub(r"kDoorbellNs = \d+;", "kDoorbellNs = 7;", text))
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            stale = result.stdout.split("stale page(s):")[-1]
            self.assertIn("docs/12_pin.md", stale)
            self.assertIn("docs/18_more.md", stale)
            # A default of a tool moves the counts computed from it.
            tool = copy / "tools" / "run_chapter.py"
            model.write_text(text)
            tool.write_text(tool.read_text().replace("DEFAULT_PAGES = 1000", "DEFAULT_PAGES = 999"))
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("docs/12_pin.md", result.stdout.split("stale page(s):")[-1])

    def test_check_catches_a_typed_cost(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = copy_tree(tmp)
            page = copy / "docs" / "16_thread_domain.md"
            page.write_text(page.read_text().replace(
                "## Why it is faster\n", "## Why it is faster\n\nA post costs 240 ns.\n", 1))
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("docs/16_thread_domain.md: types '240 ns'", result.stdout)

    def test_check_catches_a_typed_constant_of_the_code_or_the_series(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = copy_tree(tmp)
            page = copy / "docs" / "workshop.md"
            original = page.read_text()
            typed = ("\nOne thread for 32 NICs, 16 WRITEs per visit, 4 NICs per GPU; "
                     "see chapter 12, exercise 12.1 and section 4.\n")
            page.write_text(original + typed)
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("docs/workshop.md: types '32 NICs'", result.stdout)
            self.assertIn("<!-- value:begin series.nics -->32<!-- value:end -->", result.stdout)
            self.assertIn("docs/workshop.md: types '16 WRITEs per visit'", result.stdout)
            self.assertIn("docs/workshop.md: types '4 NICs per GPU'", result.stdout)
            # Chapter, exercise and section numbers are no constants.
            self.assertNotIn("'12", result.stdout)
            self.assertNotIn("types '4'", result.stdout)
            # The same numbers from markers pass.
            page.write_text(original + (
                "\nOne thread for <!-- value:begin series.nics -->32<!-- value:end --> NICs, "
                '<!-- value:begin code("chapters/14_batch/server.cc", "kBatchSize") -->16'
                "<!-- value:end --> WRITEs per visit, <!-- value:begin series.nics_per_gpu -->4"
                "<!-- value:end --> NICs per GPU; see chapter 12, exercise 12.1 and section 4.\n"))
            result = check(copy)
            self.assertEqual(result.returncode, 0, result.stdout)
            # A number inside code or a command is not prose.
            page.write_text(original + "\nRun `--nics-per-gpu 4`; it prints `32 NICs`.\n")
            result = check(copy)
            self.assertEqual(result.returncode, 0, result.stdout)

    def test_check_names_a_constant_that_is_gone(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = copy_tree(tmp)
            page = copy / "docs" / "14_batch.md"
            page.write_text(page.read_text() + '\n<!-- value:begin code("common/*.h", '
                            '"kNoSuchThing") -->1<!-- value:end -->\n')
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("common/*.h defines kNoSuchThing nowhere", result.stdout)

    def test_simulated_results_are_labelled(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = self.copy(tmp)
            # A made-up simnic recording, in compare.py's columns: it must
            # never land in a column with measured numbers.
            folder = copy / "results" / "2core-test-simnic-host"
            folder.mkdir()
            default = source_root() / "results" / "2core-amd-epyc-shm-host" / "results.csv"
            text = default.read_text().replace(",shm,host,", ",simnic,host,")
            (folder / "results.csv").write_text(text)
            result = self.write(copy)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            text = (copy / "results" / "README.md").read_text()
            measured, _, simulated = text.partition("Simulated, not measured on a NIC")
            self.assertNotIn("2core-test-simnic-host", measured)
            self.assertIn("2core-test-simnic-host", simulated)
            # The fewest CPUs: the chapter pages' simulated row, labelled.
            page = (copy / "docs" / "12_pin.md").read_text()
            row = next(line for line in page.splitlines() if "2core-test-simnic-host" in line)
            self.assertIn("**SIMULATED** (simnic), 2 CPUs", row)
            self.assertEqual(check(copy).returncode, 0)

    def test_check_catches_a_cost_that_moved(self):
        # docs/simnic.md's costs table is made from simnic/costs.h.
        with tempfile.TemporaryDirectory() as tmp:
            copy = copy_tree(tmp)
            self.assertIn("<!-- costs:begin simnic -->",
                          (copy / "docs" / "simnic.md").read_text())
            header = copy / "simnic" / "costs.h"
            header.write_text(header.read_text().replace("kCqPollNs = 257;", "kCqPollNs = 258;"))
            result = check(copy)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn("| `SIMNIC_CQ_POLL_NS` | 258 |", result.stdout + result.stderr)

    def test_check_catches_a_stale_ladder_summary(self):
        # results/h200x2-fresh/README.md's summary is made from its folders:
        # a step changed in one folder's results.json makes it stale.
        with tempfile.TemporaryDirectory() as tmp:
            copy = copy_tree(tmp)
            page = copy / "results" / "h200x2-fresh" / "README.md"
            self.assertIn("<!-- ladder:begin h200x2-fresh -->", page.read_text())
            data = copy / "results" / "h200x2-fresh" / \
                "h200x2-taskset4-r1-simnic-host-2x4-page256" / "results.json"
            record = json.loads(data.read_text())
            row = next(r for r in record["rows"] if r["chapter"] == "13_shard")
            row["step"], row["step_verdict"] = 0.5, "LOSS"
            data.write_text(json.dumps(record))
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("results/h200x2-fresh/README.md",
                          result.stdout.split("stale page(s):")[-1])

    def test_check_catches_a_stale_code_block(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = copy_tree(tmp)
            pages = [p.name for p in (copy / "docs").glob("*.md")
                     if "<!-- code:begin common/post_queue.h#PostPendingQueueInBatches -->"
                     in p.read_text()]
            self.assertIn("18_more.md", pages)
            header = copy / "common" / "post_queue.h"
            text = header.read_text()
            line = "      if (free_slots > 0) --free_slots;"
            self.assertIn(line, text)
            header.write_text(text.replace(line, line + "  // changed", 1))
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            stale = result.stdout.split("stale page(s):")[-1]
            for page in pages:
                self.assertIn(f"docs/{page}", stale)
            # A change outside the function leaves the pages alone.
            header.write_text(text.replace("#pragma once", "#pragma once  // changed", 1))
            result = check(copy)
            self.assertEqual(result.returncode, 0, result.stdout)

    def test_check_names_a_function_that_is_gone(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = copy_tree(tmp)
            source = copy / "common" / "network.cc"
            text = source.read_text()
            self.assertIn("void Network::ProgressPendingOps() {", text)
            source.write_text(text.replace("ProgressPendingOps", "PostQueue"))
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("docs/18_more.md: code:begin common/network.cc#"
                          "Network::ProgressPendingOps: common/network.cc defines no function "
                          "Network::ProgressPendingOps", result.stdout)

    def test_function_finder(self):
        find = docs_diff().find_function
        text = textwrap.dedent("""\
            // Foo( in a comment
            int Foo(int a);
            template <typename T>
            int Foo(T a) {
              if (a) {
                return Foo(a - 1);
              }
              return 0;
            }
            struct Bar {
              int Get() const { return 1; }
              void Set(int v) {
                v_ = v;
              }
            };
            void Over(int) {
            }
            void Over(double) {
            }
            """)
        self.assertEqual(find(text, "Foo"),
                         ["template <typename T>", "int Foo(T a) {", "  if (a) {",
                          "    return Foo(a - 1);", "  }", "  return 0;", "}"])
        self.assertEqual(find(text, "Bar::Get"), ["int Get() const { return 1; }"])
        self.assertEqual(find(text, "Bar::Set"), ["void Set(int v) {", "  v_ = v;", "}"])
        self.assertEqual(find(text, "Over@2"), ["void Over(double) {", "}"])
        with self.assertRaisesRegex(ValueError, "2 definitions of Over"):
            find(text, "Over")
        with self.assertRaisesRegex(ValueError, "no function Baz"):
            find(text, "Baz")


if __name__ == "__main__":
    unittest.main()
