"""The shop's tests: the tether pytest plugin's fixtures, seeded schedules and the explorer.

Run them with ``pytest`` in this folder. The plugin comes with tether; the
fixtures whose names start with ``tether_`` are its.
"""

from collections import Counter

import pytest
import trio
from hypothesis import given, settings

import shop
import tether
from tether.testing import Explorer, FaultPlan, FaultyStore, ScheduleTrace, run_deterministic

# -- fixtures: one engine per test, on every built-in store ------------------------


async def test_checkout_charges_the_order_total(tether_engine):
    assert await tether_engine.run(shop.checkout, "o-1") == "payment-o-1-9949"


async def test_a_failed_fan_out_keeps_its_finished_branches(tether_engine):
    with pytest.RaisesGroup(shop.UnknownItemError):
        await tether_engine.run(shop.reserve_all, ["lamp", "ghost"], run_id="r-1")
    info = await tether_engine.get_run("r-1")
    assert [e.key for e in info.entries] == ["reserve#0"]  # the lamp stays reserved


async def test_a_refund_waits_for_approval(tether_engine):
    with pytest.raises(tether.Paused) as paused:
        await tether_engine.run(shop.approve_refund, "o-2", 500, run_id="refund-1")
    [request] = paused.value.requests
    assert request.payload == {"order": "o-2", "cents": 500}
    answer = {request.key: {"approved": True}}
    assert await tether_engine.resume("refund-1", answer) == "refund-o-2-500"


# -- seeded schedules: the same seed, the same interleaving -----------------------


@pytest.mark.tether_seeds(5)
async def test_reservations_finish_in_any_order(tether_scheduler, autojump_clock):
    # Runs five times, under seeds 0 to 4: each a different, reproducible
    # schedule of the three branches (on a MemoryStore: no threads).
    async with tether.open_engine(tether.MemoryStore()) as engine:
        shelves = await engine.run(shop.reserve_all, ["desk", "lamp", "chair"])
    assert shelves == ["shelf-desk", "shelf-lamp", "shelf-chair"]


async def reserve_three():
    async with tether.open_engine(tether.MemoryStore()) as engine:
        return await engine.run(shop.reserve_all, ["desk", "lamp", "chair"], run_id="r")


def test_a_seed_replays_the_same_schedule():
    traces = []
    for seed in (7, 7, 8):
        trace = ScheduleTrace()
        run_deterministic(reserve_three, seed=seed, instruments=[trace])
        traces.append(trace.events)
    assert traces[0] == traces[1]
    assert traces[0] != traces[2]


# -- the explorer: a fault at every interleaving point ------------------------------


@pytest.mark.tether_stores("memory")
def test_checkout_survives_every_fault(tether_explore):
    report = tether_explore(shop.checkout, "o-1", seeds=2)
    assert report.trials > 50


@pytest.mark.tether_stores("memory")
def test_fan_out_survives_every_fault(tether_explore):
    tether_explore(shop.reserve_all, ["lamp", "ghost", "desk"], seeds=2)


@pytest.mark.tether_stores("memory")
def test_refund_survives_every_fault(tether_explore):
    tether_explore(
        shop.approve_refund, "o-2", 500, seeds=2, responses={"ask#0": {"approved": True}}
    )


@pytest.mark.tether_stores("memory")
def test_report_survives_every_fault(tether_explore):
    tether_explore(shop.daily_report, "mon", seeds=2)


@pytest.mark.tether_stores("memory")
def test_delivery_survives_every_fault(tether_explore):
    # The courier's two scans: sent to the run as it is created, in this order.
    scans = [("scanned", "at the depot"), ("scanned", "at the door")]
    report = tether_explore(shop.deliver, "o-4", seeds=2, messages=scans)
    assert report.outcome == "returned 'parcel-o-4: at the depot, then at the door'"


@pytest.mark.tether_stores("sqlite", "file")
def test_checkout_survives_crashes_on_disk(tether_explore):
    # On the thread-backed stores too; crashes on FileStore tear their write.
    tether_explore(shop.checkout, "o-1", seeds=1, faults=["crash", "hang"])


# -- Hypothesis: random fault plans, shrunk when one breaks something --------------

refund_explorer = Explorer(
    shop.approve_refund, "o-3", 900, responses={"ask#0": {"approved": False, "note": "no"}}
)


@settings(max_examples=30, deadline=None)
@given(plan=refund_explorer.plans(max_faults=3))
def test_refund_survives_random_fault_plans(plan: FaultPlan):
    refund_explorer.check(plan)


# -- a crash, by hand ---------------------------------------------------------------

charged: Counter[str] = Counter()


@tether.step
async def charge_once(order_id: str) -> str:
    charged[order_id] += 1
    await trio.sleep(1)
    return f"payment-{order_id}"


@tether.workflow(name="shop.pay")
async def pay(order_id: str) -> str:
    payment = await charge_once(order_id)
    await shop.load_order(order_id)
    return payment


async def test_a_crash_after_the_charge_does_not_charge_again(autojump_clock):
    store = FaultyStore(tether.MemoryStore())
    store.inject("append", tether.testing.Crash(), at=2)  # the second save dies
    async with tether.open_engine(store) as engine:
        with pytest.raises(tether.testing.SimulatedCrash):
            await engine.run(pay, "o-9", run_id="pay-1")
    async with tether.open_engine(store.inner) as engine:  # a new process
        assert await engine.resume("pay-1") == "payment-o-9"
    assert charged["o-9"] == 1
