"""probes/ ships inside the wheel and is found the same way from a wheel and from a checkout."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIND = (
    "from ddptui.probeset import probes_dir, probe_source, bootstrap_source;"
    "print(probes_dir()); print(len(probe_source('inventory')), len(bootstrap_source()))"
)


def test_editable_checkout_uses_repo_probes() -> None:
    out = subprocess.run([sys.executable, "-c", FIND], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[0] == str(ROOT / "probes")


def test_wheel_ships_probes_and_finds_them(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("ddptui-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    repo_probes = sorted(p.name for p in (ROOT / "probes").glob("*.py"))
    assert sorted(n.split("/")[-1] for n in names if n.startswith("ddptui/_probes/")) == repo_probes
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {FIND}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    found, sizes = out.stdout.splitlines()
    assert found == str(site / "ddptui" / "_probes")
    here = subprocess.run([sys.executable, "-c", FIND], capture_output=True, text=True, check=True)
    assert sizes == here.stdout.splitlines()[1]  # the very same probe code
