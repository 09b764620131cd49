"""The execute-only copy of tini in the user's cache (sandbox/init.py), written whole or not
at all."""

from __future__ import annotations

import os
import subprocess
import sys

_INIT_ON_A_FULL_DISK = """
import os, resource, signal, sys
from pathlib import Path
from gradebox.sandbox.init import sealed_init
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
source = Path(sys.argv[1])
source.write_bytes(b"\\x7fELF" + b"x" * 100_000)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
print(sealed_init(source))
"""


def test_a_sealed_init_the_cache_cannot_take_leaves_no_partial_file(tmp_path):
    # The execute-only copy of tini in the cache, written on a disk that refuses it part-way:
    # the run falls back to the plain init (None), and no partial copy stays behind (one per
    # process and thread, each up to the binary's size, on every start).
    cache = tmp_path / "cache"
    env = {**os.environ, "GRADEBOX_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", _INIT_ON_A_FULL_DISK, str(tmp_path / "tini")],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
    assert [p.name for p in (cache / "init").iterdir()] == []
