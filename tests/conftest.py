"""Shared pytest wiring: the multi-node testbed fixtures (see tests/testbed.py)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# testbed.py sits next to this file; make `from testbed import ...` work whatever
# pytest's import mode (importlib mode does not put tests/ on sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from testbed import Testbed, start_testbed, unavailable_reason

TESTBED_FIXTURES = frozenset({"make_testbed", "testbed", "shared_testbed"})

MakeTestbed = Callable[..., Testbed]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def pytest_configure(config: pytest.Config) -> None:
    # Sessions autosave under $XDG_STATE_HOME: keep the suite's out of the user's home
    # (subprocesses inherit it; tests find the autosaves there).
    if not os.environ.get("DDPTUI_TEST_KEEP_STATE"):
        os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="ddptui-test-state-")
    config.addinivalue_line(
        "markers", "testbed: needs the network-namespace testbed (root, iproute2, sshd)"
    )
    config.addinivalue_line(
        "markers", "scale: a 64-node testbed (about a minute; runs in CI, never skipped there)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses a testbed fixture, then decide once for the session:
    run them, skip them (no root/tools on a dev box), or stop the run (in CI a missing
    testbed is a broken runner, and silently skipping would hide every cluster test)."""
    needing = []
    for item in items:
        if TESTBED_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.testbed)
        if item.get_closest_marker("testbed") is not None:
            needing.append(item)
    reason = unavailable_reason()
    if not needing or reason is None:
        return
    if _in_ci():
        pytest.exit(
            f"CI is set but the testbed cannot run: {reason}. "
            f"{len(needing)} testbed tests would be skipped; refusing.",
            returncode=3,
        )
    skip = pytest.mark.skip(reason=f"testbed unavailable: {reason}")
    for item in needing:
        item.add_marker(skip)


def _require_testbed() -> None:
    # Belt and braces for fixtures requested indirectly (the collection hook already
    # skipped or stopped the run when the marker was visible).
    reason = unavailable_reason()
    if reason is None:
        return
    if _in_ci():
        pytest.fail(f"CI is set but the testbed cannot run: {reason}", pytrace=False)
    pytest.skip(f"testbed unavailable: {reason}")


def _require_slurm() -> None:
    """The testbed and a real Slurm on it: skipped without them, failed in CI."""
    from slurmbed import slurm_unavailable

    _require_testbed()
    reason = slurm_unavailable()
    if reason is None:
        return
    if _in_ci():
        pytest.fail(f"CI is set but Slurm cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def make_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MakeTestbed]:
    """Factory: make_testbed(n=3, **Testbed kwargs) -> an up Testbed on its own free
    prefix/subnet/bridge; every one is torn down at the end of the test, even on failure."""
    _require_testbed()
    beds: list[Testbed] = []

    def factory(n: int = 3, **kwargs: Any) -> Testbed:
        kwargs.setdefault("workdir", tmp_path_factory.mktemp("testbed"))
        tb = start_testbed(n, **kwargs)
        beds.append(tb)
        return tb

    yield factory
    errors = []
    for tb in reversed(beds):
        try:
            tb.down()
        except Exception as e:  # noqa: BLE001 - tear down the others, then report all
            errors.append(f"{tb.prefix}: {e}")
    if errors:
        pytest.fail("testbed teardown failed: " + "; ".join(errors), pytrace=False)


@pytest.fixture
def testbed(make_testbed: MakeTestbed) -> Testbed:
    """A fresh, healthy 3-node testbed per test: faults never leak between tests."""
    return make_testbed(3)


@pytest.fixture(scope="module")
def shared_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """A 3-node testbed shared by a module's read-only tests (do not inject faults)."""
    _require_testbed()
    # Its own stem and subnet range, so it is never confused with per-test testbeds.
    workdir = tmp_path_factory.mktemp("shared-testbed")
    tb = start_testbed(3, stem="ddps", subnet_base="10.79", workdir=workdir)
    try:
        yield tb
    finally:
        tb.down()
