"""The Markdown and HTML reports, rendered from real saved sessions (tests/fixtures/reports,
and the real H100 `ddptui check --json` reports in tests/fixtures/gpu-h100/ddptui) and from
reports built to corner them: the first failure and its fix as commands, the
step table's shape, the odd node out, env differences, the allreduce table, hostile node
output, self-containment, and the HTML as headless Chromium draws it."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import shutil
import struct
import subprocess
import time
import xml.etree.ElementTree as ET
import zlib
from html import escape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from ddptui.report.html import clean_screenshot, render_html
from ddptui.report.markdown import clean_line, fix_commands, render_markdown
from ddptui.report.svg import downsample, human_rate, series, sparkline, text_sparkline
from ddptui.report.views import COMPACT_NODES, failing_first

REPORTS = Path(__file__).resolve().parent / "fixtures" / "reports"
# Real `ddptui check --json` reports from a lent H100: gpu-h100/ddptui as recorded before
# the one-rank busbw fix, gpu-bw with the nccl-tests-like sweep.
GPU_REPORTS = [
    *(Path(__file__).resolve().parent / "fixtures" / "gpu-h100" / "ddptui").glob("check-*.json"),
    *(Path(__file__).resolve().parent / "fixtures" / "gpu-bw").glob("check-*.json"),
]
GPU_FIXTURES = sorted(f"{p.parent.name}/{p.stem}" for p in GPU_REPORTS)
SOURCES = {
    **{p.stem: p for p in REPORTS.glob("*.json")},
    **{f"{p.parent.name}/{p.stem}": p for p in GPU_REPORTS},
}
FIXTURES = sorted(SOURCES)
HOSTILE = "<script>alert(1)</script> | ``` </details> *x* [a](http://evil)"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SOURCES[name].read_text())
    return data


def test_the_real_gpu_reports_are_among_the_fixtures() -> None:
    assert GPU_FIXTURES == [
        "ddptui/check-1node-nccl",
        "ddptui/check-2nodes-1gpu",
        "gpu-bw/check-1node-nccl",
    ]
    assert set(GPU_FIXTURES) <= set(FIXTURES)


def node_names(report: dict[str, Any]) -> list[str]:
    """The steps matrix's node columns: config order, failing nodes first when wide."""
    names = [n["name"] for n in report["nodes"]]
    return failing_first(report, names) if len(names) > COMPACT_NODES else names


# --------------------------------------------------------------------------- Markdown helpers

CELL_SPLIT = re.compile(r"(?<!\\)\|")


def md_table(md: str, heading: str) -> list[list[str]]:
    """The first pipe table after `heading`: header row then body rows, cells stripped."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    first = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("|"))
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in CELL_SPLIT.split(line)[1:-1]])
    assert set(rows[1][0]) <= set("-:"), "second row is the delimiter row"
    return [rows[0], *rows[2:]]


def md_blocks(md: str) -> tuple[list[str], list[list[str]]]:
    """Lines outside fenced blocks, and each fenced block's content (CommonMark rules:
    a fence closes only on a run of at least as many backticks, alone on its line)."""
    outside: list[str] = []
    blocks: list[list[str]] = []
    fence = ""
    for line in md.splitlines():
        if fence:
            if line.strip() == line and re.fullmatch(rf"{fence}`*", line):
                fence = ""
            else:
                blocks[-1].append(line)
            continue
        m = re.match(r"(`{3,})", line)
        if m:
            fence = m.group(1)
            blocks.append([])
        else:
            outside.append(line)
    assert not fence, "a fenced block is never closed"
    return outside, blocks


# --------------------------------------------------------------------------- HTML helpers


class Dom(HTMLParser):
    """Tags with their attributes and the text inside each, enough to check structure."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.starts: list[tuple[str, dict[str, str]]] = []
        self.ends: list[str] = []
        self.text: list[str] = []
        self.tables: list[dict[str, Any]] = []
        self._open: list[dict[str, Any]] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.starts.append((tag, a))
        if tag == "table":
            self._open.append({"class": a.get("class", ""), "rows": []})
        elif tag == "tr" and self._open:
            self._open[-1]["rows"].append([])
        elif tag in ("td", "th") and self._open:
            self._open[-1]["rows"][-1].append({"class": a.get("class", ""), "text": ""})

    def handle_endtag(self, tag: str) -> None:
        self.ends.append(tag)
        if tag == "table" and self._open:
            self.tables.append(self._open.pop())

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._open and self._open[-1]["rows"] and self._open[-1]["rows"][-1]:
            self._open[-1]["rows"][-1][-1]["text"] += data

    def table(self, cls: str) -> list[list[dict[str, str]]]:
        rows: list[list[dict[str, str]]] = next(
            t["rows"] for t in self.tables if cls in t["class"].split()
        )
        return rows

    def count(self, tag: str, cls: str | None = None) -> int:
        return sum(
            1
            for t, a in self.starts
            if t == tag and (cls is None or cls in a.get("class", "").split())
        )


def parse_svg(text: str) -> ET.Element:
    """Well-formedness check of SVG we generated ourselves, in a test."""
    return ET.fromstring(text)  # noqa: S314 (our own renderer's output, not untrusted input)


def assert_self_contained(doc: str) -> None:
    assert not re.search(r"<script", doc, re.IGNORECASE)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//)""", doc, re.IGNORECASE)
    assert not re.search(r"""url\(\s*["']?\s*(?:https?:|//)""", doc, re.IGNORECASE)
    assert not re.search(r"@import", doc, re.IGNORECASE)
    assert not re.search(r"<(?:link|iframe|object|embed|img)\b", doc, re.IGNORECASE)


# --------------------------------------------------------------------------- fixtures


@pytest.mark.parametrize("name", FIXTURES)
def test_markdown_names_the_failing_step_and_its_fix(name: str) -> None:
    report = load(name)
    md = render_markdown(report)
    first = report["first_failure"]
    if first is None:
        clean = all(s["status"] in ("pass", "skip") for s in report["steps"])
        assert ("Every step passed" if clean else "No step failed") in md
    else:
        lead = md.split("## Steps")[0]  # the verdict and the failure come first
        assert f"First failure: `{first['step']}`" in lead
        assert f"`{first['finding']}`" in lead
        assert f"**Fix:** {first['fix'][:30]}" in lead
        commands = fix_commands(first["fix"])
        _, blocks = md_blocks(lead)
        for command in commands:
            assert any(command in block for block in blocks), "fix command in a ```sh block"
        assert ("```sh" in lead) == bool(commands)
    table = md_table(md, "## Steps")
    assert table[0][3:] == node_names(report)
    assert [row[0].strip("`") for row in table[1:]] == [s["id"] for s in report["steps"]]
    assert all(len(row) == 3 + len(report["nodes"]) for row in table)
    outside, blocks = md_blocks(md)
    assert sum(line.count("<details") for line in outside) == sum(
        line.count("</details>") for line in outside
    )
    for node, log in (report.get("logs") or {}).items():
        for excerpt in log["excerpts"]:
            assert f"<details><summary>{node}: {len(log['excerpts'])} excerpt" in md
            for line in excerpt["lines"]:  # every line, in a code block (cut at 400)
                shown = clean_line(line)[:200]
                assert any(shown in text for block in blocks for text in block), shown


@pytest.mark.parametrize("name", FIXTURES)
def test_html_names_the_failing_step_and_is_self_contained(name: str) -> None:
    report = load(name)
    doc = render_html(report)
    assert_self_contained(doc)
    dom = Dom(doc)
    first = report["first_failure"]
    text = "".join(dom.text)
    if first is None:
        clean = all(s["status"] in ("pass", "skip") for s in report["steps"])
        assert ("Every step passed" if clean else "No step failed") in text
    else:
        banner = doc.split('class="banner fail"', 1)[1].split("</div>", 1)[0]
        assert f"<code>{first['step']}</code>" in banner
        assert first["finding"] in banner
        assert escape(first["fix"][:30]) in banner
        commands = fix_commands(first["fix"])
        assert ('<pre class="cmd">' in banner) == bool(commands)
        for command in commands:
            assert escape(command) in banner
    rows = dom.table("steps")
    assert [c["text"] for c in rows[0][3:]] == node_names(report)
    assert [r[0]["text"] for r in rows[1:]] == [s["id"] for s in report["steps"]]
    for step, row in zip(report["steps"], rows[1:], strict=True):
        for node, cell in zip(node_names(report), row[3:], strict=True):
            assert step["nodes"][node]["status"] in cell["class"].split()
    assert dom.count("details") == dom.ends.count("details")
    for node, log in (report.get("logs") or {}).items():
        if log["excerpts"]:
            assert f"<details open><summary>{node}: {len(log['excerpts'])} excerpt" in doc
            assert escape(log["excerpts"][0]["lines"][0], quote=True) in doc
    metrics = (report.get("metrics") or {}).get("nodes") or {}
    for node, data in metrics.items():
        card = doc.split(f'<div class="card"><h3>{node} ', 1)[1].split('<div class="card">')[0]
        gpus = sorted({g["index"] for x in data["samples"] for g in x.get("gpus") or []})
        # CPU, memory, one per GPU, the busiest NIC (IB: none in these sessions)
        assert card.count('<svg class="spark"') == 2 + len(gpus) + 1
        assert all(f"GPU{i} util" in card for i in gpus)
        assert (card.count("no GPU") == 1) == (not gpus)
        assert ("memory max" in card) == bool(gpus)  # the GPUs' peaks beside utilisation
        assert " rx+tx" in card and len(data["samples"]) > 1


def test_no_failure_but_a_warning_is_said_so() -> None:
    report = load("session_healthy")
    env = next(s for s in report["steps"] if s["id"] == "env")
    env["status"] = "warn"
    report["verdict"] = "warn"
    md = render_markdown(report)
    assert "# ddptui check: " in md and "WARN" in md.splitlines()[0]
    assert "**No step failed**, but:" in md and "- ⚠️ warn: `env` Launch environment audit" in md
    doc = render_html(report)
    assert 'class="banner warn"' in doc and "No step failed, but:" in doc


def test_env_differences_show_unset_and_the_odd_node() -> None:
    report = load("session_port_env")
    md = render_markdown(report)
    rows = md_table(md, "## Launch environment differences")
    assert rows[0] == ["variable", "node0", "node1", "node2"]
    ib = next(r for r in rows if "NCCL_IB_DISABLE" in r[0])
    assert ib[1:] == ["*(unset)*", "*(unset)*", "**⚠ `1`**"]
    dom = Dom(render_html(report))
    env = next(t for t in dom.tables if t["rows"][0][0]["text"] == "variable")
    ib_row = next(r for r in env["rows"] if "NCCL_IB_DISABLE" in r[0]["text"])
    assert [c["text"] for c in ib_row[1:3]] == ["(unset)", "(unset)"]
    assert "odd" in ib_row[3]["class"].split()


def test_older_reports_derive_env_and_skew_from_the_steps() -> None:
    """healthy.json/port_blocked.json predate `tables`: the step data stands in."""
    report = load("port_blocked")
    assert "tables" not in report
    inv = next(s for s in report["steps"] if s["id"] == "inventory")
    inv["data"]["skew"]["torch"]["node1"] = "2.12.0+cpu"
    env = next(s for s in report["steps"] if s["id"] == "env")
    env["data"]["diff"] = {"NCCL_SOCKET_IFNAME": {"node0": "eth0", "node1": None, "node2": "eth0"}}
    md = render_markdown(report)
    torch = next(r for r in md_table(md, "## Inventory skew") if r[0] == "`torch`")
    assert torch[1:] == ["2.13.0+cpu", "**⚠ 2.12.0+cpu**", "2.13.0+cpu"]
    ifname = md_table(md, "## Launch environment differences")[1]
    assert ifname == ["`NCCL_SOCKET_IFNAME`", "`eth0`", "**⚠ *(unset)***", "`eth0`"]
    doc = render_html(report)
    assert "(unset)" in doc
    assert "## Live metrics" not in md and "## Logs" not in md  # no such data: no section


def test_skew_marks_the_odd_node_out() -> None:
    report = load("session_port_env")
    skew = report["tables"]["skew"]
    torch = next(r for r in skew if r["fact"] == "torch")
    torch["values"]["node1"] = "2.12.0+cu121"
    torch["odd"] = ["node1"]
    driver = next(r for r in skew if r["fact"] == "driver")
    md = render_markdown(report)
    assert "⚠️ node1 differs on `torch`" in md
    rows = md_table(md, "## Inventory skew")
    assert rows[0] == ["fact", "node0", "node1", "node2"]
    by_fact = {r[0].strip("`"): r[1:] for r in rows[1:]}
    assert by_fact["torch"] == ["2.13.0+cpu", "**⚠ 2.12.0+cu121**", "2.13.0+cpu"]
    assert by_fact["driver"] == ["\u2013"] * 3  # null shows as an en dash
    assert driver["odd"] == []
    dom = Dom(render_html(report))
    table = next(t for t in dom.tables if t["rows"][0][0]["text"] == "fact")
    row = next(r for r in table["rows"] if r[0]["text"] == "torch")
    assert ["odd" in c["class"].split() for c in row[1:]] == [False, True, False]
    assert "2.12.0+cu121" in row[2]["text"]


def test_one_rank_busbw_reads_na_never_a_number_or_blank() -> None:
    """Two real H100 one-rank reports: one written before busbw_note, which recorded
    busbw = algbw (550.740) with world size 1, and one written since (busbw null, the
    note, the sweep per size). busbw is undefined with one rank: both read n/a."""
    old, new = load("ddptui/check-1node-nccl"), load("gpu-bw/check-1node-nccl")
    assert old["tables"]["allreduce"]["ranks"][0]["busbw_gbps"] == 550.7399
    assert new["tables"]["allreduce"]["ranks"][0]["busbw_gbps"] is None
    for report, algbw in ((old, "550.740"), (new, "1505.946")):
        md = render_markdown(report)
        rank = md_table(md, "## Allreduce bandwidth")
        assert rank[0][2] == "busbw GB/s" and rank[1][2:4] == ["n/a (one rank)", algbw]
        assert "busbw n/a (one rank): no data cross a bus" in md and "over 1 rank" not in md
        dom = Dom(render_html(report))
        table = next(t for t in dom.tables if t["rows"][0][0]["text"] == "rank")
        assert table["rows"][1][2]["text"] == "n/a (one rank)"
        assert table["rows"][1][3]["text"] == algbw
    sweep = md_table(render_markdown(new), "Sweep")
    assert [r[0] for r in sweep[1:]] == ["1 MiB", "4 MiB", "16 MiB", "64 MiB", "256 MiB", "1 GiB"]
    assert sweep[-1] == ["1 GiB", "713.0", "1505.949", "n/a (one rank)"]
    assert all(r[3] == "n/a (one rank)" for r in sweep[1:])
    dom = Dom(render_html(new))
    sizes = next(t for t in dom.tables if t["rows"][0][0]["text"] == "size")
    assert [r[3]["text"] for r in sizes["rows"][1:]] == ["n/a (one rank)"] * 6


def test_gpu_metrics_show_each_gpu_and_its_peaks() -> None:
    """The H100 session's samples: one GPU at 100 % with 20-21.5 GiB used, 57-64 °C,
    683-698 W, clocks held by SwPowerCap; NCCL's traffic on one host goes over lo."""
    report = load("ddptui/check-1node-nccl")
    md = render_markdown(report)
    row = md_table(md, "## Live metrics")[1]
    assert row[0] == "gpu0"
    assert row[2].startswith("1 GPU `") and " util, memory max 21.5 GiB of 79.6 GiB" in row[2]
    assert "max 64 °C, max 698 W, clocks held back by SwPowerCap" in row[2]
    assert row[3].startswith("lo `") and "max 21.7 kB/s" in row[3]
    doc = render_html(report)
    card = doc.split('<div class="card"><h3>gpu0 ', 1)[1].split("</div></div>")[0]
    assert "GPU0 util" in card and "max 100%" in card
    assert "1\u00d7 NVIDIA H100 80GB HBM3: memory max 21.5 GiB of 79.6 GiB" in card
    assert "lo rx+tx" in card and "eth0" not in card  # an idle eth0 is not the busiest
    idle = render_markdown(load("gpu-bw/check-1node-nccl"))  # NVML said GpuIdle: no limit
    assert "max 41 °C, max 128 W |" in idle and "GpuIdle" not in idle


def test_excerpts_mark_the_line_the_finding_cites() -> None:
    """Rebuilt from the real two-nodes-on-one-GPU logs: ENV-DUPGPU's excerpt is around
    `Duplicate GPU detected` (its first evidence line), not around a consequence line
    it also quotes, and both reports mark that line."""
    from ddptui.diagnosis.logstore import LogStore
    from ddptui.report.json_report import log_excerpts

    report = load("ddptui/check-2nodes-1gpu")
    store = LogStore()
    for node, log in report["logs"].items():
        for line in log["tail"]:
            rank = re.match(r"\[r(\d+)\] ", line)
            text = line[rank.end() :] if rank else line
            store.append(node, text, rank=int(rank.group(1)) if rank else None)
    report["logs"] = log_excerpts(report["steps"], store)
    dup = next(e for e in report["logs"]["gpuA"]["excerpts"] if e["finding"] == "ENV-DUPGPU")
    (at,) = dup["marked"]
    assert "NCCL WARN Duplicate GPU detected : rank 0 and rank 1" in dup["lines"][at]
    _, blocks = md_blocks(render_markdown(report))
    cited = [t for b in blocks for t in b if t.startswith("▶ ")]
    assert any("Duplicate GPU detected : rank 0 and rank 1" in t for t in cited)
    assert any("Duplicate GPU detected : rank 1 and rank 0" in t for t in cited)  # gpuB
    doc = render_html(report)
    marked = re.findall(r"<mark>(.*?)</mark>", doc)
    assert any("Duplicate GPU detected : rank 0 and rank 1" in m for m in marked)
    assert len(marked) == sum(len(e["marked"]) for log in report["logs"].values()
                              for e in log["excerpts"])  # fmt: skip


def test_allreduce_table_rows_and_stragglers() -> None:
    report = load("session_port_env")
    ar = report["tables"]["allreduce"]
    mib4 = 4 << 20
    ar["ranks"] = [
        {"rank": 0, "node": "node0", "bytes": mib4, "busbw_gbps": 0.05, "algbw_gbps": 0.04,
         "straggler": True, "slowest": False},
        {"rank": 1, "node": "node1", "bytes": mib4, "busbw_gbps": 0.25, "algbw_gbps": 0.19,
         "link_gbps": 10.0, "straggler": False, "slowest": False},
        {"rank": 2, "node": "node2", "bytes": mib4, "busbw_gbps": 0.24, "algbw_gbps": 0.18,
         "link_gbps": 10.0, "straggler": False, "slowest": True},
    ]  # fmt: skip
    md = render_markdown(report)
    rows = md_table(md, "## Allreduce bandwidth")
    assert rows[0][:4] == ["rank", "node", "busbw GB/s", "algbw GB/s"]
    assert [r[1] for r in rows[1:]] == ["node0", "node1", "node2"]
    assert rows[1][2] == "**0.050**" and "straggler" in rows[1][5]
    assert rows[1][4] == "\u2013"  # no link speed known
    assert rows[2][4] == "20% of 10 Gb/s"  # 0.25 GB/s = 2 Gb/s
    assert rows[3][5] == "slowest"
    assert "min 0.050, median 0.240, max 0.250 GB/s" in md
    dom = Dom(render_html(report))
    table = next(t for t in dom.tables if t["rows"][0][0]["text"] == "rank")
    assert len(table["rows"]) == 1 + len(ar["ranks"])
    assert "straggler" in table["rows"][1][5]["text"]
    hang = render_markdown(load("session_allreduce_hang"))
    assert "**timed out**" in hang and "No rank reported a bandwidth." in hang
    report["tables"]["allreduce"] = None
    assert "## Allreduce" not in render_markdown(report)
    assert 'id="allreduce"' not in render_html(report)


def hostile_report() -> dict[str, Any]:
    report = load("session_allreduce_hang")
    step = next(s for s in report["steps"] if s["id"] == "allreduce")
    step["nodes"]["node1"]["summary"] = HOSTILE
    finding = step["findings"][0]
    finding["summary"] = HOSTILE
    finding["cause"] = HOSTILE
    finding["evidence"] = [HOSTILE, "```", "````", "</details>", "</pre><script>x()</script>"]
    report["tables"]["env_diff"] = [
        {"name": "NCCL_X|Y", "values": {"node0": HOSTILE, "node1": None, "node2": "1"}}
    ]
    report["tables"]["skew"][0]["values"]["node2"] = HOSTILE
    report["tables"]["skew"][0]["odd"] = ["node2"]
    report["logs"]["node1"]["excerpts"] = [
        {
            "finding": "AR-HANG",
            "step": "allreduce",
            "first_line": 3,
            "lines": ["```", HOSTILE, "</details>"],
            "marked": [1, "x", 99],
        }
    ]
    report["logs"]["node1"]["tail"].append(HOSTILE)
    report["cluster"] = "</title><script>x()</script>"
    return report


def test_hostile_node_output_cannot_break_the_markdown() -> None:
    report = hostile_report()
    md = render_markdown(report)
    steps = md_table(md, "## Steps")
    assert len(steps) == 1 + len(report["steps"])
    assert all(len(row) == 3 + len(report["nodes"]) for row in steps)
    env = md_table(md, "## Launch environment differences")
    assert len(env) == 2 and all(len(row) == 4 for row in env)
    outside, blocks = md_blocks(md)
    # What GitHub would read as HTML: outside fenced blocks and code spans, not escaped.
    markup = [re.sub(r"(`+).*?\1", "", line) for line in outside]
    opens = sum(len(re.findall(r"(?<!\\)<details", line)) for line in markup)
    assert opens == sum(len(re.findall(r"(?<!\\)</details>", line)) for line in markup)
    assert opens == 1 + 3 * 2  # the evidence; each failed node's log and its tail
    assert not any(re.search(r"(?<!\\)<script", line) for line in markup)
    # the hostile lines survive intact inside code blocks, the cited one marked
    assert any(f"▶ {HOSTILE}" in b and "  ```" in b and "  </details>" in b for b in blocks)


def test_hostile_node_output_cannot_break_the_html() -> None:
    report = hostile_report()
    doc = render_html(report)
    assert_self_contained(doc)
    dom = Dom(doc)
    assert not any(t == "script" for t, _ in dom.starts)
    assert dom.count("details") == dom.ends.count("details")
    assert dom.count("pre") == dom.ends.count("pre")
    text = "".join(dom.text)
    assert "<script>alert(1)</script>" in text  # shown, as text
    assert f"<mark>{escape(HOSTILE)}</mark>" in doc and dom.count("mark") == 1
    steps = dom.table("steps")
    assert len(steps) == 1 + len(report["steps"])
    assert all(len(r) == 3 + len(report["nodes"]) for r in steps)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def tool(*names: str) -> str:
    """The path of an apt-installed tool; in CI its absence fails the test."""
    found = next((p for p in map(shutil.which, names) if p), None)
    if found:
        return found
    if in_ci():
        pytest.fail(f"CI is set but {names[0]} is missing (scripts/setup --test)", pytrace=False)
    pytest.skip(f"{names[0]} not installed (scripts/setup --test installs it)")


@pytest.mark.parametrize("name", [*FIXTURES, "hostile"])
def test_markdown_as_github_renders_it(name: str) -> None:
    """cmark-gfm is GitHub's Markdown parser. Raw HTML is let through (--unsafe, no
    tagfilter), so only our escaping keeps node output from becoming markup."""
    cmark = tool("cmark-gfm")
    report = hostile_report() if name == "hostile" else load(name)
    out = subprocess.run(
        [cmark, "--unsafe", "-e", "table", "-e", "autolink", "-e", "strikethrough"],
        input=render_markdown(report),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    dom = Dom(out)
    assert not any(t == "script" for t, _ in dom.starts)
    assert dom.count("details") == dom.ends.count("details")
    steps = dom.tables[0]["rows"]
    assert [c["text"].strip() for c in steps[0][3:]] == node_names(report)
    assert [r[0]["text"].strip() for r in steps[1:]] == [s["id"] for s in report["steps"]]
    assert all(len(r) == 3 + len(report["nodes"]) for r in steps)
    first = report["first_failure"]
    if first:
        for command in fix_commands(first["fix"]):
            assert f'<pre><code class="language-sh">{escape(command, quote=False)}' in out
    if name == "hostile":
        assert "<script>alert(1)</script>" in "".join(dom.text)


# --------------------------------------------------------------------------- the screenshot


def textual_screenshot() -> str:
    """A real SVG from Textual's App.export_screenshot() (what `e` in the TUI embeds)."""
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    class Shot(App[None]):
        def compose(self) -> ComposeResult:
            yield Static("ddptui · port ✘ node1 · <b>not markup</b>")

    async def take() -> str:
        app = Shot()
        async with app.run_test(size=(80, 12)):
            return app.export_screenshot(title="ddptui")

    return asyncio.run(take())


def test_screenshot_is_embedded_without_outside_references() -> None:
    svg = textual_screenshot()
    assert re.search(r"url\(\"?https://", svg), "Textual's SVG names web fonts (what we strip)"
    doc = render_html(load("session_port_env"), screenshot_svg='<?xml version="1.0"?>\n' + svg)
    assert_self_contained(doc)
    assert "<?xml" not in doc
    assert 'id="screen"' in doc and "Screen at export time" in doc
    shot = doc.split('<figure class="shot">', 1)[1].split("</figure>", 1)[0]
    assert shot.startswith("<svg") and shot.endswith("</svg>")
    assert 'local("FiraCode-Regular")' in shot  # the local font stays
    parse_svg(shot)  # still well-formed XML
    assert "markup" in shot
    assert "Screen at export time" not in render_html(load("session_port_env"))


def test_clean_screenshot_drops_scripts_and_outside_urls() -> None:
    svg = (
        '<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE svg><svg xmlns="http://www.w3.org/2000/svg"'
        ' onload="x()"><!-- https://x --><style>@import url(https://x/y.css);'
        '@font-face{font-family:F;src:url("https://x/f.woff2") format("woff2")}'
        ".a{fill:url(#g);background:url('//x/i.png')}</style>"
        '<script>alert(1)</script><a href="https://x"><text clip-path="url(#c)">onload=hi</text></a>'
        '<image xlink:href="http://x/i.png"/></svg>'
    )
    out = clean_screenshot(svg)
    assert_self_contained(out)
    assert "onload=hi" in out and 'clip-path="url(#c)"' in out and "url(#g)" in out
    assert "onload=" not in out.replace("onload=hi", "")
    assert "<!--" not in out and "<?xml" not in out and "<!DOCTYPE" not in out
    parse_svg(out)
    assert clean_screenshot("not an svg") == ""


# --------------------------------------------------------------------------- sparklines


def test_sparkline_is_valid_svg_with_gaps_and_scale() -> None:
    svg = sparkline([0, 50, 100, None, 20, 40], width=100, height=20, ceiling=100, label="CPU <%>")
    root = parse_svg(svg)
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{ns}polyline")
    assert len(lines) == 2, "a None splits the line"
    first = [tuple(map(float, p.split(","))) for p in lines[0].get("points", "").split()]
    assert len(first) == 3
    assert first[0][1] == pytest.approx(18.0) and first[2][1] == pytest.approx(2.0)
    assert root.find(f"{ns}title") is not None and root.findtext(f"{ns}title") == "CPU <%>"
    assert root.get("width") == "100"
    empty = parse_svg(sparkline([None, None]))
    assert empty.find(f"{ns}polyline") is None and "no data" in "".join(empty.itertext())
    lone = parse_svg(sparkline([5.0]))
    assert len(lone.findall(f"{ns}polyline")) == 1
    assert "<script>" not in sparkline([1, 2], colour='"><script>')


def test_sparkline_helpers() -> None:
    assert downsample([1, 9, 2, 3, 8, 1], 3) == [9, 3, 8]
    assert downsample([1, float("nan"), True], 10) == [1.0, None, None]
    assert human_rate(999) == "999 B/s" and human_rate(71_800_000) == "71.8 MB/s"
    assert human_rate(None) == "n/a"
    assert text_sparkline([0, 50, 100], ceiling=100) == "▁▅█"
    assert text_sparkline([None, None]) == ""
    s = series(
        [
            {
                "cpu_pct": 10,
                "mem_used": 1,
                "mem_total": 4,
                "gpus": [],
                "nics": {"lo": {"rx_Bps": 9e9, "tx_Bps": 0}},
            },
            {
                "cpu_pct": 20,
                "gpus": [{"index": 0, "util_pct": 90}],
                "nics": {"eth0": {"rx_Bps": 5, "tx_Bps": 5}, "lo": {"rx_Bps": 1, "tx_Bps": 1}},
            },
        ]
    )
    assert s["cpu"] == [10.0, 20.0] and s["mem"] == [25.0, None]
    assert s["gpus"] == {"0": [None, 90.0]}
    assert s["nic"] == ("eth0", [None, 10.0])  # loopback only when nothing else
    assert s["ib"] is None


# --------------------------------------------------------------------------- wide clusters


def wide_report(n: int = 32, samples: int = 600) -> dict[str, Any]:
    """session_port_env stretched to n nodes with 8 GPUs each and full metrics."""
    base = load("session_port_env")
    names = [f"gpu-node-{i:03d}" for i in range(n)]
    report = copy.deepcopy(base)
    report["nodes"] = [
        {"name": m, "host": f"10.0.{i // 250}.{i % 250 + 1}", "rank": i}
        for i, m in enumerate(names)
    ]
    for step in report["steps"]:
        proto = step["nodes"]["node1"]
        step["nodes"] = {m: copy.deepcopy(proto) for m in names}
    report["tables"]["skew"] = [
        {"fact": r["fact"], "values": dict.fromkeys(names, r["values"]["node0"]), "odd": []}
        for r in base["tables"]["skew"]
    ]
    report["tables"]["skew"][0]["values"][names[7]] = "2.12.0"
    report["tables"]["skew"][0]["odd"] = [names[7]]
    report["tables"]["env_diff"] = [
        {"name": "NCCL_IB_HCA", "values": {m: "mlx5_0" if i else None for i, m in enumerate(names)}}
    ]
    report["tables"]["allreduce"]["ranks"] = [
        {
            "rank": r,
            "node": names[r // 8],
            "bytes": 1 << 22,
            "busbw_gbps": 40.0 + r % 7,
            "algbw_gbps": 30.0,
            "link_gbps": 400.0,
            "straggler": r == 77,
            "slowest": r == 77,
        }
        for r in range(n * 8)
    ]
    gpu = {"util_pct": 97.0, "mem_used": 70e9, "mem_total": 80e9}
    report["metrics"]["nodes"] = {
        m: {
            "hello": {},
            "samples": [
                {
                    "t": 1000.0 + t,
                    "cpu_pct": float(t % 100),
                    "mem_used": 1e9,
                    "mem_total": 2e9,
                    "gpus": [dict(gpu, index=g) for g in range(8)],
                    "nics": {
                        "eth0": {"rx_Bps": 1e6 * t, "tx_Bps": 1e6},
                        "lo": {"rx_Bps": 0, "tx_Bps": 0},
                    },
                    "ib": {"mlx5_0/1": {"rx_Bps": 2e10, "tx_Bps": 2e10}},
                }
                for t in range(samples)
            ],
        }
        for m in names
    }
    report["logs"] = {
        m: {"lines_total": 500, "tail": [f"line {j}" for j in range(60)], "excerpts": []}
        for m in names
    }
    return report


def test_wide_cluster_renders_fast_and_stays_usable() -> None:
    report = wide_report()
    allreduce = next(s for s in report["steps"] if s["id"] == "allreduce")
    for result in allreduce["nodes"].values():  # every node's log is worth showing
        result["status"] = "fail"
    t0 = time.process_time()  # CPU time: other test runs on the machine do not count
    md = render_markdown(report)
    doc = render_html(report)
    elapsed = time.process_time() - t0
    assert elapsed < 1.0, f"32 nodes x 600 samples x 8 GPUs took {elapsed:.2f} s for both"
    steps = md_table(md, "## Steps")
    assert steps[0][3:] == [f"{i:03d}" for i in range(32)]
    assert "columns are node names without `gpu-node-`" in md
    assert all(cell in ("✅", "❌") for row in steps[1:] for cell in row[3:]), "glyph-only cells"
    assert md.count("nodes not passing</summary>") == len(report["steps"])  # summaries in details
    skew = md_table(md, "## Inventory skew")
    assert skew[0] == ["fact", "most nodes", "differs"]
    assert skew[1] == ["`torch`", "2.13.0+cpu", "**⚠ gpu-node-007**: 2.12.0"]
    env = md_table(md, "## Launch environment differences")
    assert env[1] == ["`NCCL_IB_HCA`", "`mlx5_0`", "**⚠ gpu-node-000**: *(unset)*"]
    assert "<details><summary>All 256 ranks</summary>" in md
    assert md.count("lines</summary>") == 2 * 8, "eight nodes' logs (and tails), not 32"
    assert "Not shown here (see the HTML or JSON report): gpu-node-008 (500 lines)" in md
    assert len(md) < 60_000, "fits a GitHub issue body (65536 characters)"
    assert_self_contained(doc)
    dom = Dom(doc)
    assert dom.count("svg", "spark") == 32 * (2 + 8 + 2)  # cpu, mem, 8 GPUs, NIC, IB
    assert '<span class="v">no GPU</span>' not in doc


# --------------------------------------------------------------------------- headless Chromium


def png_pixels(data: bytes, max_rows: int) -> tuple[int, int, list[bytes]]:
    """Width, height and the first RGB rows of an 8-bit PNG, decoded with zlib (stdlib)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, [], b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        header = body if kind == b"IHDR" else header
        if kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    width, height, depth, ctype = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and ctype in (2, 6)
    bpp = 3 if ctype == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(b"".join(idat))
    prev = bytearray(stride)
    rows = []
    for y in range(min(height, max_rows)):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if kind == 2:  # "up", the common filter: one pass in C
            line = bytearray((x + b) & 255 for x, b in zip(line, prev, strict=True))
            kind = 0
        for i in range(stride) if kind else ():
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            else:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(
            bytes(line[i] for i in range(stride) if i % bpp < 3) if bpp == 4 else bytes(line)
        )
        prev = line
    return width, height, rows


def has_colour(rows: list[bytes], rgb: tuple[int, int, int], tol: int = 6) -> bool:
    for row in rows:
        for i in range(0, len(row), 3):
            if all(abs(row[i + k] - rgb[k]) <= tol for k in range(3)):
                return True
    return False


@pytest.mark.parametrize(
    ("name", "banner"),
    [
        ("session_port_env", (0xFF, 0xEB, 0xE9)),
        ("session_allreduce_hang", (0xFF, 0xEB, 0xE9)),
        ("session_healthy", (0xDA, 0xFB, 0xE1)),
        ("gpu-bw/check-1node-nccl", (0xDA, 0xFB, 0xE1)),
        ("ddptui/check-2nodes-1gpu", (0xFF, 0xEB, 0xE9)),
    ],
)
def test_html_in_headless_chromium(name: str, banner: tuple[int, int, int], tmp_path: Path) -> None:
    """Chromium draws the report: the picture is not blank, the banner has its colour,
    and it prints to a PDF. Look at the PNGs with DDPTUI_KEEP_SHOTS=dir."""
    browser = tool("chromium", "chromium-browser", "google-chrome")
    shot = textual_screenshot() if name == "session_port_env" else None
    stem = name.replace("/", "-")
    page = tmp_path / f"{stem}.html"
    page.write_text(render_html(load(name), screenshot_svg=shot), encoding="utf-8")
    png, pdf = tmp_path / f"{stem}.png", tmp_path / f"{stem}.pdf"
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    subprocess.run(
        [browser, *flags, f"--screenshot={png}", "--window-size=1200,1600", page.as_uri()],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert png.exists(), "chromium wrote no screenshot"
    width, height, rows = png_pixels(png.read_bytes(), max_rows=500)
    assert (width, height) == (1200, 1600)
    top = rows
    dark = sum(1 for row in top for i in range(0, len(row), 3) if sum(row[i : i + 3]) < 200)
    assert dark > 2000, "text is drawn"
    assert has_colour(top, banner), "the banner is drawn in its status colour"
    if name == "session_port_env":
        subprocess.run(
            [browser, *flags, "--no-pdf-header-footer", f"--print-to-pdf={pdf}", page.as_uri()],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert pdf.read_bytes()[:5] == b"%PDF-"
        assert len(re.findall(rb"/Type\s*/Page\b", pdf.read_bytes())) >= 2
    keep = os.environ.get("DDPTUI_KEEP_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for f in (png, pdf, page):
            if f.exists():
                shutil.copy(f, Path(keep) / f.name)
