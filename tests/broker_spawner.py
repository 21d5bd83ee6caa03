"""Starts `python -m logcore.tools.cli broker ...` processes without paying the interpreter's
start-up and imports each time: a spawner process imports the CLI once, then forks one child per
broker, and the child runs the CLI module as `python -m` would (runpy, `__main__`, the same argv,
cwd, environment and stdio, exit status from SystemExit or an uncaught exception). A broker costs
about 2.2 CPU seconds started cold and most of that is imports; the suite starts hundreds.

    proc = popen([sys.executable, "-m", "logcore.tools.cli", "broker", "--config", path],
                 stdout=..., stderr=..., cwd=..., env=...)
    done = run([sys.executable, "-m", "logcore.tools.cli", "repair", ...], input=..., timeout=...)
    done = run([...], input=b"...", text=False)       # bytes in and out

`popen` returns a `SpawnedProcess` (pid, poll, wait, send_signal, terminate, kill, returncode,
stdout as subprocess.Popen has them). The spawner stays single-threaded (forking is safe), reaps
its children and reports each exit status; when the test process goes away it SIGKILLs every
child it still has. One spawner per interpreter and environment (PYTEST_CURRENT_TEST aside): a
test that changes the environment gets a spawner of its own.

`python -c CODE ARGS` goes through the spawner too (a crash test's child script).

Whatever popen cannot give as a fresh process would (a preexec_fn, another command form) runs
through subprocess.Popen, and so does everything when SEGLOG_TEST_BROKER_START=exec (the
policy; `spawner` is the default).
"""
from __future__ import annotations

import atexit
import io
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading

WARM_MODULES = ("logcore.tools.cli",)
POLICY_ENV = "SEGLOG_TEST_BROKER_START"
_VOLATILE_ENV = ("PYTEST_CURRENT_TEST",)     # pytest changes it for every test phase
_MAX_MESSAGE = 1 << 20
_MAX_SPAWNERS = 3                            # idle ones beyond this are closed


def _policy() -> str:
    policy = os.environ.get(POLICY_ENV, "spawner")
    if policy not in ("spawner", "exec"):
        raise ValueError(f"{POLICY_ENV}={policy!r}: use spawner or exec")
    return policy


# ------------------------------------------------------------------ the test process's side

class SpawnedProcess:
    """A child of the spawner, driven like a subprocess.Popen."""

    def __init__(self, spawner: "_Spawner", pid: int, args: list[str], stdout):
        self._spawner = spawner
        self.pid = pid
        self.args = args
        self.stdout = stdout
        self.stdin = None
        self.stderr = None
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._spawner.exit_code(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            code = self._spawner.exit_code(self.pid, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = code
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Spawner:
    def __init__(self, env: dict[str, str]):
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._cwd = tempfile.mkdtemp(prefix="seglog-spawner-")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], env=env, cwd=self._cwd,
                                     stdin=subprocess.DEVNULL)
        theirs.close()
        self._lock = threading.Condition()
        self._spawned: dict[int, int | str] = {}     # request id -> pid, or the error text
        self._exits: dict[int, int] = {}             # pid -> exit code (Popen's convention)
        self._pids: list[int] = []                   # every child it started
        self._gone = False
        self._next = 0
        threading.Thread(target=self._read, name="broker-spawner-reader", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(_MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                with self._lock:
                    self._gone = True
                    self._lock.notify_all()
                return
            msg = json.loads(data)
            with self._lock:
                if msg["kind"] == "spawned":
                    self._spawned[msg["id"]] = msg["pid"] if "pid" in msg else msg["error"]
                else:
                    self._exits[msg["pid"]] = msg["code"]
                self._lock.notify_all()

    def alive(self) -> bool:
        return not self._gone and self.proc.poll() is None

    def idle(self) -> bool:
        """No child of it is still running (closing it would kill none)."""
        with self._lock:
            return all(pid in self._exits for pid in self._pids)

    def spawn(self, args: list[str], main_args: list[str], fds: list[int], cwd: str,
              env: dict[str, str], stdout) -> SpawnedProcess:
        with self._lock:
            self._next += 1
            request_id = self._next
        payload = json.dumps({"id": request_id, "argv": main_args, "cwd": cwd, "env": env}).encode()
        socket.send_fds(self._sock, [payload], fds)
        with self._lock:
            self._lock.wait_for(lambda: request_id in self._spawned or self._gone, timeout=60)
            answer = self._spawned.pop(request_id, None)
        if answer is None:
            raise RuntimeError("the broker spawner did not answer (it exited or hangs)")
        if isinstance(answer, str):
            raise OSError(f"the broker spawner could not start {args}: {answer}")
        with self._lock:
            self._pids.append(answer)
        return SpawnedProcess(self, answer, args, stdout)

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        with self._lock:
            self._lock.wait_for(lambda: pid in self._exits or self._gone, timeout=timeout)
            if pid in self._exits:
                return self._exits[pid]
            if not self._gone:
                return None
        # The spawner is gone (it SIGKILLs its children when it goes): no status to report.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return -signal.SIGKILL
        return None

    def close(self) -> None:
        # shutdown, not close alone: the reader thread's recv holds the socket open, and the
        # spawner would not see its end (it kills what it still runs and exits when it does)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


_SPAWNERS: dict[tuple, _Spawner] = {}
_SPAWNERS_LOCK = threading.Lock()


def _spawner_for(env: dict[str, str]) -> _Spawner:
    stable = {k: v for k, v in env.items() if k not in _VOLATILE_ENV}
    key = (sys.executable, tuple(sorted(stable.items())))
    with _SPAWNERS_LOCK:
        spawner = _SPAWNERS.get(key)
        if spawner is None or not spawner.alive():
            # each spawner holds an interpreter with the CLI imported: keep few of them
            for old_key, old in list(_SPAWNERS.items()):
                if len(_SPAWNERS) >= _MAX_SPAWNERS and old.idle():
                    old.close()
                    del _SPAWNERS[old_key]
            spawner = _SPAWNERS[key] = _Spawner(stable)
        return spawner


@atexit.register
def _close_all() -> None:
    with _SPAWNERS_LOCK:
        for spawner in _SPAWNERS.values():
            spawner.close()
        _SPAWNERS.clear()


def _fd(spec, default: int) -> tuple[int, object | None]:
    """The file descriptor a child gets for one stdio stream; the read end for PIPE."""
    if spec is None:
        return default, None
    if spec == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDWR), None
    if spec == subprocess.PIPE:
        r, w = os.pipe()
        return w, open(r, "rb")
    return (spec if isinstance(spec, int) else spec.fileno()), None


def popen(args: list[str], *, stdout=None, stderr=None, stdin=None, cwd=None, env=None,
          preexec_fn=None, text: bool = False):
    """subprocess.Popen(args, ...) for `[sys.executable, "-m", module, ...]` or
    `[sys.executable, "-c", code, ...]` through the spawner; anything else, or the exec policy,
    through subprocess.Popen itself."""
    env = dict(os.environ if env is None else env)
    if (_policy() == "exec" or preexec_fn is not None or len(args) < 3 or args[0] != sys.executable
            or args[1] not in ("-m", "-c") or stderr == subprocess.PIPE or stdin == subprocess.PIPE):
        return subprocess.Popen(args, stdout=stdout, stderr=stderr, stdin=stdin, cwd=cwd, env=env,
                                preexec_fn=preexec_fn, text=text)
    opened: list[int] = []
    in_fd, _ = _fd(stdin, 0)
    out_fd, out_reader = _fd(stdout, 1)
    if text and out_reader is not None:          # as Popen's text=True: decoded, universal newlines
        out_reader = io.TextIOWrapper(out_reader)
    if stderr == subprocess.STDOUT:
        err_fd = out_fd
    else:
        err_fd, _ = _fd(stderr, 2)
    for spec, fd in ((stdin, in_fd), (stdout, out_fd), (stderr, err_fd)):
        if spec in (subprocess.DEVNULL, subprocess.PIPE):
            opened.append(fd)
    try:
        return _spawner_for(env).spawn(list(args), list(args[1:]), [in_fd, out_fd, err_fd],
                                       os.path.abspath(cwd or os.getcwd()), env, out_reader)
    except BaseException:
        if out_reader is not None:
            out_reader.close()
        raise
    finally:
        for fd in opened:           # the child has its copies
            os.close(fd)


def run(args: list[str], *, input: str | bytes | None = None, cwd=None, env=None,
        timeout: float | None = None, text: bool = True) -> subprocess.CompletedProcess:
    """subprocess.run(args, input=input, capture_output=True, text=text, ...) through popen: a
    short CLI command (consume, repair...) without the interpreter's start-up and imports. The
    streams go through temporary files (popen gives no pipe for stdin or stderr); with
    text=False, input and the captured streams are bytes."""
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stdout, \
            tempfile.TemporaryFile() as stderr:
        if input is not None:
            stdin.write(input.encode() if text else input)
            stdin.seek(0)
        proc = popen(args, stdin=stdin if input is not None else subprocess.DEVNULL,
                     stdout=stdout, stderr=stderr, cwd=cwd, env=env)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        stdout.seek(0)
        stderr.seek(0)
        out, err = stdout.read(), stderr.read()
        if text:
            out, err = out.decode(errors="replace"), err.decode(errors="replace")
        return subprocess.CompletedProcess(args, code, out, err)


# ------------------------------------------------------------------ the spawner process

def _serve(sock_fd: int) -> dict | None:
    """The spawner's loop. Returns only in a forked child: the request it is to run."""
    sock = socket.socket(fileno=sock_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)

    def send(msg: dict) -> None:
        try:
            sock.send(json.dumps(msg).encode())
        except OSError:
            pass

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            send({"kind": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status)})

    while True:
        for key, _ in sel.select():
            if key.fileobj == wake_r:
                os.read(wake_r, 4096)
                reap()
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, 3)
            except OSError:
                data, fds = b"", []
            if not data:                     # the test process is gone: so are its brokers
                for pid in children:
                    try:
                        os.kill(pid, signal.SIGCONT)
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                os._exit(0)
            request = json.loads(data)
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as exc:
                send({"kind": "spawned", "id": request["id"], "error": str(exc)})
                for fd in fds:
                    os.close(fd)
                continue
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                sel.close()
                sock.close()
                os.close(wake_r)
                os.close(wake_w)
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                for fd in set(fds):
                    if fd > 2:
                        os.close(fd)
                return request
            children.add(pid)
            for fd in fds:
                os.close(fd)
            send({"kind": "spawned", "id": request["id"], "pid": pid})
            reap()


def _run_main(request: dict) -> None:
    """What `python -m MODULE ARGS` or `python -c CODE ARGS` does, in a forked child of the
    spawner."""
    import runpy
    import types
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    flag, target, *args = request["argv"]
    if flag == "-c":
        sys.path[0] = ""                     # python -c puts the working folder first, as ''
        sys.argv = ["-c", *args]
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(target, "<string>", "exec"), main.__dict__)
        return
    sys.path[0] = request["cwd"]             # python -m puts the working folder first
    sys.argv = [target, *args]               # runpy sets argv[0] to the module's file
    # As under `python -m`, the module runs as __main__ only (what it imports stays warm).
    sys.modules.pop(target, None)
    runpy.run_module(target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    import importlib
    sys.path[0] = os.getcwd()                # not this folder: the imports see what a broker's would
    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except BaseException:               # noqa: BLE001 - the child reports it as a fresh start would
            pass
    child_request = _serve(int(sys.argv[1]))
    _run_main(child_request)
