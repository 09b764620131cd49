"""The seccomp profile compiled to the kernel's filter once, for runtimes that take it so.

crun compiles ``linux.seccomp`` with libseccomp on every container start (~1.8 ms here);
given the annotation ``run.oci.seccomp_bpf_data`` (the filter, base64), it loads that
instead and never reads the profile. ``compiled`` makes that filter from the very profile
``seccomp.seccomp_profile`` returns (the one source of the rules), with the same libseccomp
crun links, through ctypes: the rules are added as crun adds them (each name resolved on
this machine, unknown names skipped; ``value``/``valueTwo`` as libseccomp's ``datum_a``/
``datum_b``), then ``seccomp_export_bpf``.

The filter is kept in the user's private cache (``<cache>/seccomp/``, a ``PrivateCache``:
a folder or file another user could write is a miss), named by the hash of the profile,
libseccomp's version and the machine: only someone who can already run code as this user
could change it (the same trust as Python's bytecode), and a changed profile is a new name.
None where libseccomp cannot be loaded: the runtime then compiles the profile.
"""

from __future__ import annotations

import binascii  # base64's own codec, without the module (and struct) around it
import json
import os
from pathlib import Path

from ..core.private_cache import PrivateCache

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["ANNOTATION", "compiled"]

ANNOTATION = "run.oci.seccomp_bpf_data"

_ACTIONS = {"SCMP_ACT_KILL": 0x00000000, "SCMP_ACT_KILL_PROCESS": 0x80000000,
            "SCMP_ACT_TRAP": 0x00030000, "SCMP_ACT_ALLOW": 0x7FFF0000,
            "SCMP_ACT_LOG": 0x7FFC0000}  # fmt: skip
_ERRNO, _TRACE = 0x00050000, 0x7FF00000
_OPS = {"SCMP_CMP_NE": 1, "SCMP_CMP_LT": 2, "SCMP_CMP_LE": 3, "SCMP_CMP_EQ": 4,
        "SCMP_CMP_GE": 5, "SCMP_CMP_GT": 6, "SCMP_CMP_MASKED_EQ": 7}  # fmt: skip
_ARCHES = {"SCMP_ARCH_X86_64": 0xC000003E, "SCMP_ARCH_AARCH64": 0xC00000B7}


def _action(rule: dict[str, Any], key: str, errno_key: str, default_errno: int = 1) -> int:
    name = rule[key]
    if name == "SCMP_ACT_ERRNO":
        return _ERRNO | (int(rule.get(errno_key, default_errno)) & 0xFFFF)
    if name == "SCMP_ACT_TRACE":
        return _TRACE | (int(rule.get(errno_key, 0)) & 0xFFFF)
    return _ACTIONS[name]


def _lib(found: str | None = None) -> Any:
    """libseccomp through ctypes (loaded only to compile: never on a cached start)."""
    import ctypes  # lazy: ctypes (~2.5 ms) only to compile, never on a cached start

    class ArgCmp(ctypes.Structure):
        _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                    ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]  # fmt: skip

    lib = ctypes.CDLL(found or _library_file() or "libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_arch_native.restype = ctypes.c_uint32
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(ArgCmp),
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.ArgCmp = ArgCmp
    return lib


def compile_profile(profile: dict[str, Any], lib: Any = None) -> bytes:
    """The classic-BPF program (``struct sock_filter[]``) for an OCI seccomp profile."""
    lib = lib or _lib()
    default = _action(profile, "defaultAction", "defaultErrnoRet")
    ctx = lib.seccomp_init(default)
    if not ctx:
        raise OSError("seccomp_init failed")
    try:
        native = lib.seccomp_arch_native()
        for arch in profile.get("architectures", ()):
            token = _ARCHES[arch]
            if token != native:
                rc = lib.seccomp_arch_add(ctx, token)
                if rc not in (0, -17):  # -EEXIST: there already
                    raise OSError(-rc, f"seccomp_arch_add({arch})")
        for rule in profile.get("syscalls", ()):
            action = _action(rule, "action", "errnoRet")
            if action == default:  # what the default does already (runc and crun skip it)
                continue
            args = rule.get("args") or []
            array = (lib.ArgCmp * max(1, len(args)))()
            for i, arg in enumerate(args):
                array[i] = lib.ArgCmp(
                    arg["index"], _OPS[arg["op"]], arg["value"], arg.get("valueTwo", 0)
                )
            for name in rule["names"]:
                nr = lib.seccomp_syscall_resolve_name(name.encode())
                if nr < 0:  # a call this machine's libseccomp does not know: crun skips it
                    continue
                rc = lib.seccomp_rule_add_array(ctx, action, nr, len(args), array)
                if rc != 0:
                    raise OSError(-rc, f"seccomp_rule_add({name})")
        r, w = os.pipe()
        try:
            rc = lib.seccomp_export_bpf(ctx, w)
            os.close(w)
            w = -1
            if rc != 0:
                raise OSError(-rc, "seccomp_export_bpf")
            chunks = []
            while chunk := os.read(r, 1 << 16):
                chunks.append(chunk)
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
        return b"".join(chunks)
    finally:
        lib.seccomp_release(ctx)


_memo: dict[str, str | None] = {}


def compiled(profile: dict[str, Any], cache: str | None = None) -> str | None:
    """The profile's filter as the annotation takes it (base64), from the private cache or
    compiled once; None where libseccomp is not there (the runtime compiles the profile).

    On the hot path of every crun start: the cache is found without loading libseccomp
    (named by the library file's identity, not by asking it its version), ctypes or a
    hashing library (the profile's checksums, zlib's: the key only tells our own profiles
    apart, in the user's own cache)."""
    text = json.dumps(profile, sort_keys=True, separators=(",", ":"))
    if text in _memo:
        return _memo[text]
    found = _library_file()
    if found is None:
        _memo[text] = None
        return None
    import zlib  # lazy: only to compile, never on a cached start

    try:
        st = os.stat(found)
    except OSError:
        _memo[text] = None
        return None
    body = text.encode()
    ident = f"{found}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{os.uname().machine}"
    key = f"{zlib.crc32(body):08x}{zlib.adler32(body):08x}{len(body):x}-" + (
        f"{zlib.crc32(ident.encode()):08x}"
    )
    path = os.path.join(cache, key + ".bpf") if cache else None
    data = _read(path) if path else None
    if data is None:
        try:
            data = compile_profile(profile, _lib(found))
        except (OSError, KeyError, ValueError, AttributeError):
            _memo[text] = None
            return None
        if path:
            _write(path, data)
    _memo[text] = binascii.b2a_base64(data, newline=False).decode()
    return _memo[text]


_TRIPLETS = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}


def _library_file() -> str | None:
    """libseccomp's file, where the distribution puts it, found with a few ``stat`` calls;
    ``ctypes.util.find_library`` (which forks ``ldconfig -p``) only where it is elsewhere."""
    triplet = _TRIPLETS.get(os.uname().machine, "")
    for folder in (
        f"/usr/lib/{triplet}",
        f"/lib/{triplet}",
        "/usr/lib64",
        "/lib64",
        "/usr/lib",
        "/lib",
    ):
        path = os.path.join(folder, "libseccomp.so.2")
        if os.path.exists(path):
            return os.path.realpath(path)
    import ctypes.util  # lazy: ~8 ms, only where libseccomp is not in a usual folder

    name = ctypes.util.find_library("seccomp")
    return name if name and os.path.isabs(name) else None


def _cache(path: str) -> tuple[PrivateCache, str]:
    """The private cache an entry's path names, and the entry's name in it."""
    folder, name = os.path.split(path)
    return PrivateCache(os.path.basename(folder), Path(os.path.dirname(folder))), name


def _read(path: str) -> bytes | None:
    # PrivateCache's rule: a folder or a file another user could write is a miss, not a
    # filter (one that allows every call would be loaded as ours).
    cache, name = _cache(path)
    data = cache.read(name)
    return data if data and len(data) % 8 == 0 else None  # whole sock_filter entries


def _write(path: str, data: bytes) -> None:
    cache, name = _cache(path)
    cache.write(name, data)  # whole or not at all, and only into a private folder
