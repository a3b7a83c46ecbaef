"""What stores record about the engines that hold runs and the workers that serve them.

Layer: stores (``tether.stores``).

:class:`Renewal` is what a lease renewal (:meth:`Store.renew
<._store.Store.renew>`) found; :class:`WorkerAd` is a worker's advertisement
of the workflows it serves (:class:`~._store.AdvertisingStore`), with the
strict JSON of its :data:`Served` pairs. These records are about owners, not
runs: no run record or journal entry holds them, which is why they are apart
from :mod:`._records`.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from typing import final

import attrs

from ._record_json import RecordDecodeError, loads_record

__all__ = (
    "Renewal",
    "Served",
    "WorkerAd",
    "dumps_served",
    "loads_served",
    "served_from_json",
    "served_to_json",
)


@final
@attrs.frozen(kw_only=True)
class Renewal:
    """What :meth:`Store.renew` found about the runs an owner said it holds."""

    #: runs whose lease the owner no longer holds (another token or owner now)
    lost: frozenset[str] = frozenset()
    #: held runs with a recorded cancel (``engine.cancel`` from anywhere)
    cancelled: frozenset[str] = frozenset()
    #: held runs that no owner holds any more, still with the held token: released by
    #: a write of the holder's own (its outcome, a parking, a release), or cancelled
    #: after its lease lapsed. Not in :attr:`lost`. (A store that does not report
    #: these reports them as lost, which is safe: the engine then stops the run.)
    released: frozenset[str] = frozenset()


#: A workflow as workers serve it: ``(name, version)``, the version ``None`` when unversioned.
Served = tuple[str, str | None]


@final
@attrs.frozen(kw_only=True)
class WorkerAd:
    """A worker's advertisement: the workflows it serves, while it lives.

    Written by :meth:`AdvertisingStore.advertise` when a worker starts and
    renewed while it runs; read back by :meth:`AdvertisingStore.list_workers`
    to find the runs no live worker serves (``tether runs list --stranded``).
    """

    owner: str  #: the worker's engine, ``host:pid:engine-id``
    serves: frozenset[Served]  #: the ``(workflow, version)`` pairs it claims runs of
    expires_at: datetime  #: when the advertisement lapses unless renewed (store's clock)


def served_to_json(serves: Collection[Served]) -> list[list[str | None]]:
    """A :attr:`WorkerAd.serves` set as JSON-ready ``[workflow, version]`` pairs, sorted."""
    pairs = sorted(serves, key=lambda p: (p[0], p[1] is not None, p[1] or ""))
    return [[name, version] for name, version in pairs]


def served_from_json(data: object) -> frozenset[Served]:
    """Decode what :func:`served_to_json` made, strictly.

    Raises:
        RecordDecodeError: anything else.
    """
    if not isinstance(data, list) or not all(
        isinstance(p, list)
        and len(p) == 2
        and type(p[0]) is str
        and p[0]
        and (p[1] is None or (type(p[1]) is str and p[1]))
        for p in data
    ):
        raise RecordDecodeError(
            f"a worker's served workflows must be [workflow, version] pairs, not {data!r:.200}"
        )
    return frozenset((p[0], p[1]) for p in data)


def dumps_served(serves: Collection[Served]) -> str:
    """The JSON text stores keep for a :attr:`WorkerAd.serves` set."""
    return json.dumps(served_to_json(serves), ensure_ascii=False, separators=(",", ":"))


def loads_served(text: str | bytes) -> frozenset[Served]:
    """Decode what :func:`dumps_served` made, strictly (see :func:`loads_record`).

    Raises:
        RecordDecodeError: anything else.
    """
    result: frozenset[Served] = loads_record(text, served_from_json)
    return result
