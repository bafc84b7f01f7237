"""`ddptui lint FILE... [--json P]`: the static DDP audit of training scripts.

Exit codes (CONTRACT.md): 0 no error finding, 1 findings of severity error, 2 usage,
unreadable or unparsable input, 3 internal error."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import click

from ddptui.cli.common import EXIT_USAGE, fatal_config, last_resort
from ddptui.lint import LintFinding, LintResult, lint_paths

_COLOURS = {"error": "red", "warning": "yellow", "info": "cyan"}


def render_human(result: LintResult, *, colour: bool = False) -> str:
    """Compiler-style lines: `train.py:42: error DDP-SAMPLER: summary`, then why and fix."""
    out: list[str] = []
    for f in result.findings:
        out += _finding_lines(f, colour)
    for note in result.notes:
        out.append(f"ddptui lint: note: {note}")
    for problem in result.problems:
        out.append(
            click.style(f"ddptui lint: {problem}", fg="red", bold=True)
            if colour
            else f"ddptui lint: {problem}"
        )
    if result.root is not None:
        n = len(result.followed)
        out.append(
            f"project root {result.root} ({result.root_why}); "
            + (
                f"{n} imported module{'s' if n != 1 else ''} of it followed"
                if n
                else "no local import followed"
            )
        )
    out.append(_summary(result))
    return "\n".join(out) + "\n"


def _finding_lines(f: LintFinding, colour: bool) -> list[str]:
    sev = click.style(f.severity, fg=_COLOURS[f.severity], bold=True) if colour else f.severity
    head = f"{f.file}:{f.line}: {sev} {f.id}: {f.summary}"
    also = [f"    {p.label} {p.file}:{p.line}" for p in f.also]
    why = textwrap.fill(f.why, width=96, initial_indent="    why: ", subsequent_indent="         ")
    fix = textwrap.indent(f.fix.rstrip(), "        ")
    return [head, why, *also, "    fix:", fix, ""]  # why stays second: scripts read it there


def _summary(result: LintResult) -> str:
    counts = {
        s: sum(1 for f in result.findings if f.severity == s) for s in ("error", "warning", "info")
    }
    files = len(result.files) - len(result.problems)
    parts = [f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
    verdict = ", ".join(parts) or ("no DDP pitfall found" if files else "nothing to report")
    text = f"{files} file{'s' if files != 1 else ''} audited: {verdict}"
    if result.problems:
        text += f"; {len(result.problems)} could not be audited"
    return text


@click.command("lint")
@click.argument("files", nargs=-1, metavar="FILE...")
@click.option(
    "--config",
    "config",
    metavar="CONFIG",
    help="Also audit the `script:` that cluster.yaml CONFIG names.",
)
@click.option(
    "--json",
    "json_path",
    metavar="P",
    help="Write the findings as JSON to P ('-' = stdout; the text then goes to stderr).",
)
@click.option(
    "--root",
    "root",
    metavar="DIR",
    help="The project root whose modules the scripts' imports are followed into (default: "
    "the nearest folder above the script with .git, pyproject.toml or setup.py; else the "
    "current folder if the script is under it; else the folder above the script's "
    "package). Site-packages are never followed.",
)
@last_resort
def lint(
    files: tuple[str, ...], config: str | None, json_path: str | None, root: str | None
) -> None:
    """Audit training scripts for the classic DDP pitfalls (static: nothing is run).

    Each script's local imports (modules of the project, never site-packages) are
    followed: findings may point into them. Exit 0 when no finding is an error, 1 when
    one is, 2 when a given file cannot be read or is not Python. Silence one finding
    with `# ddptui: ignore[ID]` on its line.
    """
    paths = list(files)
    if config is not None:
        paths.append(_config_script(config))
    if not paths:
        raise click.UsageError("Missing argument 'FILE...' (or --config CONFIG with a script:)")
    if root is not None and not Path(root).is_dir():
        raise click.BadParameter(f"{root} is not a folder", param_hint="--root")
    result = lint_paths(paths, root=root)
    to_stderr = json_path == "-"
    colour = (sys.stderr if to_stderr else sys.stdout).isatty()
    click.echo(render_human(result, colour=colour), nl=False, err=to_stderr)
    if json_path:
        doc = json.dumps(result.to_dict(), indent=2) + "\n"
        if json_path == "-":
            sys.stdout.write(doc)
        else:
            try:
                Path(json_path).write_text(doc, encoding="utf-8")
            except OSError as exc:
                click.secho(
                    f"ddptui lint: cannot write {json_path}: {exc.strerror or exc}",
                    fg="red",
                    err=True,
                )
                sys.exit(EXIT_USAGE)
    sys.exit(result.exit_code)


def _config_script(config: str) -> str:
    from ddptui.config import ConfigError, load_config

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        fatal_config(exc)
    if cfg.script is None:
        raise click.UsageError(f"{config} has no `script:` key naming the training script")
    return cfg.script
