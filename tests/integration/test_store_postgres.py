"""The store's Alembic migrations: on SQLite (fast) and on a real, throwaway PostgreSQL cluster (slow).

The Postgres test starts a cluster from Debian's `postgresql` package (`scripts/setup_extras.sh` installs
it) as a non-root user: initdb into a temporary folder, pg_ctl start on a free loopback port with its unix
socket in that folder, then `agentrl db upgrade` against it, a run recorded through the real store writer,
read back, and the cluster stopped and deleted. Nothing is mocked.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, create_engine, inspect

from agentrl.store.migrations import current, head, upgrade
from agentrl.store.models import Base
from agentrl.store.repository import (
    close_store,
    count_rows,
    list_runs,
    load_episodes,
    load_metrics,
    open_store,
)
from agentrl.ui.sample import record_sample_run

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]
SAMPLE_ROWS = {"runs": 1, "episodes": 22, "turns": 40, "metrics": 32}


def schema_diff(engine: Engine) -> list[object]:
    """What differs between the migrated database and `models.py` (empty when they match)."""
    with engine.connect() as connection:
        return list(compare_metadata(MigrationContext.configure(connection), Base.metadata))


def test_sqlite_is_created_by_the_migrations(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    assert current(store.engine) == head() == "0011"
    assert schema_diff(store.engine) == []
    record_sample_run(store)
    assert count_rows(store) == SAMPLE_ROWS
    close_store(store)


def test_a_store_from_before_alembic_is_adopted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/old.db"
    engine = create_engine(url)
    upgrade(engine, "0001")  # the tables as `create_all` made them before the migrations existed
    with engine.begin() as connection:
        connection.exec_driver_sql("DROP TABLE alembic_version")
    assert "alembic_version" not in inspect(engine).get_table_names()
    engine.dispose()
    store = open_store(url)  # stamped 0001, then upgraded
    assert current(store.engine) == head() == "0011" and schema_diff(store.engine) == []
    record_sample_run(store)
    assert count_rows(store)["runs"] == 1
    close_store(store)


def test_db_cli_upgrades_and_reports(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    before = subprocess.run(
        AGENTRL + ["db", "current", "--url", url], capture_output=True, text=True, timeout=120
    )
    assert before.returncode == 0, before.stderr
    assert "at revision (none) (head: 0011)" in before.stdout
    upgraded = subprocess.run(
        AGENTRL + ["db", "upgrade", "--url", url], capture_output=True, text=True, timeout=120
    )
    assert upgraded.returncode == 0, upgraded.stderr
    assert "at revision 0011 (head: 0011)" in upgraded.stdout


# --- a real PostgreSQL -------------------------------------------------------------------------------


def postgres_bin() -> Path | None:
    """The bin folder of the newest Debian PostgreSQL install, or the one holding `initdb` on PATH."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def as_unprivileged(folder: Path) -> list[str]:
    """A command prefix that drops root to `nobody` (PostgreSQL refuses to run as root), owning `folder`."""
    if os.geteuid() != 0:
        return []
    nobody = pwd.getpwnam("nobody")
    os.chown(folder, nobody.pw_uid, nobody.pw_gid)
    return ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]


@pytest.fixture
def postgres_url() -> Iterator[str]:
    bindir = postgres_bin()
    if bindir is None:
        pytest.skip(
            "PostgreSQL is not installed; run scripts/setup_extras.sh (as root) or apt-get install postgresql"
        )
    folder = Path(tempfile.mkdtemp(prefix="agentrl-pg-"))  # not under pytest's root-only tmp folder
    prefix = as_unprivileged(folder)
    data, port = folder / "data", free_port()

    def pg(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(prefix + list(args), cwd=folder, capture_output=True, text=True, timeout=120)

    try:
        init = pg(
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "agentrl",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        assert init.returncode == 0, init.stderr
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        start = pg(
            str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start"
        )
        assert start.returncode == 0, start.stderr + (folder / "log").read_text()
        yield f"postgresql+psycopg://agentrl@127.0.0.1:{port}/postgres"
    finally:
        pg(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_postgres_upgrade_record_and_read_back(postgres_url: str) -> None:
    upgraded = subprocess.run(
        AGENTRL + ["db", "upgrade", "--url", postgres_url], capture_output=True, text=True, timeout=120
    )
    assert upgraded.returncode == 0, upgraded.stderr
    assert "at revision 0011 (head: 0011)" in upgraded.stdout

    store = open_store(postgres_url)
    try:
        assert store.engine.dialect.name == "postgresql"
        assert schema_diff(store.engine) == []
        run_id = record_sample_run(store)
        assert count_rows(store) == SAMPLE_ROWS
        [run] = list_runs(store)
        assert (run["id"], run["status"], run["config"]["credit"]) == (
            run_id,
            "finished",
            {"estimator": "gigpo", "options": {}},
        )
        episodes = load_episodes(store, run_id)
        infra = [episode for episode in episodes if episode["stop_reason"] == "infra_error"]
        assert len(infra) == 3 and infra[0]["error"].startswith("SandboxLost")
        advantages = [turn["advantage"] for episode in episodes for turn in episode["turns"]]
        assert any(value is not None and value > 0 for value in advantages)
        assert any(value is not None and value < 0 for value in advantages)
        metrics = load_metrics(store, run_id)
        assert {"step": 0, "name": "eval/success_rate", "value": 0.5} in metrics
    finally:
        close_store(store)
