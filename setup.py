"""The one build step pyproject.toml cannot declare: the image definitions go into the wheel.

Their one copy is the repository's ``images/`` folder (the Dockerfiles, the PyPI pins, and links
to the ``gradebox.sdk`` and ``gradebox.verify`` files the images carry). A wheel holds them as
package data in ``gradebox/images/definitions/``, which an installed gradebox reads through
importlib.resources (``images.catalog.images_dir``): ``pip install gradebox`` can then build
its images. Copied here rather than mapped with ``package-dir``: a package mapped from outside
``src/`` turns every editable install into one served by an import hook, where now it is a
plain path on ``sys.path``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable install reads the checkout's images/ itself
        target = Path(self.build_lib) / "gradebox" / "images" / "definitions"
        shutil.rmtree(target, ignore_errors=True)
        # Links are followed (the sdk is a link into src/), so the wheel holds the same bytes
        # and each image's input hash is the checkout's. The user's lock is no definition.
        shutil.copytree(
            ROOT / "images",
            target,
            ignore=shutil.ignore_patterns("images.lock.json", "__pycache__", "*.pyc"),
        )


setup(cmdclass={"build_py": BuildPy})
