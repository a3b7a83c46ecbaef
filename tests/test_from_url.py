"""``tether.stores.from_url``: the one parser of store URLs, and constructors that refuse URLs.

- every documented form gives the right store at the right place, and each
  store's ``url`` gives it back (a PostgreSQL one without its password);
- a store made from a URL is the store (a run written through one is read
  through another made from the same URL);
- each bad form is refused with one line naming it (password hidden) and the
  accepted forms;
- ``SQLiteStore``, ``FileStore`` and ``PostgresStore`` given a store URL raise
  ``UsageError`` naming ``from_url``, and create nothing; odd file names that
  are no URL (a Windows drive, another word before a colon, a ``Path``) are
  paths;
- a ``postgresql://`` URL without psycopg is one line naming the extra, from
  ``from_url`` and from the command line (a process where psycopg does not
  import): no traceback;
- the command line takes the same forms: ``memory:`` for a run, refused by a
  command that reads stored runs; ``sqlite:///ABS`` as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import tether
from tether.stores import FileStore, MemoryStore, PostgresStore, SQLiteStore, from_url

from ._cli import cli, run_tether, tether_env
from ._poll import PATIENCE

FORMS = (
    "use sqlite:PATH (an SQLite file), file:DIR (a FileStore directory), memory: (a MemoryStore)"
)


# -- the forms ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:runs.db", "runs.db"),
        ("sqlite:data/runs.db", "data/runs.db"),
        ("sqlite:/var/lib/shop/runs.db", "/var/lib/shop/runs.db"),
        ("sqlite:///var/lib/shop/runs.db", "/var/lib/shop/runs.db"),
        ("sqlite:////var/lib/shop/runs.db", "/var/lib/shop/runs.db"),
        ("SQLite:runs.db", "runs.db"),
        ("sqlite:C:\\runs.db", "C:\\runs.db"),
        ("sqlite:file:odd.db", "file:odd.db"),
    ],
)
def test_sqlite_urls(url: str, path: str) -> None:
    store = from_url(url)
    assert isinstance(store, SQLiteStore)
    assert store.path == Path(path)
    again = from_url(store.url)
    assert isinstance(again, SQLiteStore) and again.path == store.path
    assert again.url == store.url


@pytest.mark.parametrize(
    ("url", "directory"),
    [
        ("file:runs", "runs"),
        ("file:/srv/runs", "/srv/runs"),
        ("file:///srv/runs", "/srv/runs"),
        ("FILE:runs", "runs"),
        ("file:sqlite:x", "sqlite:x"),
    ],
)
def test_file_urls(url: str, directory: str) -> None:
    store = from_url(url)
    assert isinstance(store, FileStore)
    assert store.directory == Path(directory).absolute()
    assert store.url == f"file:{Path(directory).absolute()}"
    again = from_url(store.url)
    assert isinstance(again, FileStore) and again.directory == store.directory


def test_memory_url() -> None:
    store = from_url("memory:")
    assert isinstance(store, MemoryStore)
    assert store.url == "memory:"
    assert from_url(store.url) is not store  # a new, empty one each time


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://shop:s3cret@db.internal:5433/orders",
            "postgresql://shop@db.internal:5433/orders",
        ),
        ("postgres://shop@db.internal/orders", "postgresql://shop@db.internal/orders"),
        ("POSTGRESQL://shop@db.internal:5432/orders", "postgresql://shop@db.internal:5432/orders"),
    ],
)
def test_postgres_urls(url: str, shown: str) -> None:
    store = from_url(url)
    assert isinstance(store, PostgresStore)
    assert store.url == shown
    assert "s3cret" not in repr(store)
    again = from_url(store.url)
    assert isinstance(again, PostgresStore) and again.url == store.url


def test_a_store_from_a_url_is_that_store(tmp_path: Path) -> None:
    @tether.workflow(name="tests.from_url.double")
    async def double(x: int) -> int:
        return 2 * x

    url = f"sqlite:{tmp_path / 'runs.db'}"

    async def main() -> tether.RunInfo | None:
        async with tether.open_engine(from_url(url)) as engine:
            assert await engine.run(double, 21, run_id="d-1") == 42
        async with tether.open_engine(from_url(url)) as engine:
            return await engine.get_run("d-1")

    info = trio.run(main)
    assert info is not None and info.result == 42
    assert (tmp_path / "runs.db").is_file()


# -- bad forms ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("", ""),
        ("runs.db", "(a path? sqlite:runs.db or file:runs.db)"),
        ("sqlite:", ""),
        ("file:", ""),
        ("sqlite://", "(no path after sqlite://)"),
        ("sqlite:///", "(no path after sqlite://)"),
        ("sqlite://dbhost/runs.db", "(sqlite://HOST/... names a host"),
        ("file://nas/runs", "(file://HOST/... names a host"),
        ("memory:runs", "(nothing follows memory:)"),
        ("postgres:shop", ""),
        ("postgresql:/shop", ""),
        ("redis://localhost:6379", ""),
        ("C:\\runs.db", "(a path? sqlite:C:\\runs.db or file:C:\\runs.db)"),
    ],
)
def test_bad_urls_are_refused_in_one_line(url: str, hint: str) -> None:
    with pytest.raises(tether.UsageError) as info:
        from_url(url)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{url!r} is not a store: {FORMS}")
    assert hint in message


def test_a_refused_url_never_shows_its_password() -> None:
    for url in ("mysql://shop:s3cret@db/orders", "redis://db/0?password=s3cret"):
        with pytest.raises(tether.UsageError, match="is not a store") as info:
            from_url(url)
        assert "s3cret" not in str(info.value)
        assert "***" in str(info.value)


@pytest.mark.parametrize("url", [Path("runs.db"), None, 3, b"sqlite:runs.db"])
def test_a_url_is_a_string(url: object) -> None:
    with pytest.raises(
        tether.UsageError, match=r"a store URL is a string such as 'sqlite:runs\.db'"
    ):
        from_url(url)  # type: ignore[arg-type]


# -- constructors refuse URLs ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "url"),
    [
        (SQLiteStore, "sqlite:orders.db"),
        (SQLiteStore, "SQLITE:orders.db"),
        (SQLiteStore, "file:orders"),
        (SQLiteStore, "memory:"),
        (SQLiteStore, "postgresql://shop@db/orders"),
        (SQLiteStore, "postgres:orders"),
        (FileStore, "file:orders"),
        (FileStore, "sqlite:orders.db"),
        (PostgresStore, "sqlite:orders.db"),
        (PostgresStore, "file:orders"),
        (PostgresStore, "memory:"),
    ],
)
def test_constructors_refuse_urls(
    make: type[SQLiteStore | FileStore | PostgresStore],
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(tether.UsageError) as info:
        make(url)
    message = str(info.value)
    assert message.startswith(f"{make.__name__} was given the store URL {url!r}: make the store ")
    assert f"tether.stores.from_url({url!r})" in message
    assert os.listdir(tmp_path) == []


def test_a_refusing_constructor_hides_the_password() -> None:
    with pytest.raises(tether.UsageError, match="from_url") as info:
        SQLiteStore("postgresql://shop:s3cret@db/orders")
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize(
    "path", ["C:\\orders.db", "orders:2024.db", "c:orders.db", Path("sqlite:orders.db")]
)
def test_names_that_are_no_url_are_paths(path: str | Path) -> None:
    assert SQLiteStore(path).path == Path(path)
    assert FileStore(path).directory == Path(path).absolute()


async def test_a_path_that_looks_like_a_url_names_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SQLiteStore(Path("sqlite:orders.db"))
    await store.open()
    await store.close()
    assert os.listdir(tmp_path) == ["sqlite:orders.db"]
    assert store.url == "sqlite:sqlite:orders.db"
    again = from_url(store.url)
    assert isinstance(again, SQLiteStore) and again.path == Path("sqlite:orders.db")


def test_postgres_store_takes_its_own_urls() -> None:
    assert PostgresStore("postgres://shop@db/orders").url == "postgresql://shop@db/orders"
    assert PostgresStore("host=db user=shop dbname=orders").url == "postgresql://shop@db/orders"


PRIMARY_AND_STANDBY = "postgresql://shop@db1:5432,db2:5433/orders?target_session_attrs=read-write"


@pytest.mark.parametrize(
    ("conninfo", "url"),
    [
        ("postgresql://shop:s3cret@db1:5432,db2:5433/orders?target_session_attrs=read-write",
         PRIMARY_AND_STANDBY),
        ("host=db1,db2 port=5432,5433 user=shop password=s3cret dbname=orders "
         "target_session_attrs=read-write", PRIMARY_AND_STANDBY),
        ("host=db1,db2 port=5432 dbname=orders", "postgresql://db1:5432,db2:5432/orders"),
        ("postgresql://db1:5432,db2/orders?target_session_attrs=any",
         "postgresql://db1:5432,db2/orders"),
        ("host=::1 port=5432 dbname=orders", "postgresql://[::1]:5432/orders"),
        ("host=/run/pg port=5432 dbname=orders", "postgresql://%2Frun%2Fpg:5432/orders"),
    ],
)  # fmt: skip
def test_a_multi_host_url_keeps_each_host_with_its_port(conninfo: str, url: str) -> None:
    """A primary and its standby (failover): each host keeps its own port, and
    ``target_session_attrs`` stays, so the URL reaches the server the conninfo does."""
    store = PostgresStore(conninfo)
    assert store.url == url
    assert url in repr(store) and "s3cret" not in repr(store)
    again = from_url(store.url)
    assert isinstance(again, PostgresStore) and again.url == url
    if conninfo.startswith("postgresql:"):  # a URL: the command line's --store takes it too
        made = from_url(conninfo)
        assert isinstance(made, PostgresStore) and made.url == url


# -- a missing optional dependency ------------------------------------------------------------

EXTRA = "pip install -e '.[postgres]' in tether's clone"


def test_a_postgres_url_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` raises ImportError
    with pytest.raises(tether.UsageError) as info:
        from_url("postgresql://shop@db/orders")
    message = str(info.value)
    assert "\n" not in message
    assert message.endswith(EXTRA)
    assert "psycopg is missing" in message


#: ``python -m tether ARGV`` in a process where psycopg does not import.
_WITHOUT_PSYCOPG = """\
import runpy, sys
sys.modules["psycopg"] = None
sys.argv[0] = "tether"
runpy.run_module("tether", run_name="__main__")
"""


@pytest.mark.parametrize("command", [["runs", "list"], ["worker", "--import", "tests._cli_flows"]])
def test_the_cli_without_psycopg_says_one_line(command: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PSYCOPG, *command],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        cwd=tmp_path,
        env=tether_env(TETHER_STORE="postgresql://shop:s3cret@127.0.0.1:9/orders"),
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "tether: PostgresStore needs psycopg 3 and psycopg-pool, which are not installed "
        f"(psycopg is missing): {EXTRA}"
    ]


# -- the command line takes the same forms ---------------------------------------------------


def test_the_cli_runs_a_workflow_on_memory(tmp_path: Path) -> None:
    done = run_tether(
        "run", "tests._cli_flows:packed", "o-1", "5", "--store", "memory:", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert '{"order_id": "o-1", "weight_grams": 5}' in done.stdout
    assert os.listdir(tmp_path) == []


def test_a_command_that_reads_runs_refuses_memory() -> None:
    r = cli("runs", "list", "--store", "memory:")
    assert r.status == 1
    assert r.err == (
        "tether: memory: is a new, empty MemoryStore in every process (the runs commands "
        "never create a store; name it with --store or $TETHER_STORE)\n"
    )


def test_the_cli_reads_an_absolute_sqlite_url(tmp_path: Path) -> None:
    @tether.workflow(name="tests.from_url.answer")
    async def answer() -> int:
        return 42

    async def main() -> None:
        async with tether.open_engine(from_url(f"sqlite:{tmp_path}/runs.db")) as engine:
            await engine.run(answer, run_id="a-1")

    trio.run(main)
    r = cli("runs", "show", "a-1", "--json", "--store", f"sqlite://{tmp_path}/runs.db")
    assert r.status == 0, r.err
    assert '"result": 42' in r.out
