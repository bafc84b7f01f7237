"""`ddptui lint train.py` on a project: the entry's local imports are followed (never
site-packages), findings point into the files where they are, names travel through
conditional aliases, helpers' returns, `__init__` attributes and call sites; bad
projects (a module with a syntax error, circular imports, a notebook export, Python 2)
get a note or a clear error, never a traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddptui.cli import main
from ddptui.lint import lint_paths
from ddptui.lint.project import find_root

PROJECT = Path(__file__).parent / "fixtures" / "lint_project"
_EXPECT = re.compile(r"#.*\bexpect:\s*([A-Z0-9-]+(?:\s*,\s*[A-Z0-9-]+)*)")


def declared(root: Path) -> set[tuple[str, str, int]]:
    out: set[tuple[str, str, int]] = set()
    for path in sorted(root.rglob("*.py")):
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = _EXPECT.search(line)
            if m:
                rel = str(path.relative_to(root))
                out |= {(i.strip(), rel, no) for i in m.group(1).split(",")}
    return out


def test_findings_across_the_project_files_are_exactly_the_declared_ones() -> None:
    result = lint_paths([PROJECT / "train.py"], root=PROJECT)
    found = {
        (f.id, str(Path(f.file).resolve().relative_to(PROJECT)), f.line) for f in result.findings
    }
    assert found == declared(PROJECT)
    assert result.root == str(PROJECT.resolve()) and result.root_why == "--root"
    followed = sorted(str(Path(p).resolve().relative_to(PROJECT)) for p in result.followed)
    # `from utils.dist import ...` runs utils/__init__.py first: followed too
    assert followed == [
        "models/__init__.py",
        "models/net.py",
        "utils/__init__.py",
        "utils/dist.py",
        "utils/steps.py",
    ]
    # what lives in another file is said there, with its file and line
    (bn,) = [f for f in result.findings if f.id == "DDP-BATCHNORM"]
    assert "models/net.py:5" in bn.summary
    assert result.exit_code == 1 and result.notes == ()


def test_cli_root_flag_json_and_the_root_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        main, ["lint", str(PROJECT / "train.py"), "--root", str(PROJECT), "--json", "-"]
    )
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert {"files", "findings", "root", "followed"} <= set(doc)
    # the backward in the imported helper is named, with its file, by the finding at the
    # accumulation loop that calls it (where `no_sync` goes)
    (nosync,) = [f for f in doc["findings"] if f["id"] == "DDP-NO-SYNC"]
    assert nosync["file"].endswith("train.py") and nosync["line"] == 39
    assert "utils/steps.py:3" in nosync["summary"]
    assert f"project root {PROJECT.resolve()} (--root); 5 imported modules of it followed" in (
        res.stderr
    )
    bad = CliRunner().invoke(
        main, ["lint", str(PROJECT / "train.py"), "--root", str(tmp_path / "x")]
    )
    assert bad.exit_code == 2 and "--root" in bad.stderr


def test_root_is_found_by_marker_else_the_package_top(tmp_path: Path) -> None:
    pkg = tmp_path / "proj" / "pkg" / "bin"
    pkg.mkdir(parents=True)
    (tmp_path / "proj" / "pkg" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text("import torch\n")
    root, why = find_root(pkg / "train.py", cwd=tmp_path / "elsewhere")
    assert root == tmp_path / "proj" and "package" in why
    (tmp_path / "proj" / "pyproject.toml").write_text("")
    assert find_root(pkg / "train.py", cwd=tmp_path / "elsewhere") == (
        tmp_path / "proj",
        "nearest pyproject.toml",
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


_TRAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from helpers import build

dist.init_process_group("nccl")
model = DDP(build(), device_ids=[0])
"""


def test_a_module_with_a_syntax_error_and_circular_imports_give_notes_not_exit_2(
    tmp_path: Path,
) -> None:
    _write(
        tmp_path,
        {
            "train.py": _TRAIN,
            "helpers.py": "import torch\nfrom loop import other\n\n"
            "def build():\n    return torch.nn.Linear(2, 2).cuda()\n",
            "loop.py": "import helpers\nimport broken\n\ndef other():\n    return helpers.build()\n",
            "broken.py": "print 'python 2'\n",
        },
    )
    result = lint_paths([tmp_path / "train.py"], root=tmp_path)
    assert result.exit_code == 1  # the hard-coded device_ids=[0]; the broken module is a note
    assert [f.id for f in result.findings if f.severity != "info"] == ["DDP-HARDCODED-DEVICE"]
    (note,) = result.notes
    assert "broken.py:1" in note and "Python 2" in note and "not audited" in note
    assert len(result.followed) == 2  # helpers and loop, each once (they import each other)


def test_a_notebook_export_is_audited_and_python_2_entry_exits_2(tmp_path: Path) -> None:
    _write(tmp_path, {"nb.py": "# In[1]:\n!pip install torch\n%matplotlib inline\n" + _TRAIN})
    (tmp_path / "helpers.py").write_text(
        "import torch\ndef build():\n    return torch.nn.Linear(2, 2)\n"
    )
    result = lint_paths([tmp_path / "nb.py"], root=tmp_path)
    assert result.exit_code == 1 and "2 IPython line(s)" in result.notes[0]
    (tmp_path / "old.py").write_text("import torch\nprint 'hello'\n")
    res = CliRunner().invoke(main, ["lint", str(tmp_path / "old.py")])
    assert res.exit_code == 2 and "Python 2 code?" in res.stdout and "Traceback" not in res.stdout


def test_site_packages_and_folders_outside_the_root_are_never_followed(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "proj/train.py": _TRAIN.replace(
                "from helpers import build", "from vendor import build"
            ),
            "proj/.venv/lib/site-packages/vendor.py": "def build():\n    return 1\n",
            "vendor.py": "def build():\n    return 2\n",  # above the root
        },
    )
    result = lint_paths([tmp_path / "proj" / "train.py"], root=tmp_path / "proj")
    assert result.followed == ()


def test_a_project_too_large_to_follow_is_capped_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ddptui.lint.project.MAX_MODULES", 3)
    for i in range(6):
        nxt = f"import m{i + 1}\n" if i < 5 else ""
        (tmp_path / f"m{i}.py").write_text(nxt + "x = 1\n")
    (tmp_path / "train.py").write_text("import m0\n")
    result = lint_paths([tmp_path / "train.py"], root=tmp_path)
    assert len(result.followed) == 3
    assert any("more than 3 project modules" in n for n in result.notes)
    assert result.exit_code == 0
