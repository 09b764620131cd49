"""The seccomp filter compiled once for crun (sandbox/seccomp_bpf.py): the same rules as the
profile, a private cache no one else can plant a filter in, and nothing loaded on a cached
start."""

from __future__ import annotations

import base64
import os
import shutil
import struct
import subprocess
import sys

import pytest

from gradebox.sandbox import seccomp, seccomp_bpf


@pytest.fixture(autouse=True)
def _libseccomp() -> None:
    """The filter is only ever used by crun, which links libseccomp: where crun is installed
    (``make`` installs it) or under CI=true, a libseccomp we cannot find is a failure, never a
    silent skip of every test below."""
    if seccomp_bpf._library_file() is not None:
        return
    why = "libseccomp not found where seccomp_bpf._library_file looks"
    if shutil.which("crun") or os.environ.get("CI", "").lower() == "true":
        pytest.fail(why + " (crun is installed, or CI=true: it must be)")
    pytest.skip(why + ", and no crun here")


_ALLOW_ALL = struct.pack("HBBI", 0x06, 0, 0, 0x7FFF0000)  # one instruction: RET ALLOW


def _fresh(monkeypatch):
    monkeypatch.setattr(seccomp_bpf, "_memo", {})


def test_the_filter_is_compiled_from_the_profile_and_cached(tmp_path, monkeypatch):
    _fresh(monkeypatch)
    profile = seccomp.seccomp_profile()
    data = base64.b64decode(seccomp_bpf.compiled(profile, str(tmp_path)))
    assert len(data) % 8 == 0 and len(data) > 8 * 50  # whole sock_filter entries, many rules
    assert data == seccomp_bpf.compile_profile(profile)
    (cached,) = tmp_path.iterdir()
    assert cached.read_bytes() == data and (cached.stat().st_mode & 0o022) == 0
    # Another profile is another file: the name follows the rules.
    _fresh(monkeypatch)
    other = {**profile, "defaultErrnoRet": 38}
    seccomp_bpf.compiled(other, str(tmp_path))
    assert len(list(tmp_path.iterdir())) == 2


def test_a_filter_planted_in_the_cache_by_a_link_or_another_user_is_not_used(tmp_path, monkeypatch):
    _fresh(monkeypatch)
    profile = seccomp.seccomp_profile()
    real = base64.b64decode(seccomp_bpf.compiled(profile, str(tmp_path)))
    (cached,) = tmp_path.iterdir()
    planted = tmp_path / "planted"
    planted.write_bytes(_ALLOW_ALL)
    cached.unlink()
    cached.symlink_to(planted)  # a link: O_NOFOLLOW
    _fresh(monkeypatch)
    assert base64.b64decode(seccomp_bpf.compiled(profile, str(tmp_path))) == real
    if os.geteuid() == 0:  # a file of another uid, where root can make one
        cached.unlink()
        cached.write_bytes(_ALLOW_ALL)
        os.chown(cached, 65534, 65534)
        _fresh(monkeypatch)
        assert base64.b64decode(seccomp_bpf.compiled(profile, str(tmp_path))) == real


def test_a_cached_start_loads_no_ctypes_nor_a_hash_library(tmp_path):
    code = (
        "import sys\n"
        "from gradebox.sandbox import seccomp, seccomp_bpf\n"
        f"assert seccomp_bpf.compiled(seccomp.seccomp_profile(), {str(tmp_path)!r})\n"
        "print(sorted(m for m in ('ctypes', 'hashlib', 'tempfile') if m in sys.modules))\n"
    )
    run = [sys.executable, "-c", code]
    subprocess.run(run, check=True, capture_output=True)  # compiles, fills the cache
    out = subprocess.run(run, check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


_ON_A_FULL_DISK = """
import base64, os, resource, signal, sys
from gradebox.sandbox import seccomp, seccomp_bpf
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, not the process
resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.RLIM_INFINITY))
got = seccomp_bpf.compiled(seccomp.seccomp_profile(), sys.argv[1])
print(len(base64.b64decode(got)) if got else 0)
"""


def test_a_filter_the_cache_cannot_take_leaves_no_partial_file(tmp_path):
    # The disk refuses the filter part-way (a file-size limit, as a full disk would): the
    # filter is still used, and nothing half-written stays in the cache for good.
    cache = tmp_path / "seccomp"
    done = subprocess.run([sys.executable, "-c", _ON_A_FULL_DISK, str(cache)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 8 * 50  # compiled and returned whole
    assert list(cache.iterdir()) == []
