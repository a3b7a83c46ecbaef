"""The pytest plugin, used as a user's project uses it.

``examples/shop`` is a small project with its own tests: they run here in a
fresh pytest process, which finds the plugin through its entry point. The
rest drive the markers and options through ``pytester``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SHOP = Path(__file__).resolve().parent.parent / "examples" / "shop"


def test_the_example_project_passes_its_own_tests() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly"],
        cwd=SHOP,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 20, summary
    assert "failed" not in summary and "error" not in summary, summary


PROJECT = """
import pytest
import trio
import tether

@tether.step
async def double(x: int) -> int:
    await trio.sleep(1)
    return 2 * x

@tether.workflow(name="plugin.twice")
async def twice(x: int) -> int:
    return await double(await double(x))

async def test_engine(tether_engine, tether_store_kind, autojump_clock):
    assert await tether_engine.run(twice, 3) == 12
    assert trio.current_time() == 2

@pytest.mark.tether_seeds(3)
async def test_seeded(tether_seed):
    import trio._core._run as run
    assert run._ALLOW_DETERMINISTIC_SCHEDULING

@pytest.mark.tether_seeds([5, 9])
def test_listed(tether_seed, request):
    n = request.config.getoption("tether_seeds")
    assert tether_seed in (range(n) if n else (5, 9))

@pytest.mark.tether_stores("memory")
def test_explore(tether_explore, tether_store_kind):
    assert tether_explore(twice, 1, seeds=1, faults=["crash"]).trials > 1
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makepyfile(test_project=PROJECT)
    return pytester


def test_fixtures_and_markers_parametrize_tests(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("-v")
    result.assert_outcomes(passed=3 + 3 + 2 + 1)
    result.stdout.fnmatch_lines(
        [
            "*test_engine?memory? PASSED*",
            "*test_engine?sqlite? PASSED*",
            "*test_engine?file? PASSED*",
            "*test_seeded?seed2? PASSED*",
            "*test_listed?seed9? PASSED*",
        ]
    )


def test_options_override_seeds_and_stores(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("-v", "--tether-seeds=4", "--tether-stores=memory")
    result.assert_outcomes(passed=1 + 4 + 4 + 1)
    result.stdout.fnmatch_lines(["*test_listed?seed3? PASSED*"])


def test_bad_markers_and_options_say_what_to_write(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bad="""
import pytest

@pytest.mark.tether_seeds(0)
def test_no_seeds(tether_seed):
    pass
"""
    )
    result = pytester.runpytest_subprocess()
    result.stdout.fnmatch_lines(["*tether_seeds takes a positive count*"])
    assert result.ret != 0
    pytester.makepyfile(test_kinds="def test_kind(tether_store):\n    pass\n")
    result = pytester.runpytest_subprocess("--tether-stores=postgres", "test_kinds.py")
    result.stdout.fnmatch_lines(["*unknown store kinds*postgres*"])
    assert result.ret != 0
