"""``manage.py rundemo``: a taken port is reported before anything starts; Ctrl-C stops quietly."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from common.management.commands.rundemo import split_addr

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("addr", "expected"), [("127.0.0.1:8001", ("127.0.0.1", 8001)), ("9000", ("127.0.0.1", 9000))]
)
def test_addresses(addr, expected):
    assert split_addr(addr) == expected


@pytest.mark.parametrize("addr", ["host:port", "127.0.0.1:70000"])
def test_bad_addresses_are_command_errors(addr):
    with pytest.raises(CommandError, match="--addr"):
        split_addr(addr)


def test_a_port_in_use_is_reported_before_anything_starts(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=f"port {port} .* already in use.*PORT={port + 1}"):
            call_command("rundemo", "--addr", f"127.0.0.1:{port}")
    assert "serving" not in capsys.readouterr().out


@pytest.mark.services
def test_ctrl_c_stops_both_processes_quietly_and_exits_0(tmp_path):
    """The web server answers before "serving" is printed; SIGINT (Ctrl-C) stops the server and
    the worker, prints no traceback, and the command exits 0."""
    port = _free_port()
    env = {
        **os.environ,
        "CONCORD_VAR_DIR": str(tmp_path),  # SQLite and the filesystem broker in a fresh folder
    }
    env.pop("DATABASE_URL", None)
    env.pop("CELERY_BROKER_URL", None)  # the embedded broker of the demo
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "rundemo", "--addr", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = []  # runserver's own lines come first (it shares the terminal)
        while not (seen and seen[-1].startswith("Concord is serving")) and len(seen) < 50:
            seen.append(demo.stdout.readline())
        assert seen[-1].startswith(f"Concord is serving on http://127.0.0.1:{port}/"), seen
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        time.sleep(2)  # let the worker finish starting
        demo.send_signal(signal.SIGINT)
        out, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 0, err
    assert "Stopped the web server and the worker." in out
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "No hostname was supplied" not in err
    with socket.socket() as probe:  # the port is free again: the web server is gone
        probe.bind(("127.0.0.1", port))
