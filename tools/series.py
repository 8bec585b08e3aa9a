"""The series' recorded ladder and the chapters' one-line ideas.

Shared by tools/compare.py (tables, plot) and maint/docs_diff.py (docs pages).
The Gbps numbers are the series' own, recorded on an AWS p5.48xlarge (8 H100
GPUs, 32 EFA NICs of 100 Gbps) with its default request (64 KiB pages, 1000
pages, 2000 repeats, 2 buffers per GPU), as the series' chapters report them
(SERIES_SOURCE). Nothing here was measured by this repository.
"""

SERIES_SOURCE = ('the blog series "Harnessing 3200Gbps Network" (abcdabcd987), '
                 "chapters 9-15, recorded on an AWS p5.48xlarge")
SERIES_SHORT = "series, p5"

# The series' machine, an AWS p5.48xlarge: the pages read these rather than
# typing them (maint/docs_diff.py's `series.gpus`, `series.nics`, ...).
P5_GPUS = 8  # H100
P5_NICS_PER_GPU = 4  # EFA NICs on a GPU's PCIe switches
P5_NICS = P5_GPUS * P5_NICS_PER_GPU
P5_NIC_GBPS = 100
P5_CORES_PER_GPU = 12  # 96 cores in 2 sockets, 4 GPUs per socket
SERIES_LINK_GBPS = float(P5_NICS * P5_NIC_GBPS)
SERIES_PAGE_SIZE = 65536
SERIES_PAGES = 1000  # pages per client buffer in the series' default request
SERIES_REPEAT = 2000  # times the series' server writes every page

# chapter folder -> (idea in a few words, Gbps the series recorded, Mops/s it
# recorded), both from the example run in the header of each of its files
# (src/9_multinet.cpp ... src/15_lazy.cpp).
CHAPTERS = {
    "09_multinet": ("baseline: every NIC, one thread", 287.089, 0.548),
    "10_warmup": ("warmup WRITEs on every NIC before the clock", 293.461, 0.560),
    "11_multithread": ("one thread per GPU, atomic counters", 355.301, 0.678),
    "12_pin": ("each thread pinned to a core of its GPU's node", 1237.738, 2.361),
    "13_shard": ("per-GPU counters, no shared atomics", 1522.567, 2.904),
    "14_batch": ("post up to 16 WRITEs per visit", 2589.488, 4.939),
    "15_lazy": ("post each NIC's queued WRITEs after reading its CQ", 3108.283, 5.929),
}

# Our own chapters after the series': no series number exists for them.
OURS = {
    "16_thread_domain": "FI_THREAD_DOMAIN: no provider lock per call",
    "17_op_pool": "pooled operations, no allocation or std::function per WRITE",
    "18_more": "FI_MORE: one doorbell per batch of WRITEs",
}

ORDER = list(CHAPTERS) + list(OURS)

# Other numbers the series' posts report, quoted by the pages (Gbps).
QUOTES = {
    # chapter 9's progress line: where it started and where it jumped to
    # before it crept up to its final speed (the slow start chapter 10 removes)
    "09_start_gbps": 100,
    "09_jump_gbps": 260,
    # chapter 10's progress line from its first report on
    "10_start_gbps": 290,
}


def idea(chapter):
    return CHAPTERS[chapter][0] if chapter in CHAPTERS else OURS[chapter]


def series_gbps(chapter):
    """None for our own chapters (16 on): the series has no number for them."""
    return CHAPTERS[chapter][1] if chapter in CHAPTERS else None


def series_mops(chapter):
    return CHAPTERS[chapter][2] if chapter in CHAPTERS else None


def series_share(chapter):
    return CHAPTERS[chapter][1] / SERIES_LINK_GBPS if chapter in CHAPTERS else None


def previous(chapter):
    i = ORDER.index(chapter)
    return ORDER[i - 1] if i > 0 else None


def number(chapter):
    return chapter.split("_", 1)[0]


def short_name(chapter):
    return chapter.split("_", 1)[1]
