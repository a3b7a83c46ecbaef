"""Human input with tether: an expense approval flow.

The runnable companion of docs/how-to/human-input.md. Run it with
``python examples/approval.py``.
"""

import attrs
import trio

import tether


@attrs.frozen
class Expense:
    expense_id: str
    employee: str
    cents: int


@attrs.frozen
class Decision:
    approved: bool
    note: str


payouts: list[str] = []  # what the payout step really did


@tether.step
async def load_expense(expense_id: str) -> Expense:
    return Expense(expense_id=expense_id, employee="ada", cents=12_500)


@tether.step
async def pay_out(expense: Expense) -> str:
    payouts.append(expense.expense_id)
    return f"paid {expense.cents / 100:.2f} to {expense.employee}"


async def sign_off(role: str, expense: Expense) -> Decision:
    return await tether.ask(
        {"role": role, "expense": expense.expense_id, "amount": expense.cents},
        Decision,
    )


@tether.workflow(name="expenses.approve")
async def approve(expense_id: str) -> str:
    expense = await load_expense(expense_id)
    async with tether.parallel() as p:
        manager = p.start_soon(sign_off, "manager", expense, key="manager")
        finance = p.start_soon(sign_off, "finance", expense, key="finance")
    decisions = [manager.result, finance.result]
    if not all(d.approved for d in decisions):
        return "rejected: " + "; ".join(d.note for d in decisions if not d.approved)
    return await pay_out(expense)


async def main() -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine:
        try:
            await engine.run(approve, "exp-7", run_id="exp-7")
        except tether.Paused as paused:
            for request in paused.requests:
                print(f"waiting on {request.key}: {request.payload} -> {request.response_type}")

        info = await engine.get_run("exp-7")
        assert info is not None
        print(f"status: {info.status}, pending: {[r.key for r in info.requests]}")

        try:
            await engine.resume("exp-7", responses={"manager/ask#0": True})
        except tether.InvalidResponseError as exc:
            print(f"refused: {type(exc).__name__}")

        ok = Decision(approved=True, note="within budget")
        try:
            await engine.resume("exp-7", responses={"manager/ask#0": ok})
        except tether.Paused as paused:
            print(f"still waiting on {[r.key for r in paused.requests]}")

    # A new engine (in real life: another process, on a durable store) resumes it.
    async with tether.open_engine(store) as engine:
        ok = Decision(approved=True, note="receipt attached")
        print(await engine.resume("exp-7", responses={"finance/ask#0": ok}))
        print(f"payouts: {payouts}")


if __name__ == "__main__":
    trio.run(main)
