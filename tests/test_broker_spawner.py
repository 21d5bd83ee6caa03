"""tests/broker_spawner.py: a module run through the spawner behaves as `python -m` run fresh
(what it sees, what it prints, how it ends), and its process is driven like a Popen."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import broker_spawner  # noqa: E402

PROBE = """
import json, os, sys, threading, time
print(json.dumps({"cwd": os.getcwd(), "argv": sys.argv[1:], "argv0": os.path.basename(sys.argv[0]),
                  "probe": os.environ.get("PROBE"), "path0": sys.path[0], "name": __name__}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
mode = sys.argv[1]
if mode == "exit":
    sys.exit(int(sys.argv[2]))
if mode == "raise":
    raise ValueError("probe failed")
if mode == "sleep":
    time.sleep(60)
if mode == "echo":       # stdin back on stdout as bytes, then a failing exit
    sys.stdout.flush()
    sys.stdout.buffer.write(sys.stdin.buffer.read())
    sys.exit(2)
if mode == "thread":     # the interpreter waits for a non-daemon thread before it exits
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", flush=True))).start()
"""


@pytest.fixture(scope="module")
def probe_env(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("probe")
    (folder / "spawner_probe.py").write_text(PROBE)
    env = dict(os.environ, PROBE="set", PYTHONPATH=os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    env.pop(broker_spawner.POLICY_ENV, None)
    return env


def _run(monkeypatch, env: dict, cwd: Path, *args: str, policy: str, form: str = "-m") -> tuple[int, str, str]:
    monkeypatch.setenv(broker_spawner.POLICY_ENV, policy)
    out, err = cwd / f"{policy}.out", cwd / f"{policy}.err"
    main = ["-m", "spawner_probe"] if form == "-m" else ["-c", PROBE]
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = broker_spawner.popen([sys.executable, *main, *args], stdout=o, stderr=e,
                                    cwd=str(cwd), env=env)
    if policy == "spawner":
        assert isinstance(proc, broker_spawner.SpawnedProcess)
    code = proc.wait(60)
    return code, out.read_text(), err.read_text()


@pytest.mark.parametrize("form", ["-m", "-c"])
@pytest.mark.parametrize("args", [("exit", "0"), ("exit", "3"), ("raise",), ("thread",)])
def test_a_spawned_module_sees_prints_and_ends_as_a_fresh_one(probe_env, tmp_path, monkeypatch, args, form):
    fresh = _run(monkeypatch, probe_env, tmp_path, *args, policy="exec", form=form)
    spawned = _run(monkeypatch, probe_env, tmp_path, *args, policy="spawner", form=form)
    assert spawned[0] == fresh[0]
    assert spawned[1] == fresh[1]
    # the traceback's runpy frames differ in line numbers only
    assert spawned[2].splitlines()[0] == fresh[2].splitlines()[0] == "to stderr"
    assert spawned[2].splitlines()[-1] == fresh[2].splitlines()[-1]
    assert f'"cwd": "{tmp_path}"' in fresh[1] and '"probe": "set"' in fresh[1] and '"name": "__main__"' in fresh[1]


def test_signals_poll_wait_and_a_stdout_pipe(probe_env, tmp_path):
    proc = broker_spawner.popen([sys.executable, "-m", "spawner_probe", "sleep"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, cwd=str(tmp_path), env=probe_env)
    assert isinstance(proc, broker_spawner.SpawnedProcess)
    assert b'"argv": ["sleep"]' in proc.stdout.readline()
    assert proc.poll() is None
    proc.send_signal(signal.SIGSTOP)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.2)
    proc.kill()
    assert proc.wait(10) == -signal.SIGKILL
    proc.send_signal(signal.SIGTERM)        # a no-op once it has ended, as with Popen
    proc.stdout.close()

    proc = broker_spawner.popen([sys.executable, "-m", "spawner_probe", "sleep"], stdout=subprocess.DEVNULL,
                                cwd=str(tmp_path), env=probe_env, stderr=subprocess.DEVNULL)
    time.sleep(0.2)
    proc.terminate()
    assert proc.wait(10) == -signal.SIGTERM

    proc = broker_spawner.popen([sys.executable, "-c", PROBE, "exit", "0"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, cwd=str(tmp_path), env=probe_env, text=True)
    assert isinstance(proc, broker_spawner.SpawnedProcess)
    assert proc.stdout.readline().startswith('{"cwd": ') and proc.stdout.read() == ""   # text, then EOF
    assert proc.wait(10) == 0
    proc.stdout.close()


@pytest.mark.parametrize("text, data", [(True, "one\ntwo\n"), (False, b"\x00\xff bytes\n")])
def test_run_passes_stdin_and_captures_as_a_fresh_process_would(probe_env, tmp_path, monkeypatch, text, data):
    done = {}
    for policy in ("exec", "spawner"):
        monkeypatch.setenv(broker_spawner.POLICY_ENV, policy)
        done[policy] = broker_spawner.run([sys.executable, "-m", "spawner_probe", "echo"], input=data,
                                          cwd=str(tmp_path), env=probe_env, timeout=60, text=text)
    fresh, spawned = done["exec"], done["spawner"]
    assert spawned.returncode == fresh.returncode == 2
    assert spawned.stdout == fresh.stdout and spawned.stdout.endswith(data)
    assert spawned.stderr == fresh.stderr == ("to stderr\n" if text else b"to stderr\n")


def test_a_closed_spawner_ends_at_once_and_kills_what_it_runs(probe_env, tmp_path):
    env = dict(probe_env, PROBE="close")        # a spawner of its own
    proc = broker_spawner.popen([sys.executable, "-m", "spawner_probe", "sleep"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, cwd=str(tmp_path), env=env)
    assert b'"probe": "close"' in proc.stdout.readline()
    spawner = broker_spawner._spawner_for(env)
    started = time.monotonic()
    spawner.close()
    assert time.monotonic() - started < 5 and spawner.proc.returncode == 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:          # killed: gone, or a zombie of whoever reaps it
        try:
            with open(f"/proc/{proc.pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"pid {proc.pid} still runs after its spawner closed")
    proc.stdout.close()


def test_what_the_spawner_cannot_give_runs_fresh(probe_env, tmp_path, monkeypatch):
    proc = broker_spawner.popen([sys.executable, "-m", "spawner_probe", "exit", "0"], stdout=subprocess.DEVNULL,
                                cwd=str(tmp_path), env=probe_env, preexec_fn=lambda: None)
    assert isinstance(proc, subprocess.Popen) and proc.wait(60) == 0
    monkeypatch.setenv(broker_spawner.POLICY_ENV, "fork")
    with pytest.raises(ValueError, match="use spawner or exec"):
        broker_spawner.popen([sys.executable, "-m", "spawner_probe"], env=probe_env)
