"""gradebox as a user gets it from ``pip install``: the wheel built from this checkout, installed
into a fresh virtualenv outside it. No index is reached: the wheel is built without build
isolation (setuptools is in the dev extra), and the fresh venv finds gradebox's dependencies
in this venv's site-packages through a ``.pth`` file, as ``tests/docker/test_nonroot.py``
gives the test user our packages.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What a build reads; the rest of the checkout (.venv, .git, tests, runs) is never sent.
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "src", "images")


def build_wheel(where: Path) -> Path:
    """The wheel of a copy of this checkout's sources (an in-tree build would leave build/
    and egg-info in the checkout, and read what is not committed: the user's lock)."""
    tree = where / "source"
    tree.mkdir(parents=True)
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            # Links kept: images/python/gradebox/sdk.py points into src/, copied alongside.
            shutil.copytree(source, tree / name, symlinks=True, ignore=shutil.ignore_patterns(
                "__pycache__", "*.egg-info", "images.lock.json"))  # fmt: skip
        else:
            shutil.copy2(source, tree / name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(where / "dist"), str(tree)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"pip wheel failed:\n{done.stdout}{done.stderr}"
    (wheel,) = (where / "dist").glob("gradebox-*.whl")
    return wheel


def install(wheel: Path, venv: Path) -> Path:
    """A fresh venv at ``venv`` with ``wheel`` installed as pip installs it (entry script,
    bytecode compiled); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # The dependencies, after the venv's own packages: its gradebox is the wheel's.
    (Path(purelib) / "gradebox-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"pip install failed:\n{done.stdout}{done.stderr}"
    return python
