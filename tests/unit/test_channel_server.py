"""The pure process-selection rule the exec channel's server applies on a timeout."""

from __future__ import annotations

from agentrl.sandbox.channel_server import command_processes

SERVER, ROOT = 10, 20


def test_a_timeout_selects_the_session_descendants_and_new_adopted_daemons_only() -> None:
    table = {
        1: (0, 1, 0, False),  # init
        SERVER: (1, 5, 100, False),
        5: (1, 5, 50, False),  # the keep-alive process
        30: (SERVER, 30, 150, False),  # a daemon an earlier command left (started before ROOT)
        31: (30, 30, 151, False),  # its child
        ROOT: (SERVER, ROOT, 200, False),  # the command that timed out
        21: (ROOT, ROOT, 201, False),  # its child, same session
        22: (21, 22, 202, False),  # a grandchild that called setsid
        40: (SERVER, 40, 205, False),  # a double-forked setsid daemon the command left: adopted by SERVER
        41: (40, 40, 206, False),
        42: (SERVER, 42, 207, True),  # an adopted zombie: already dead, nothing to kill
    }
    assert command_processes(table, ROOT, SERVER) == {ROOT, 21, 22, 40, 41}


def test_without_the_command_in_the_table_no_adopted_process_is_selected() -> None:
    table = {SERVER: (1, 5, 100, False), 30: (SERVER, 30, 150, False), 21: (ROOT, ROOT, 201, False)}
    assert command_processes(table, ROOT, SERVER) == {21}


def test_a_background_job_started_in_the_same_clock_tick_before_the_command_is_kept() -> None:
    table = {
        SERVER: (1, 5, 100, False),
        15: (SERVER, 15, 200, False),  # an earlier command's job, same 10 ms tick as ROOT, lower pid
        ROOT: (SERVER, ROOT, 200, False),
        25: (SERVER, 25, 200, False),  # this command's daemon, same tick, higher pid
    }
    assert command_processes(table, ROOT, SERVER) == {ROOT, 25}
