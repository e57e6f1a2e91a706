"""MUNGE credentials: encode one (the CLI) and decode one (the service), via libmunge or the
`munge` / `unmunge` commands.

MUNGE is how a Slurm site already proves "this request comes from uid N on a host of the
cluster": the local `munged` signs a credential with the cluster's shared key, and the
`munged` of the host that decodes it checks the signature, the time to live and that it
has not been decoded before (replay). Nothing here keeps state; the replay cache is
munged's.

Two backends, same results: `LibMunge` (ctypes on libmunge.so.2, the library `munge` and
`unmunge` are built on) and `MungeCommands` (the commands as subprocesses). The library
is ~20x faster per credential (decode: median 0.07 ms against 1.4 ms, no process start;
`bench/bench_munge.py`), so `default_munge()` takes it when it loads, else the commands,
else None (no MUNGE here).

A credential's payload is the request it was made for (`request_payload`: method, path,
query, body digest), so a captured credential is good for no other request, even before
munged has seen it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import re
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum
from typing import Protocol

PAYLOAD_PREFIX = "jpushare-v1"
MAX_CREDENTIAL_CHARS = 4096  # a credential with a short payload is ~150-250 characters
COMMAND_TIMEOUT_S = 10.0


class MungeStatus(IntEnum):
    """libmunge's `munge_err_t` (also `unmunge`'s exit status)."""

    SUCCESS = 0
    SNAFU = 1
    BAD_ARG = 2
    BAD_LENGTH = 3
    OVERFLOW = 4
    NO_MEMORY = 5
    SOCKET = 6
    TIMEOUT = 7
    BAD_CRED = 8
    BAD_VERSION = 9
    BAD_CIPHER = 10
    BAD_MAC = 11
    BAD_ZIP = 12
    BAD_REALM = 13
    CRED_INVALID = 14
    CRED_EXPIRED = 15
    CRED_REWOUND = 16
    CRED_REPLAYED = 17
    CRED_UNAUTHORIZED = 18


# The statuses that mean "munged could not be asked" rather than "the credential is bad".
UNAVAILABLE_STATUSES = frozenset(
    {MungeStatus.SOCKET, MungeStatus.TIMEOUT, MungeStatus.NO_MEMORY, MungeStatus.SNAFU}
)


class MungeError(Exception):
    """MUNGE said no; `status` is munged's reason (or SOCKET when it could not be asked)."""

    def __init__(self, status: MungeStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Decoded:
    """A credential munged accepted: who made it, when, and for what."""

    uid: int
    gid: int
    encoded_at: datetime  # aware UTC, the encoding host's clock
    payload: bytes


class Munge(Protocol):
    def encode(self, payload: bytes, ttl_s: int | None = None) -> str: ...

    def decode(self, credential: str) -> Decoded: ...


def request_payload(method: str, path: str, query: str = "", body: bytes = b"") -> bytes:
    """What a request's credential carries: the method, the path with its query string and
    the SHA-256 of the body (`jpushare-v1 POST /v1/jobs sha256=…`), so that a credential
    captured on its way cannot carry another job, even before munged has seen it."""
    target = f"{path}?{query}" if query else path
    digest = hashlib.sha256(body).hexdigest()
    return f"{PAYLOAD_PREFIX} {method.upper()} {target} sha256={digest}".encode()


# --- libmunge through ctypes ----------------------------------------------------------------

_MUNGE_OPT_TTL = 4
_MUNGE_OPT_ENCODE_TIME = 6


class LibMunge:
    """libmunge.so.2 through ctypes: one call to munged per credential, no process."""

    def __init__(self, path: str | None = None) -> None:
        name = path or ctypes.util.find_library("munge") or "libmunge.so.2"
        lib = ctypes.CDLL(name)  # OSError if missing
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        lib.munge_encode.argtypes = [
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int,
        ]
        lib.munge_encode.restype = ctypes.c_int
        lib.munge_decode.argtypes = [
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_int),
            ctypes.POINTER(ctypes.c_uint32),
            ctypes.POINTER(ctypes.c_uint32),
        ]
        lib.munge_decode.restype = ctypes.c_int
        lib.munge_ctx_create.restype = ctypes.c_void_p
        lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
        lib.munge_ctx_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        lib.munge_ctx_get.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        lib.munge_strerror.argtypes = [ctypes.c_int]
        lib.munge_strerror.restype = ctypes.c_char_p
        libc.free.argtypes = [ctypes.c_void_p]
        self._lib = lib
        self._free = libc.free

    def _error(self, code: int) -> MungeError:
        text = self._lib.munge_strerror(code) or b"unknown error"
        try:
            status = MungeStatus(code)
        except ValueError:
            status = MungeStatus.SNAFU
        return MungeError(status, text.decode(errors="replace"))

    def encode(self, payload: bytes, ttl_s: int | None = None) -> str:
        ctx = self._lib.munge_ctx_create()
        if not ctx:
            raise MungeError(MungeStatus.NO_MEMORY, "munge_ctx_create failed")
        try:
            if ttl_s is not None:
                self._lib.munge_ctx_set(ctx, _MUNGE_OPT_TTL, ttl_s)
            out = ctypes.c_char_p()
            code = self._lib.munge_encode(ctypes.byref(out), ctx, payload, len(payload))
            if code != MungeStatus.SUCCESS:
                raise self._error(code)
            value = ctypes.cast(out, ctypes.c_void_p).value
            try:
                return (out.value or b"").decode("ascii")
            finally:
                self._free(value)
        finally:
            self._lib.munge_ctx_destroy(ctx)

    def decode(self, credential: str) -> Decoded:
        raw = _checked(credential).encode("ascii")
        ctx = self._lib.munge_ctx_create()
        if not ctx:
            raise MungeError(MungeStatus.NO_MEMORY, "munge_ctx_create failed")
        buf = ctypes.c_void_p()
        length = ctypes.c_int()
        uid = ctypes.c_uint32()
        gid = ctypes.c_uint32()
        try:
            code = self._lib.munge_decode(
                raw, ctx, ctypes.byref(buf), ctypes.byref(length), ctypes.byref(uid),
                ctypes.byref(gid),
            )  # fmt: skip
            try:
                if code != MungeStatus.SUCCESS:
                    raise self._error(code)
                payload = ctypes.string_at(buf.value, length.value) if buf.value else b""
            finally:
                if buf.value:
                    self._free(buf.value)
            encoded = ctypes.c_long()
            self._lib.munge_ctx_get(ctx, _MUNGE_OPT_ENCODE_TIME, ctypes.byref(encoded))
        finally:
            self._lib.munge_ctx_destroy(ctx)
        return Decoded(uid.value, gid.value, datetime.fromtimestamp(encoded.value, UTC), payload)


# --- the munge / unmunge commands -------------------------------------------------------------

_FIELD = re.compile(r"^([A-Z_]+):\s*(.*)$")
# libmunge's own words (munge_strerror) for what `unmunge --numeric` reports as a number.
_MESSAGES = {
    MungeStatus.BAD_CRED: "Invalid credential format",
    MungeStatus.CRED_INVALID: "Invalid credential",
    MungeStatus.CRED_EXPIRED: "Expired credential",
    MungeStatus.CRED_REWOUND: "Rewound credential",
    MungeStatus.CRED_REPLAYED: "Replayed credential",
    MungeStatus.CRED_UNAUTHORIZED: "Unauthorized credential",
}


class MungeCommands:
    """`munge` and `unmunge` as subprocesses (for hosts without libmunge's shared object)."""

    def __init__(self, munge: str = "munge", unmunge: str = "unmunge") -> None:
        self.munge = munge
        self.unmunge = unmunge

    def encode(self, payload: bytes, ttl_s: int | None = None) -> str:
        args = [self.munge, "--input", "-"]
        if ttl_s is not None:
            args += ["--ttl", str(ttl_s)]
        done = _run(args, payload)
        if done.returncode != 0:
            raise MungeError(_status(done.returncode), _stderr(done) or "munge failed")
        return done.stdout.decode("ascii").strip()

    def decode(self, credential: str) -> Decoded:
        raw = _checked(credential).encode("ascii")
        # --numeric: ids and times as numbers; metadata, a blank line, then the payload.
        done = _run([self.unmunge, "--numeric"], raw)
        if done.returncode != 0:
            status = _status(done.returncode)
            raise MungeError(status, _MESSAGES.get(status) or _stderr(done) or status.name)
        head, sep, payload = done.stdout.partition(b"\n\n")
        if not sep:
            raise MungeError(MungeStatus.SNAFU, "unmunge printed no metadata")
        fields: dict[str, str] = {}
        for line in head.decode(errors="replace").splitlines():
            m = _FIELD.match(line)
            if m:
                fields[m.group(1)] = m.group(2).strip()
        try:
            uid = int(fields["UID"].split()[0])
            gid = int(fields["GID"].split()[0])
            encoded = int(fields["ENCODE_TIME"])
        except (KeyError, IndexError, ValueError) as exc:
            raise MungeError(
                MungeStatus.SNAFU, f"unmunge's metadata was unreadable: {exc}"
            ) from exc
        return Decoded(uid, gid, datetime.fromtimestamp(encoded, UTC), payload)


def _run(args: list[str], stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            args, input=stdin, capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MungeError(MungeStatus.SOCKET, f"{args[0]} could not run: {exc}") from exc


def _status(code: int) -> MungeStatus:
    try:
        return MungeStatus(code)
    except ValueError:
        return MungeStatus.SNAFU


def _stderr(done: subprocess.CompletedProcess[bytes]) -> str:
    text = done.stderr.decode(errors="replace").strip().splitlines()
    return text[-1].removeprefix("unmunge: ").removeprefix("munge: ") if text else ""


def _checked(credential: str) -> str:
    """Refuse what cannot be a credential before munged sees it (size, characters)."""
    credential = credential.strip()
    if (
        not credential
        or len(credential) > MAX_CREDENTIAL_CHARS
        or not credential.isascii()
        or not credential.isprintable()
    ):
        raise MungeError(MungeStatus.BAD_CRED, "not a MUNGE credential")
    return credential


def default_munge() -> Munge | None:
    """libmunge if it loads, else the commands if they are on PATH, else None."""
    try:
        return LibMunge()
    except (OSError, AttributeError):
        pass
    if shutil.which("munge") and shutil.which("unmunge"):
        return MungeCommands()
    return None
