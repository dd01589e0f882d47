"""`distributed.exit_rank`: a rank ends with its exit code and its buffered output and logs written, without
interpreter finalization (no atexit handlers run: that is where a gloo worker thread could abort it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RANK = """
import atexit, logging, sys
from agentrl.trainer.distributed import exit_rank
logging.basicConfig(filename=sys.argv[1], level=logging.INFO)
atexit.register(lambda: print("finalized"))
logging.getLogger("rank").info("logged before the exit")
print("written before the exit", end="")  # buffered: stdout is a pipe
exit_rank(3)
"""


def test_a_rank_exits_with_its_output_and_logs_flushed_and_no_finalization(tmp_path: Path) -> None:
    log = tmp_path / "rank.log"
    done = subprocess.run(
        [sys.executable, "-c", RANK, str(log)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == "written before the exit"
    assert "logged before the exit" in log.read_text()
