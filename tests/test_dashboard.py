"""The dashboard in a real browser: headless Chromium, driven by Selenium.

The dashboard serves a real SQLite store with a run of every status
(``tests/_dashboard_flows.py``), from Hypercorn in the test's trio loop; the
browser is driven from a worker thread (``trio.to_thread.run_sync``), on the
real clock, with generous bounds. Chromium and chromedriver are Debian's
(``.ci/run`` installs them); without them these tests skip, except under
``CI=true``, where they fail.

``TETHER_SCREENSHOTS=docs/images python -m pytest tests/test_dashboard.py``
also saves the screenshots the docs show.
"""

from __future__ import annotations

import base64
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import trio

import tether
from tether._ui._app import Dashboard, open_dashboard, serve
from tether.stores import EntryKind, RunStatus

from . import _dashboard_flows as flows

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver


CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,900",
)
TOKEN = "browser-test-token-42"
WAIT = 30.0  # seconds the browser may take to show something
SHOTS = os.environ.get("TETHER_SCREENSHOTS")
T = TypeVar("T")


def _need_browser() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    if missing:
        why = f"the browser tests need {', '.join(missing)} (.ci/run installs them)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: {why}", pytrace=False)
        pytest.skip(why)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    """One headless Chromium for the module, with a fresh profile; never downloads anything."""
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="tether-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in (*FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(
            service=Service(executable_path=str(CHROMEDRIVER)), options=options
        )
        try:
            yield driver
        finally:
            driver.quit()


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    await flows.seed(tether.SQLiteStore(path))
    return path


@asynccontextmanager
async def served(db: Path) -> AsyncIterator[tuple[str, Dashboard]]:
    """The dashboard of *db* on a free port of 127.0.0.1: its base URL and itself."""
    async with (
        open_dashboard(
            tether.SQLiteStore(db), shown="sqlite:runs.db", token=TOKEN, modules=[flows]
        ) as dash,
        trio.open_nursery() as nursery,
    ):
        never = trio.Event()
        urls = await nursery.start(
            partial(serve, dash, host="127.0.0.1", port=0, shutdown_trigger=never.wait)
        )
        yield urls[0], dash
        nursery.cancel_scope.cancel()


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run Selenium's blocking calls off the trio loop, which serves the pages meanwhile."""
    return await trio.to_thread.run_sync(fn, *args)


def wait_for(driver: WebDriver, condition: Callable[[WebDriver], Any]) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # The live parts of a page are replaced as they refresh: look again.
    waiting = WebDriverWait(driver, WAIT, ignored_exceptions=[StaleElementReferenceException])
    return waiting.until(condition)


def text(driver: WebDriver) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.TAG_NAME, "body").text)


def no_alert(driver: WebDriver) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        alert = driver.switch_to.alert
    except NoAlertPresentException:
        return
    raise AssertionError(f"a stored script ran: alert {alert.text!r}")


def screenshot(driver: WebDriver, name: str, selector: str | None = None) -> None:
    """Save a PNG of the whole page, or of one element, for the docs (``TETHER_SCREENSHOTS``)."""
    if not SHOTS:
        return
    if selector is None:
        script = "const e = document.documentElement; return [0, 0, e.scrollWidth, e.scrollHeight];"
    else:
        script = (
            "const r = document.querySelector(arguments[0]).getBoundingClientRect();"
            "return [r.left + scrollX - 8, r.top + scrollY - 8, r.width + 16, r.height + 16];"
        )
    x, y, width, height = driver.execute_script(script, selector)
    clip = {"x": x, "y": y, "width": width, "height": height, "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    Path(SHOTS).mkdir(parents=True, exist_ok=True)
    (Path(SHOTS) / name).write_bytes(base64.b64decode(shot["data"]))


# -- the tests ------------------------------------------------------------------------


def _browse(driver: WebDriver, base: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.get(base + "/")
    rows = driver.find_elements(By.CSS_SELECTOR, "tbody tr[data-run]")
    statuses = {r.get_attribute("data-status") for r in rows}
    assert statuses == {s.value for s in RunStatus}, statuses
    assert "waiting for a worker" in text(driver) and "set aside after 5" in text(driver)
    screenshot(driver, "dashboard-runs.png")

    Select(driver.find_element(By.NAME, "status")).select_by_value("failed")
    driver.find_element(By.CSS_SELECTOR, "form.filters button").click()

    def listed(d: WebDriver) -> list[str]:
        return [
            str(r.get_attribute("data-run"))
            for r in d.find_elements(By.CSS_SELECTOR, "tr")
            if r.get_attribute("data-run")
        ]

    wait_for(
        driver, lambda d: "status=failed" in d.current_url and listed(d) == [flows.RUNS["failed"]]
    )

    driver.find_element(By.LINK_TEXT, flows.RUNS["failed"]).click()
    wait_for(driver, lambda d: "Error" in text(d))
    shown = text(driver)
    assert f"address of {flows.RUNS['failed']} is invalid: {flows.SCRIPT}" in shown
    assert "from step explode#0" in shown
    no_alert(driver)

    driver.get(f"{base}/run?id={flows.RUNS['completed']}")
    bars = driver.find_elements(By.CSS_SELECTOR, "svg.timeline .bar")
    keys = sorted(str(b.get_attribute("data-key")) for b in bars)
    assert keys == ["ask#0", "charge#0", "fetch#0", "reserve#0", "ship#0"], keys
    assert {b.get_attribute("data-lane") for b in bars} == {"0", "1"}  # charge ∥ reserve
    retried = driver.find_element(By.CSS_SELECTOR, 'svg.timeline .bar[data-key="charge#0"]')
    assert "retried" in (retried.get_attribute("class") or "")
    assert bars[0].size["width"] > 20  # drawn, not squashed
    # The stored <script> is shown as text (in the result and the journal), never run.
    assert text(driver).count(flows.SCRIPT) >= 3
    assert len(driver.find_elements(By.TAG_NAME, "script")) == 1
    no_alert(driver)
    screenshot(driver, "dashboard-run.png")


async def test_list_filter_open_a_run_and_see_its_timeline(browser: WebDriver, db: Path) -> None:
    async with served(db) as (base, _):
        await in_thread(_browse, browser, base)


def _answer(driver: WebDriver, base: str, dash: Dashboard) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    def journal() -> list[tuple[str, EntryKind]]:
        info = trio.from_thread.run(dash.engine.get_run, flows.RUNS["paused"])
        assert info is not None
        return [(e.key, e.kind) for e in info.entries]

    run = f"{base}/run?id={flows.RUNS['paused']}"
    driver.get(f"{run}&token={TOKEN}")  # the URL tether ui prints; the cookie keeps it
    wait_for(driver, lambda d: "token=" not in d.current_url)
    assert flows.SCRIPT in text(driver)  # the payload, as text
    no_alert(driver)
    form = driver.find_element(By.CSS_SELECTOR, 'form.answer[data-key="ask#0"]')
    before = journal()

    form.find_element(By.CSS_SELECTOR, 'input[name="answer.approved"][value="true"]').click()
    form.find_element(By.NAME, "answer.amount").send_keys("ten")
    form.find_element(By.NAME, "answer.note").send_keys("<b>ok</b>")
    Select(form.find_element(By.NAME, "answer.priority")).select_by_visible_text("HIGH")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    error = wait_for(
        driver, lambda d: d.find_element(By.CSS_SELECTOR, '[data-error="answer.amount"]')
    )
    assert "does not decode as int" in error.text
    assert journal() == before  # nothing journaled
    screenshot(driver, "dashboard-bad-answer.png", "section.request")

    form = driver.find_element(By.CSS_SELECTOR, 'form.answer[data-key="ask#0"]')
    amount = form.find_element(By.NAME, "answer.amount")
    assert amount.get_attribute("value") == "ten"  # kept, to be corrected
    amount.clear()
    amount.send_keys("4200")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "dl.facts .badge.s-completed"))
    shown = text(driver)
    assert "responded to ask#0 and queued the run for the workers" in shown
    assert f"shipped {flows.RUNS['paused']} (4200 cents) {flows.SCRIPT}" in shown
    assert journal()[len(before) :] == [("ask#0", EntryKind.RESPONSE), ("ship#0", EntryKind.STEP)]
    no_alert(driver)


async def test_answer_a_request_badly_then_well_and_see_the_run_complete(
    browser: WebDriver, db: Path
) -> None:
    # The dashboard only records the answer; the worker opened here executes the run.
    async with served(db) as (base, dash), tether.open_worker(dash.engine):
        await in_thread(_answer, browser, base, dash)


def _cancel(driver: WebDriver, base: str, owner: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/?token={TOKEN}")
    driver.get(f"{base}/run?id={flows.LIVE}")
    assert f"executing on {owner}, lease until" in text(driver)
    driver.find_element(By.CSS_SELECTOR, "form.cancel button").click()
    wait_for(driver, lambda d: "cancel recorded" in text(d))
    # The page refreshes itself until its owner has stopped the run.
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "dl.facts .badge.s-cancelled"))
    assert not driver.find_elements(By.CSS_SELECTOR, "form.cancel")


async def test_cancel_a_run_another_engine_executes(browser: WebDriver, db: Path) -> None:
    async with flows.open_live_run(tether.SQLiteStore(db)) as live, served(db) as (base, dash):
        await in_thread(_cancel, browser, base, live.owner)
        info = await dash.engine.get_run(flows.LIVE)
        assert info is not None and info.status is RunStatus.CANCELLED
