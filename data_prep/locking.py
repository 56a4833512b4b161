"""One writer per output: a lock that every command takes on its output before writing it.

Two runs that write the same output at the same time (a second ``mine`` started on the folder of a
running one, a rerun while a killed-looking run is still going) would interleave shards, replace
each other's files, or merge a half set: the second one is refused instead, with a message that
names the first (pid, host, start time, command line).

The lock file is always the sibling ``<output>.lock`` of the output, whether the output is a file
(``scores.jsonl`` -> ``scores.jsonl.lock``) or a folder (``outputs/mined/nq`` ->
``outputs/mined/nq.lock``): beside a folder rather than inside it, so that it survives the
commands that build a folder elsewhere and rename it into place (``pipeline index
--overwrite``, training exports). It is locked with ``fcntl.flock(LOCK_EX | LOCK_NB)``, which the
kernel releases when the holder dies, however it dies (``kill -9``, out of memory): a lock is
never left stuck. While held, the file holds the holder's JSON (``pid``, ``host``, ``started``,
``argv``); it is truncated to 0 bytes on release and kept (removing it would race with a process
that has opened it but not locked it yet). A holder that died without releasing leaves its JSON
behind: the next run takes the lock over with a warning naming it.

The lock is re-entrant within a process (a command whose library function locks the same output
again, e.g. ``mine`` and :func:`data_prep.mining.run_mining`): flock locks belong to an open file
description, so a second ``open`` in the same process would otherwise refuse itself. It is a lock
between processes: the threads of one process share it. A process forked while holding it does not
hold it (the child closes its copies at fork), and never releases its parent's lock.

On a filesystem without ``flock`` support (``ENOLCK``/``EOPNOTSUPP``), the command runs unlocked,
with a warning.
"""

from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import functools
import inspect
import json
import logging
import os
import shlex
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

LOCK_SUFFIX = ".lock"
#: how long a refused process waits for a holder that has the lock but has not written its info yet
INFO_WAIT_S = 1.0
#: the command line in a refusal message is cut to this many characters
MAX_COMMAND_CHARS = 300
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class OutputLockedError(ValueError):
    """The output is being written by another process (a ``ValueError``: every command maps it to
    exit code 2 with its message)."""

    def __init__(self, output: str | os.PathLike, what: str, lock_file: Path, holder: dict[str, Any] | None):
        self.output = str(output)
        self.lock_file = lock_file
        self.holder = holder
        super().__init__(
            f"{what} {output} is being written by another process ({describe_holder(holder, lock_file)}); "
            "wait for it to finish, or choose another output"
        )


def lock_path(output: str | os.PathLike) -> Path:
    """The lock file of ``output``: its sibling ``<output>.lock`` (for a file or a folder alike).

    The parent folder is resolved (symbolic links followed), so two spellings of one output share a
    lock file."""
    p = Path(os.path.abspath(os.fspath(output)))
    if not p.name:
        raise ValueError(f"cannot lock {output}: an output is a file or a folder below the root")
    return p.parent.resolve() / f"{p.name}{LOCK_SUFFIX}"


def describe_holder(holder: dict[str, Any] | None, lock_file: Path | None = None) -> str:
    """``pid 1234 on host h, started 2026-12-07T05:30:00Z: python -m data_prep mine ...``."""
    if not holder:
        return f"its details are not written yet: see {lock_file}" if lock_file else "details unknown"
    text = f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, started {holder.get('started', '?')}"
    argv = holder.get("argv")
    if isinstance(argv, list) and argv:
        shown = [os.path.basename(str(argv[0]))] + [str(a) for a in argv[1:]]
        command = shlex.join(shown)
        if len(command) > MAX_COMMAND_CHARS:
            command = command[: MAX_COMMAND_CHARS - 3] + "..."
        text += f": {command}"
    return text


def holder_info(lock_file: str | os.PathLike) -> dict[str, Any] | None:
    """The JSON a holder wrote into ``lock_file`` (``None`` when it is empty, absent or unreadable)."""
    try:
        with open(lock_file, "rb") as f:
            return _parse(f.read())
    except OSError:
        return None


def _parse(data: bytes) -> dict[str, Any] | None:
    if not data.strip():
        return None
    try:
        info = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {"pid": "?", "host": "?", "started": "?", "note": "unreadable lock file content"}
    return info if isinstance(info, dict) else None


def _read_fd(fd: int) -> bytes:
    chunks, offset = [], 0
    while True:
        b = os.pread(fd, 1 << 16, offset)
        if not b:
            return b"".join(chunks)
        chunks.append(b)
        offset += len(b)


def _my_info(output: str | os.PathLike, what: str) -> dict[str, Any]:
    started = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": started, "argv": argv,
            "output": str(output), "what": what}


@dataclass
class _Held:
    fd: int | None  # None: held without a real lock (the filesystem does not support flock)
    pid: int
    count: int = 1


_HELD: dict[str, _Held] = {}
_GUARD = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child does not hold its parent's locks: close its copies (closing never releases
    the parent's lock, which still has its own descriptor) and forget them."""
    global _GUARD
    _GUARD = threading.Lock()
    for held in _HELD.values():
        if held.fd is not None:
            try:
                os.close(held.fd)
            except OSError:
                pass
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class OutputLock:
    """``with OutputLock(output, what="output"):`` - hold ``<output>.lock`` while writing ``output``.

    Raises :class:`OutputLockedError` when another process holds it, and a ``ValueError`` naming
    the lock file when it cannot be created (a read-only folder). ``what`` names the output in
    messages (``"mining output"``, ``"scores"``). Re-entrant within a process; also usable as
    :meth:`acquire` / :meth:`release`.
    """

    def __init__(self, output: str | os.PathLike, what: str = "output"):
        self.output = output
        self.what = what
        self.lock_file = lock_path(output)
        self._key = str(self.lock_file)
        self._acquired = False

    def acquire(self) -> "OutputLock":
        if self._acquired:
            raise RuntimeError(f"this OutputLock of {self.output} is already acquired")
        with _GUARD:
            held = _HELD.get(self._key)
            if held is not None and held.pid == os.getpid():
                held.count += 1
            else:
                _HELD[self._key] = _Held(self._lock(), os.getpid())
        self._acquired = True
        return self

    def _lock(self) -> int | None:
        try:
            self.lock_file.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o644)  # no O_TRUNC: the holder's info stays
        except OSError as e:  # a read-only or missing location: the output could not be written either
            raise ValueError(f"cannot lock {self.what} {self.output}: cannot create {self.lock_file} "
                             f"({e.strerror or e})") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise OutputLockedError(self.output, self.what, self.lock_file, self._holder(fd)) from None
            except OSError as e:
                if e.errno not in _UNSUPPORTED:
                    raise
                logger.warning("cannot lock %s (%s): the filesystem does not support flock; running without the "
                               "one-writer check of %s", self.lock_file, e.strerror, self.output)
                os.close(fd)
                return None
            previous = _parse(_read_fd(fd))
            if previous is not None:
                logger.warning("taking over the lock of %s: its holder (%s) is no longer running",
                               self.output, describe_holder(previous))
            data = json.dumps(_my_info(self.output, self.what), ensure_ascii=False).encode("utf-8")
            os.ftruncate(fd, 0)
            os.pwrite(fd, data + b"\n", 0)
            os.fsync(fd)
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _holder(self, fd: int) -> dict[str, Any] | None:
        """The holder's info; a holder that has just taken the lock may not have written it yet."""
        deadline = time.monotonic() + INFO_WAIT_S
        while True:
            info = _parse(_read_fd(fd))
            if info is not None or time.monotonic() >= deadline:
                return info
            time.sleep(0.05)

    def release(self) -> None:
        if not self._acquired:
            return
        self._acquired = False
        with _GUARD:
            held = _HELD.get(self._key)
            if held is None or held.pid != os.getpid():  # forked after acquiring: the parent's to release
                return
            held.count -= 1
            if held.count > 0:
                return
            del _HELD[self._key]
            if held.fd is None:
                return
            try:
                os.ftruncate(held.fd, 0)
                fcntl.flock(held.fd, fcntl.LOCK_UN)
            finally:
                os.close(held.fd)

    @property
    def held(self) -> bool:
        return self._acquired

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def locks_output(param: str | Callable[[dict[str, Any]], Any], what: str = "output") -> Callable[[F], F]:
    """Decorator: the call holds :class:`OutputLock` on one of its arguments.

    ``param`` names the argument (``"out_dir"``) or an attribute of one (``"args.output"``,
    ``"cfg.output"``), or is a function of the bound arguments (a dict) that returns the output to
    lock; an output that is ``None`` means no output, and no lock.
    """
    name, _, attrs = param.partition(".") if isinstance(param, str) else ("", "", "")

    def deco(fn: F) -> F:
        sig = inspect.signature(fn)
        if isinstance(param, str) and name not in sig.parameters:
            raise TypeError(f"locks_output({param!r}): {fn.__qualname__} has no argument {name!r}")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            if callable(param):
                value = param(bound.arguments)
            else:
                value = bound.arguments[name]
                for a in attrs.split(".") if attrs else ():
                    value = getattr(value, a)
            if value is None:
                return fn(*args, **kwargs)
            with OutputLock(value, what):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return deco
