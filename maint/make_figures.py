#!/usr/bin/env python3
"""Draws the docs' figures (SVG, written by hand: no plotting library) from the code's facts.

  docs/figures/p5_layout.svg  the p5's groups: each GPU, its 4 EFA NICs and its
                              cores, as common/topology builds them from the
                              p5's saved topology (tests/fixtures/p5.48xlarge.xml)
                              and the EFA NICs of its lspci tree (p5-lspci.txt)
  docs/figures/data_flow.svg  one transfer's data: a writer thread per GPU,
                              its NICs in turn, the client's region per NIC and
                              buffer, pages at random slots
  docs/figures/timeline.svg   one transfer in time: CONNECT, CHALLENGE,
                              RANDOM_FILL, fill, warmup, timed WRITEs, done
                              notices, verification

The groups come from tools/topology_dump (bazel build //tools:topology_dump),
which runs common/topology's own code on the fixture; the message names, the
buffers per GPU, the in-flight window (the chapters' kMaxPendingWrites) and
the chapter that adds the warmup are read from common/ and chapters/. The output is deterministic: the same code
gives the same bytes, and //docs:figures_check_test fails when the checked-in
figures differ from what this tool makes (fix: run it and commit them).

  bazel build //tools:topology_dump && python3 maint/make_figures.py
  python3 maint/make_figures.py --check      # exit 1 and name the figures that drifted

  docs/figures/cpu_per_write.svg  per chapter, what a writer thread's CPU does
                              per WRITE (CPU time inside and outside provider
                              calls, CQ reads, doorbells and allocations per
                              WRITE), each chapter against the one before it:
                              the counters of a recorded results folder
                              (--counters-from; the simulated simnic ladder,
                              the one folder with counters), labelled
                              "simulated" when the folder is
"""
import argparse
import csv
import json
import pathlib
import random
import re
import subprocess
import sys
from xml.sax.saxutils import escape

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from p5_check import efa_nics  # noqa: E402  (NAME=PCI from an lspci -t -v tree)

# Figures that need facts the code does not record yet: name -> what is missing.
PENDING = {}

# The recorded folder whose counters cpu_per_write.svg draws: the one with
# counters (tools/compare.py's results.csv, counter columns filled).
COUNTERS_FROM = "results/h200x2-32core-simnic-host-8x4-page256"

FONT = "DejaVu Sans, Arial, Helvetica, sans-serif"
COLORS = {"gpu": "#76b900", "nic": "#4c72b0", "core": "#dd8452", "box": "#f4f4f4",
          "line": "#555555", "client": "#8172b2", "server": "#55a868", "slot": "#e8e8e8",
          "page": "#c44e52", "text": "#222222", "muted": "#777777"}


class Svg:
    """A minimal SVG writer with fixed number formatting (deterministic bytes)."""

    def __init__(self, width, height, title):
        self.width, self.height = width, height
        self.items = [f'<title>{escape(title)}</title>',
                      '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" '
                      'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
                      f'<path d="M 0 0 L 10 5 L 0 10 z" fill="{COLORS["line"]}"/></marker></defs>',
                      f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>']

    @staticmethod
    def n(x):
        return f"{x:.1f}".rstrip("0").rstrip(".")

    def rect(self, x, y, w, h, fill, stroke="none", rx=4, dash=False):
        extra = ' stroke-dasharray="4 3"' if dash else ""
        self.items.append(f'<rect x="{self.n(x)}" y="{self.n(y)}" width="{self.n(w)}" '
                          f'height="{self.n(h)}" rx="{rx}" fill="{fill}" stroke="{stroke}"{extra}/>')

    def text(self, x, y, s, size=12, anchor="start", weight="normal", color=None, italic=False):
        style = ' font-style="italic"' if italic else ""
        self.items.append(f'<text x="{self.n(x)}" y="{self.n(y)}" font-size="{size}" '
                          f'text-anchor="{anchor}" font-weight="{weight}" '
                          f'fill="{color or COLORS["text"]}"{style}>{escape(s)}</text>')

    def line(self, x1, y1, x2, y2, arrow=False, color=None, width=1.2, dash=False):
        extra = ' marker-end="url(#arrow)"' if arrow else ""
        extra += ' stroke-dasharray="5 4"' if dash else ""
        self.items.append(f'<line x1="{self.n(x1)}" y1="{self.n(y1)}" x2="{self.n(x2)}" '
                          f'y2="{self.n(y2)}" stroke="{color or COLORS["line"]}" '
                          f'stroke-width="{width}"{extra}/>')

    def render(self):
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" '
                f'height="{self.height}" viewBox="0 0 {self.width} {self.height}" '
                f'font-family="{FONT}">\n' + "\n".join(self.items) + "\n</svg>\n")


# --- the code's facts --------------------------------------------------------

class FactError(Exception):
    pass


def gpu_models(lspci_text):
    """PCI address -> the GPU's name in an `lspci -t -v` tree."""
    models = {}
    for line in lspci_text.splitlines():
        m = re.search(r"\[([0-9a-f]{2})\]----00\.0\s+NVIDIA Corporation \S+ \[([^\]]+)\]", line)
        if m:
            models[f"0000:{m.group(1)}:00.0"] = m.group(2)
    return models


def p5_groups(args):
    lspci = (args.root / args.lspci).read_text()
    nics = efa_nics(lspci)
    if not nics:
        raise FactError(f"{args.lspci}: no EFA NIC found")
    if not args.topology_dump.exists():
        raise FactError(f"{args.topology_dump} not found: bazel build //tools:topology_dump "
                        "(or pass --topology-dump)")
    out = subprocess.run([str(args.topology_dump), str(args.root / args.fixture), *nics],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise FactError(f"topology_dump failed: {out.stderr.strip()}")
    layout = json.loads(out.stdout)
    models = gpu_models(lspci)
    for g in layout["groups"]:
        g["model"] = models.get(g["gpu_pci"], "GPU")
    return layout


def code_facts(root):
    """What the pictures say about the protocol, read from the code."""
    messages = (root / "common" / "messages.h").read_text()
    m = re.search(r"enum class MessageType[^{]*\{([^}]*)\}", messages)
    if not m:
        raise FactError("common/messages.h: no enum class MessageType")
    names = [re.sub(r"(?<!^)([A-Z])", r"_\1", k.strip().split("=")[0].strip()[1:]).upper()
             for k in m.group(1).split(",") if k.strip()]
    # The in-flight window every chapter passes to NetworkGroup::Backlogged.
    windows = {re.search(r"kMaxPendingWrites\s*=\s*(\d+)", p.read_text()).group(1)
               for p in (root / "chapters").glob("*/server.cc")
               if "kMaxPendingWrites =" in p.read_text()}
    b = re.match(r"(\d+)", windows.pop()) if len(windows) == 1 else None
    server = (root / "common" / "server.cc").read_text()
    if "SendDoneNotices" not in server:
        raise FactError("common/server.cc: no SendDoneNotices (the done notices moved?)")
    chapters = sorted(p.name for p in (root / "chapters").iterdir() if (p / "server.cc").exists())
    warmup = next((c for c in chapters if c.endswith("_warmup")), None)
    protocol = ("CONNECT", "CHALLENGE", "RANDOM_FILL")
    if not warmup or not b or any(n not in names for n in protocol):
        raise FactError("the code no longer has a warmup chapter, one kMaxPendingWrites, CONNECT, "
                        "CHALLENGE or RANDOM_FILL: update maint/make_figures.py")
    return {"messages": names, "backlog": int(b.group(1)), "warmup_chapter": warmup,
            "first_chapter": chapters[0]}


def ranges(values):
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(f"{start}-{v}" if v != start else f"{v}")
            start = None
    return ", ".join(out)


# --- the figures ---------------------------------------------------------------

def p5_layout(layout, facts):
    groups = layout["groups"]
    nodes = sorted({g["numa_node"] for g in groups})
    per_node = max(sum(1 for g in groups if g["numa_node"] == n) for n in nodes)
    gw, gh, pad, top = 262, 178, 14, 62
    node_h = gh + 44
    width = pad + per_node * (gw + pad) + pad + pad
    height = top + len(nodes) * (node_h + pad) + 24
    svg = Svg(width, height, "p5.48xlarge: GPUs, EFA NICs and cores per group")
    nics = sum(len(g["nics"]) for g in groups)
    svg.text(pad, 26, f"AWS p5.48xlarge as the chapters see it: {len(groups)} groups of one GPU, "
             f"the {len(groups[0]['nics'])} EFA NICs behind its PCIe switch and "
             f"{len(groups[0]['cores'])} cores of its NUMA node", 15, weight="bold")
    svg.text(pad, 46, f"{nics} NICs x 100 Gbps = {nics * 100} Gbps; {layout['physical_cores']} "
             "physical cores. Drawn by maint/make_figures.py from tests/fixtures/p5.48xlarge.xml "
             "and p5-lspci.txt through common/topology.", 11, color=COLORS["muted"])
    for row, node in enumerate(nodes):
        mine = [g for g in groups if g["numa_node"] == node]
        y0 = top + row * (node_h + pad)
        svg.rect(pad, y0, width - 2 * pad, node_h, "none", stroke=COLORS["muted"], rx=8,
                 dash=True)
        svg.text(pad + 10, y0 + 18, f"NUMA node {node}", 13, weight="bold",
                 color=COLORS["muted"])
        for i, g in enumerate(mine):
            x, y = 2 * pad + i * (gw + pad) - pad / 2, y0 + 30
            svg.rect(x, y, gw, gh, COLORS["box"], stroke="#cccccc")
            svg.text(x + 8, y + 18, f"group {g['cuda_device']}", 12, weight="bold")
            svg.text(x + gw - 8, y + 18, "own thread from ch. 11", 11, "end", color=COLORS["muted"])
            svg.rect(x + 8, y + 26, gw - 16, 30, COLORS["gpu"])
            svg.text(x + gw / 2, y + 39, f"GPU {g['cuda_device']}: {g['model']}", 11, "middle",
                     color="white", weight="bold")
            svg.text(x + gw / 2, y + 52, g["gpu_pci"], 10, "middle", color="white")
            for k, (name, pci) in enumerate(zip(g["nics"], g["nic_pci"])):
                ny = y + 62 + k * 22
                svg.rect(x + 8, ny, gw - 16, 19, COLORS["nic"])
                svg.text(x + 14, ny + 14, f"NIC {k}: EFA {name}", 11, color="white")
                svg.text(x + gw - 14, ny + 14, pci, 10, "end", color="white")
            svg.rect(x + 8, y + 152, gw - 16, 19, COLORS["core"])
            svg.text(x + gw / 2, y + 166, f"cores {ranges(g['cores'])}", 11, "middle",
                     color="white")
    svg.text(pad, height - 14, f"Each GPU's {layout['buffers_per_gpu']} buffers are registered "
             "on each of its NICs; the group's thread (chapter 11 on) posts that GPU's WRITEs "
             "on its NICs in turn, pinned to one of its cores from chapter 12.", 11,
             color=COLORS["muted"])
    return svg.render()


def data_flow(layout, facts):
    g0 = layout["groups"][0]
    nics = len(g0["nics"])
    bufs = layout["buffers_per_gpu"]
    slots, pages = 16, 8
    sample = random.Random(2024).sample(range(slots), pages)  # an illustration, fixed
    width, height = 1180, 200 + bufs * 150
    svg = Svg(width, height, "One transfer's data flow, one GPU group")
    svg.text(14, 26, f"One transfer, group 0 (every group the same, at once): the writer "
             f"thread posts page after page, each on the next of its {nics} NICs", 15,
             weight="bold")
    svg.text(14, 46, "Server NIC i WRITEs to client NIC i, into the client's region of that "
             "NIC and buffer (the same memory, registered once per NIC, with its own key), at "
             "the slot the request gave the page.", 11, color=COLORS["muted"])
    # server: thread, buffers
    svg.rect(14, 70, 250, height - 90, COLORS["box"], stroke="#cccccc")
    svg.text(24, 90, "server, GPU 0", 13, weight="bold", color=COLORS["server"])
    svg.rect(24, 100, 230, 36, COLORS["core"])
    svg.text(139, 116, "writer thread (one per GPU", 11, "middle", color="white")
    svg.text(139, 130, "from chapter 11; one in all before)", 11, "middle", color="white")
    for b in range(bufs):
        by = 160 + b * 150
        svg.text(24, by - 6, f"buffer {b}: pages 0..{pages - 1} (pseudo-random, from the seed)",
                 10, color=COLORS["muted"])
        for p in range(pages):
            svg.rect(24 + p * 28, by, 24, 24, COLORS["gpu"], rx=2)
            svg.text(36 + p * 28, by + 16, str(p), 10, "middle", color="white")
    # NICs, server and client
    nx_s, nx_c, ny0, cx = 330, 690, 110, 860
    step = (height - 140) / nics
    for k in range(nics):
        y = ny0 + k * step
        svg.rect(nx_s, y, 120, 26, COLORS["nic"])
        svg.text(nx_s + 60, y + 17, f"server NIC {k}", 11, "middle", color="white")
        svg.rect(nx_c, y, 120, 26, COLORS["nic"])
        svg.text(nx_c + 60, y + 17, f"client NIC {k}", 11, "middle", color="white")
        svg.line(nx_s + 120, y + 13, nx_c, y + 13, arrow=True, width=2)
        svg.line(nx_c + 120, y + 13, cx - 14, y + 13, arrow=True, color=COLORS["nic"],
                 dash=True)
        svg.text((nx_s + 120 + nx_c) / 2, y + 8, "RDMA WRITE", 10, "middle",
                 color=COLORS["muted"])
        svg.line(254, 118, nx_s, y + 13, arrow=True, color=COLORS["core"])
    svg.text(nx_s, height - 28, f"the GPU's k-th WRITE goes out on its NIC (k mod {nics}): "
             "buffer after buffer, page after page,", 10, color=COLORS["muted"])
    svg.text(nx_s, height - 14, f"NICs in turn; at most {facts['backlog']} WRITEs wait on one "
             "NIC", 10, color=COLORS["muted"])
    # client: regions and slots
    svg.rect(cx - 14, 70, width - cx, height - 90, COLORS["box"], stroke="#cccccc")
    svg.text(cx, 90, "client, GPU 0", 13, weight="bold", color=COLORS["client"])
    for b in range(bufs):
        by = 160 + b * 150
        svg.text(cx, by - 26, f"buffer {b}: {slots} page slots; every NIC writes here,", 10,
                 color=COLORS["muted"])
        svg.text(cx, by - 12, f"through region (NIC k, buffer {b}): its own key", 10,
                 color=COLORS["muted"])
        for s in range(slots):
            svg.rect(cx + s * 18, by, 16, 24, COLORS["slot"], rx=2)
        for p, s in enumerate(sample):
            svg.rect(cx + s * 18, by, 16, 24, COLORS["page"], rx=2)
            svg.text(cx + s * 18 + 8, by + 16, str(p), 10, "middle", color="white")
            svg.text(cx + s * 18 + 8, by + 38, f"N{p % nics}", 8, "middle", color=COLORS["nic"])
    svg.text(cx, height - 44, "slot of page j: the request's page_indices[j],", 10,
             color=COLORS["muted"])
    svg.text(cx, height - 30, "a random sample without repeats, the same", 10,
             color=COLORS["muted"])
    svg.text(cx, height - 16, "for both buffers (here made up); Nk: its NIC", 10,
             color=COLORS["muted"])
    return svg.render()


def timeline(layout, facts):
    nics_total = sum(len(g["nics"]) for g in layout["groups"])
    connect, challenge, fill = "CONNECT", "CHALLENGE", "RANDOM_FILL"
    width, height = 1180, 340
    svg = Svg(width, height, "One transfer in time")
    svg.text(14, 26, "One transfer in time (not to scale): what the server's progress line "
             "times is the dark bar", 15, weight="bold")
    lanes = {"client": 80, "server": 220}
    for name, y in lanes.items():
        svg.text(14, y + 5, name, 13, weight="bold", color=COLORS[name])
        svg.line(90, y, width - 20, y, color="#bbbbbb")
    steps = [  # (lane, x, width, label, detail lines, timed)
        ("server", 100, 120, "open, register", ["an endpoint per NIC;", "prints its address"],
         False),
        ("client", 100, 120, "open, register",
         [f"{layout['buffers_per_gpu']} buffers per GPU, on each NIC"], False),
        ("server", 330, 120, "fill", ["its buffers from the seed;", "client into its AVs"],
         False),
        ("server", 465, 110, "warmup", ["1 WRITE per NIC", "and buffer",
                                         f"({facts['warmup_chapter']} on)"],
         False),
        ("server", 590, 260, "timed WRITEs", ["every page x repeat, NICs in turn"], True),
        ("client", 880, 130, "verify", ["copy pages back, check every byte"], False),
        ("server", 1030, 120, "next client", ["final progress line"], False),
    ]
    for lane, x, w, label, detail, timed in steps:
        y = lanes[lane]
        svg.rect(x, y - 16, w, 32, COLORS["text"] if timed else COLORS[lane], rx=5)
        svg.text(x + w / 2, y + 5, label, 12, "middle", color="white", weight="bold")
        for i, part in enumerate(detail):
            dy = 34 + 13 * i if lane == "server" else -24 - 13 * (len(detail) - 1 - i)
            svg.text(x + w / 2, y + dy, part, 10, "middle", color=COLORS["muted"])
    # messages client -> server (the server's cookie between them), done
    # notices server -> client
    svg.line(232, lanes["client"] + 16, 262, lanes["server"] - 16, arrow=True, width=1.6)
    svg.text(228, 140, f"SEND {connect}", 11, "end")
    svg.text(228, 154, "addresses, (addr, size, key)", 10, "end", color=COLORS["muted"])
    svg.line(270, lanes["server"] - 16, 290, lanes["client"] + 16, arrow=True, width=1.6)
    svg.text(276, 254, challenge, 11, "middle")
    svg.text(276, 267, "a cookie, to NIC 0", 10, "middle", color=COLORS["muted"])
    svg.line(298, lanes["client"] + 16, 326, lanes["server"] - 16, arrow=True, width=1.6)
    svg.text(310, 120, f"SEND {fill}", 11)
    svg.text(310, 134, "cookie, context, seed, page size, slots", 10, color=COLORS["muted"])
    svg.line(855, lanes["server"] - 16, 875, lanes["client"] + 16, arrow=True, width=1.6)
    svg.text(862, 150, f"done notices: 1 WRITE per NIC ({nics_total} on a p5)", 11)
    svg.text(862, 164, "with the remote context as CQ data, after all", 10, color=COLORS["muted"])
    svg.text(862, 176, "other WRITEs completed (SendDoneNotices)", 10, color=COLORS["muted"])
    svg.text(14, height - 34, f"Every chapter ({facts['first_chapter']} on) runs this protocol; "
             f"{facts['warmup_chapter']} adds the warmup, and from there the chapters differ "
             "only inside the dark bar: how the server's threads post WRITEs and poll "
             "completions.", 11, color=COLORS["muted"])
    svg.text(14, height - 16, f"Message types from common/messages.h: "
             f"{', '.join(facts['messages'])}.", 11, color=COLORS["muted"])
    return svg.render()


def counter_rows(root, folder):
    """The chapters' counters of a recorded folder (results.csv of tools/compare.py)."""
    path = root / folder / "results.csv"
    if not path.exists():
        raise FactError(f"{folder}/results.csv not found (--counters-from)")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    need = ("ns_per_write_provider", "ns_per_write_app", "cq_reads_per_write",
            "doorbells_per_write", "op_allocations_per_write", "mops_median")
    if not rows or any(not r.get(k) for r in rows for k in need):
        raise FactError(f"{folder}/results.csv: not every chapter has the counters "
                        f"({', '.join(need)})")
    return rows


# (column, short name, digits) of the per-WRITE counts drawn beside the bars.
PER_WRITE = [("cq_reads_per_write", "CQ reads", 2), ("doorbells_per_write", "doorbells", 2),
             ("op_allocations_per_write", "allocations", 2)]


def changes(before, after):
    """What moved by a quarter or more between two chapters' rows, largest first."""
    found = []
    for key, name, digits in PER_WRITE + [("ns_per_write_provider", "ns in provider", 0),
                                          ("ns_per_write_app", "ns in app", 0)]:
        a, b = float(before[key]), float(after[key])
        if max(a, b) > 0 and abs(b - a) / max(a, b) >= 0.25:
            found.append((abs(b - a) / max(a, b), f"{name} {a:.{digits}f} -> {b:.{digits}f}"))
    return [s for _, s in sorted(found, key=lambda x: -x[0])[:2]]


def cpu_per_write(rows, folder):
    simulated = all(r.get("kind") == "simulated" or r.get("provider") == "simnic"
                    for r in rows)
    label = "SIMULATED" if simulated else "measured"
    first = rows[0]
    total = [float(r["ns_per_write_provider"]) + float(r["ns_per_write_app"]) for r in rows]
    scale = 430 / max(total)
    x0, bar_x, top, row_h = 14, 150, 124, 40
    cols = [bar_x + 700, bar_x + 780, bar_x + 870]  # right edges of the per-WRITE counts
    moved_x = bar_x + 900
    width, height = 1560, top + row_h * len(rows) + 70
    svg = Svg(width, height, f"{label}: a writer thread's CPU per WRITE, chapter by chapter")
    svg.text(x0, 26, f"{label}: what a writer thread's CPU does per WRITE, chapter by chapter"
             + (" (simnic, a simulated NIC: not a measurement of a NIC)" if simulated else ""),
             15, weight="bold", color=COLORS["page"] if simulated else None)
    svg.text(x0, 46, f"Counters of {folder}/results.csv (medians of {first['runs']} runs; "
             f"{first['provider']}, {first['memory']} memory, {first['gpus']} groups x "
             f"{first['nics_per_gpu']} NICs, {first['page_size']}-byte pages), drawn by "
             "maint/make_figures.py.", 11, color=COLORS["muted"])
    svg.text(x0, 62, "Each row is a chapter; the row above it is the chapter before its idea. "
             "CPU time per WRITE is one writer thread's, split between provider calls and "
             "our own code (docs/counters.md).", 11, color=COLORS["muted"])
    svg.text(bar_x, top - 16, "CPU ns per WRITE: in provider calls + in our code", 11,
             weight="bold")
    svg.text(cols[0] - 40, top - 32, "per WRITE", 11, weight="bold")
    for x, (_, name, _) in zip(cols, PER_WRITE):
        svg.text(x, top - 16, name, 11, "end", weight="bold")
    svg.text(moved_x, top - 16, "moved against the chapter above (by 25% or more)", 11,
             weight="bold")
    svg.text(width - 14, top - 32, "M WRITEs/s", 11, "end", weight="bold")
    if simulated:
        svg.text(width - 14, top - 16, "(simulated)", 11, "end", weight="bold")
    for i, r in enumerate(rows):
        y = top + i * row_h
        if i % 2 == 0:
            svg.rect(x0 - 4, y - 4, width - 2 * x0 + 8, row_h, "#f6f6f6", rx=2)
        svg.text(x0, y + 18, r["chapter"], 12, weight="bold")
        prov, app = float(r["ns_per_write_provider"]), float(r["ns_per_write_app"])
        svg.rect(bar_x, y + 4, prov * scale, 22, COLORS["nic"], rx=2)
        svg.rect(bar_x + prov * scale, y + 4, max(app * scale, 1), 22, COLORS["core"], rx=2)
        svg.text(bar_x + (prov + app) * scale + 6, y + 19,
                 f"{prov + app:.0f} = {prov:.0f} + {app:.0f}", 11)
        for x, (key, _, digits) in zip(cols, PER_WRITE):
            svg.text(x, y + 19, f"{float(r[key]):.{digits}f}", 11, "end")
        moved = changes(rows[i - 1], r) if i else ["(the baseline)"]
        svg.text(moved_x, y + 19, "; ".join(moved) or "nothing by 25%", 11,
                 color=COLORS["text"] if moved else COLORS["muted"])
        svg.text(width - 14, y + 19, f"{float(r['mops_median']):.2f}", 11, "end")
    svg.rect(x0, height - 46, 14, 12, COLORS["nic"], rx=2)
    svg.text(x0 + 20, height - 36, "inside provider calls (fi_writemsg, fi_cq_read: with "
             "simnic, the model's post, doorbell and CQ-read costs are spent here)", 11)
    svg.rect(x0, height - 26, 14, 12, COLORS["core"], rx=2)
    svg.text(x0 + 20, height - 16, "outside them: our writer's own code (bookkeeping, "
             "allocation, callbacks, counters)", 11)
    return svg.render()


FIGURES = {"p5_layout.svg": p5_layout, "data_flow.svg": data_flow, "timeline.svg": timeline}


def make_all(args):
    layout = p5_groups(args)
    facts = code_facts(args.root)
    figures = {name: draw(layout, facts) for name, draw in FIGURES.items()}
    figures["cpu_per_write.svg"] = cpu_per_write(counter_rows(args.root, args.counters_from),
                                                 args.counters_from)
    return figures


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=pathlib.Path, default=ROOT,
                   help="repository root whose code and fixtures are drawn (default: this "
                        "checkout)")
    p.add_argument("--out", type=pathlib.Path, default=None,
                   help="folder for the SVGs (default: <root>/docs/figures)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 naming each figure that differs from what "
                        "this tool makes")
    p.add_argument("--topology-dump", type=pathlib.Path, default=None,
                   help="the tools/topology_dump binary (default: <root>/bazel-bin/tools/"
                        "topology_dump; bazel build //tools:topology_dump)")
    p.add_argument("--fixture", default="tests/fixtures/p5.48xlarge.xml",
                   help="saved p5 topology, relative to --root (default: %(default)s)")
    p.add_argument("--lspci", default="tests/fixtures/p5-lspci.txt",
                   help="the p5's `lspci -t -v`, relative to --root (default: %(default)s)")
    p.add_argument("--counters-from", default=COUNTERS_FROM,
                   help="recorded folder whose counters cpu_per_write.svg draws, relative to "
                        "--root (default: %(default)s)")
    p.add_argument("--pending", action="store_true",
                   help="list the figures not drawn yet and what they need, and exit")
    args = p.parse_args()
    if args.pending:
        for name, need in PENDING.items():
            print(f"{name}: {need}")
        if not PENDING:
            print("make_figures: every figure is drawn; none is pending")
        return 0
    args.out = args.out or args.root / "docs" / "figures"
    args.topology_dump = args.topology_dump or args.root / "bazel-bin" / "tools" / "topology_dump"
    try:
        figures = make_all(args)
    except (FactError, OSError, ValueError) as e:
        print(f"make_figures: {e}", file=sys.stderr)
        return 2
    drifted = []
    for name, text in figures.items():
        path = args.out / name
        old = path.read_text() if path.exists() else None
        if old == text:
            continue
        if args.check:
            drifted.append(name)
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"make_figures: wrote {path}")
    if drifted:
        print(f"make_figures: {', '.join(drifted)} in {args.out} differ from what the code "
              "makes; run `bazel build //tools:topology_dump && python3 maint/make_figures.py` "
              "and commit them")
        return 1
    if args.check:
        print(f"make_figures: {len(figures)} figure(s) match the code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
