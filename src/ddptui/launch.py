"""The `ddptui` command. `ddptui [CONFIG]` in a terminal opens the TUI without loading the
command-line machinery or the config validator first: the first frame comes before
click, pydantic and the YAML parser are imported. Everything else goes to ddptui.cli."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddptui.config import ClusterConfig
    from ddptui.glance import Glance

# The subcommands of ddptui.cli.main (a test keeps the two in step).
COMMANDS = frozenset(
    {"open", "check", "validate", "schema", "report", "replay", "job", "lint", "diagnose"}
)


def wants_tui(argv: list[str]) -> bool:
    """`ddptui` or `ddptui CONFIG`, in a terminal."""
    if len(argv) > 1 or (argv and (argv[0] in COMMANDS or argv[0].startswith("-"))):
        return False
    return sys.stdin.isatty() and sys.stdout.isatty()


ALT_SCREEN_ON, ALT_SCREEN_OFF = "\x1b[?1049h", "\x1b[?1049l"
PENDING = "\x1b[2m·\x1b[22m"  # a pending cell: a dim dot


def splash(source: str, columns: int, glance: Glance | None = None) -> str:
    """The first frame, in plain ANSI, drawn before Textual is even imported: the header
    and the checklist where the app will draw them, with the cluster's name and its node
    columns when a glance at cluster.yaml found them, on the alternate screen that
    Textual then takes over (entering it again changes nothing) and paints over whole."""
    from ddptui.stepmeta import ORDER
    from ddptui.ui.layout import STATUS_CHARS, STEP_CHARS, matrix_heads

    nodes = list(glance.nodes) if glance is not None else []
    heads = [("step", STEP_CHARS), ("status", STATUS_CHARS), *matrix_heads(nodes, columns)]
    if glance is None:
        title = f" ddptui · loading {source} …"
    else:
        title = f" ddptui {glance.name or source} · {len(nodes)} node(s) · loading …"

    def row(cells: list[tuple[str, int]]) -> str:  # a DataTable row: 1 space either side
        line = "".join(f" {text[:width]:<{width}} " for text, width in cells)
        return line[: max(1, columns)].rstrip()

    rows = [row([(step, STEP_CHARS)] + [("·", w) for _, w in heads[1:]]) for step in ORDER]
    dim = [line.replace("·", PENDING) for line in rows]  # step names hold no "·"
    body = "\r\n".join([title[: max(1, columns)], row(heads), *dim])
    return f"{ALT_SCREEN_ON}\x1b[?25l\x1b[H\x1b[2J{body}"


def open_tui(config: str | None) -> int:
    import shutil

    from ddptui.glance import glance_file, glance_text

    source = config or "<embedded demo>"
    if config is None:
        from ddptui.demo import DEMO_YAML

        glance = glance_text(DEMO_YAML)
    else:
        glance = glance_file(config)
    sys.stdout.write(splash(source, shutil.get_terminal_size().columns, glance))
    sys.stdout.flush()
    try:
        from ddptui.ui.app import DdptuiApp
    except BaseException:
        sys.stdout.write(f"\x1b[?25h{ALT_SCREEN_OFF}")  # give the terminal back as it was
        sys.stdout.flush()
        raise

    def load() -> ClusterConfig:  # after the first frame: pydantic and YAML load here
        from ddptui.demo import config_or_demo

        return config_or_demo(config)

    app = DdptuiApp(None, source, load=load, glance=glance)
    try:
        code = app.run()
    except Exception:  # noqa: BLE001 - last resort: a bug in ddptui is exit 3, not a traceback
        from ddptui.cli.common import internal_error

        return internal_error()
    if app.config_error is not None:
        from ddptui.cli.common import report_load_error

        return report_load_error(app.config_error)
    return code or 0


def main() -> None:
    argv = sys.argv[1:]
    if wants_tui(argv):
        sys.exit(open_tui(argv[0] if argv else None))
    from ddptui.cli import main as cli_main

    cli_main()
