"""Public names are shown at their public home, and errors word their advice for the call.

- Every class and function that ``tether``, ``tether.stores`` and
  ``tether.testing`` export has its ``__module__`` set to that package, so
  tracebacks and reprs say ``tether.CodecError``, not
  ``tether._errors.CodecError`` (issue 25, item 13), and it is found there
  again (pickle, ``module.qualname`` references).
- ``NotInRunError`` outside a run says what fits the call: ``call step.fn``
  for a step, how to answer for ``tether.ask``.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import traceback
import typing
from types import ModuleType

import attrs
import pytest

import tether
import tether.stores
import tether.testing

PACKAGES = ("tether", "tether.stores", "tether.testing")


def _exported(package: ModuleType) -> list[tuple[str, object]]:
    return [
        (name, obj)
        for name in package.__all__
        if inspect.isclass(obj := getattr(package, name)) or inspect.isfunction(obj)
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_class_and_function_names_its_public_home(package: str) -> None:
    module = importlib.import_module(package)
    exported = _exported(module)
    assert exported  # (the loop below checks something)
    for name, obj in exported:
        home: str = obj.__module__
        if not home.startswith("tether"):
            continue  # not tether's own (none today)
        assert home in PACKAGES, f"{package}.{name} says it lives in {home}"
        qualname: str = obj.__qualname__  # type: ignore[attr-defined]
        assert getattr(importlib.import_module(home), qualname) is obj, (
            f"{package}.{name}: {home}.{qualname} is not it"
        )


def test_a_traceback_names_the_public_class() -> None:
    try:
        raise tether.CodecError("step s#0 of run 'r': cannot encode")
    except tether.CodecError as exc:
        text = "".join(traceback.format_exception(exc))
    assert "tether.CodecError: step s#0" in text
    assert "tether._errors" not in text
    assert repr(tether.stores.FileStore) == "<class 'tether.stores.FileStore'>"
    assert tether.testing.FaultyStore.__module__ == "tether.testing"


def test_public_errors_and_records_still_pickle_and_decode() -> None:
    error = pickle.loads(pickle.dumps(tether.RunConflictError("run 'x' is taken")))
    assert type(error) is tether.RunConflictError and str(error) == "run 'x' is taken"
    status = pickle.loads(pickle.dumps(tether.RunStatus.COMPLETED))
    assert status is tether.RunStatus.COMPLETED
    # attrs classes keep their annotations resolved (attrs and cattrs read them).
    fields = {f.name: f.type for f in attrs.fields(tether.stores.RunRecord)}
    assert not isinstance(fields["created_at"], str)


@tether.step
async def lonely() -> int:
    return 1


async def test_not_in_run_error_advice_fits_the_call() -> None:
    with pytest.raises(tether.NotInRunError) as asked:
        await tether.ask("how many?", int)
    message = str(asked.value)
    assert message.startswith("tether.ask() was used outside a tether run")
    assert "engine.resume(run_id, responses={key: value})" in message
    assert "step.fn" not in message
    with pytest.raises(tether.NotInRunError, match=r"to test a step's logic alone, call step\.fn"):
        await lonely()
    with pytest.raises(tether.NotInRunError) as slept:
        await tether.sleep(1)
    assert "step.fn" not in str(slept.value)


def test_public_classes_keep_their_type_hints() -> None:
    # Moved to their public home, their annotations still resolve (tools, cattrs, users).
    for cls in (tether.RunInfo, tether.Request, tether.StepRetrying, tether.Workflow):
        assert cls.__module__ == "tether"
        assert typing.get_type_hints(cls), cls
