"""`ddptui [CONFIG]` in a terminal: the plain first frame, then the app; the terminal is
given back as it was, errors included (driven in a real tmux pane)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddptui.config import load_config
from ddptui.demo import DEMO_YAML, demo_config
from ddptui.glance import Glance, glance_file, glance_text
from ddptui.launch import ALT_SCREEN_ON, splash
from ddptui.stepmeta import ORDER

ROOT = Path(__file__).resolve().parents[1]


def test_splash_draws_the_checklist_on_the_alternate_screen() -> None:
    out = splash("cluster.yaml", 100)
    assert out.startswith(ALT_SCREEN_ON)
    assert "ddptui · loading cluster.yaml" in out
    for step in ORDER:
        assert f" {step:<10} " in out
    narrow = splash("a-very-long-path/" * 10 + "cluster.yaml", 30)
    assert all(len(line) <= 30 for line in narrow.split("\x1b[2J", 1)[1].split("\r\n")[:2])


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")))
def test_glance_sees_the_names_the_real_parser_sees(path: Path) -> None:
    cfg = load_config(str(path))
    assert glance_file(str(path)) == Glance(cfg.name, tuple(n.display for n in cfg.nodes))
    demo = demo_config()
    assert glance_text(DEMO_YAML) == Glance(demo.name, tuple(n.display for n in demo.nodes))


@pytest.mark.parametrize(
    "text",
    [
        "nodes: [{host: a}]\n",  # flow style: left to the real parser
        "nodes:\n  - a\n",  # an item that is not a mapping
        "nodes:\n  - {host: a}\n",
        "nodes:\n  - host: a\n - host: b\n",  # indentation that goes back
        "nodes:\n  - user: u\n",  # a node without host or name
        "nodes:\n  - host: *alias\n",
        "[1, 2]\n",
    ],
)
def test_glance_gives_up_on_what_it_does_not_read(text: str) -> None:
    assert glance_text(text) is None


def test_glance_reads_block_style_names_and_hosts() -> None:
    text = (
        "# c\nname: 'x y'  # the cluster\nmaster: {addr: h}\nnodes:\n- host: a\n  name: b\n"
        "  env:\n    name: not-a-node\n  ssh:\n    - host: nested\n- name: c\n  host: d\n"
        "-   host: e\nscript: t.py\n"
    )
    assert glance_text(text) == Glance("x y", ("b", "c", "e"))
    assert glance_file("/nonexistent/cluster.yaml") is None


def test_splash_draws_the_node_columns_a_glance_found() -> None:
    out = splash("c.yaml", 160, Glance("local-demo", ("node0", "node1")))
    lines = out.split("\x1b[2J", 1)[1].split("\r\n")
    assert lines[0].startswith(" ddptui local-demo · 2 node(s) · loading")
    assert lines[1].split() == ["step", "status", "node0", "node1"]
    assert all(line.count("·") == 3 for line in lines[2:])  # status and two nodes
    many = splash("c.yaml", 160, Glance("big", tuple(f"n{i}" for i in range(64))))
    head = many.split("\x1b[2J", 1)[1].split("\r\n")[1]
    assert head.split()[2] == "n0" and head.rstrip().endswith("more")  # the rest collapsed
    assert len(head) <= 160


@pytest.mark.skipif(
    shutil.which("tmux") is None and not os.environ.get("CI"),  # under CI: fail, not skip
    reason="needs tmux (scripts/setup --test)",
)
def test_terminal_is_given_back_with_the_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("master: {addr: 10.0.0.1, port: 29500}\nnodes:\n  - host: a\n    bogus: 1\n")
    sock = f"ddptui-test-{time.monotonic_ns()}"
    ddptui = Path(sys.executable).with_name("ddptui")
    cmd = f"echo before; {ddptui} {bad}; echo after rc=$?; sleep 30"
    tmux = ["tmux", "-L", sock]
    subprocess.run([*tmux, "new", "-d", "-s", "t", "-x", "120", "-y", "30", cmd], check=True)
    try:
        deadline = time.monotonic() + 30
        screen = ""
        while "after rc=" not in screen and time.monotonic() < deadline:
            time.sleep(0.1)
            screen = subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", "t"], capture_output=True, text=True
            ).stdout
        lines = [x for x in screen.splitlines() if x.strip()]
        assert lines[0] == "before"  # the main screen is back, with what was on it
        assert "ddptui: invalid config" in screen
        assert f"{bad}:4:5: nodes[0].bogus: unknown key" in screen
        assert "after rc=2" in screen
        assert "loading" not in screen  # no trace of the first frame on the main screen
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
