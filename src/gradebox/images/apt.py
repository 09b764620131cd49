"""The Debian mirror of this machine's own apt configuration (deb822 and sources.list):
the base image is bootstrapped from it, and no registry host name is ever written down."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from ..core import settings
from ..errors import ImageError

BASE_PACKAGES = ["ca-certificates"]


@dataclass(frozen=True)
class Mirror:
    uri: str
    suite: str


def apt_mirror(root: Path = Path("/")) -> Mirror:
    """The Debian mirror and suite this machine's apt uses (deb822 ``.sources`` or
    ``sources.list``). $GRADEBOX_APT_MIRROR / $GRADEBOX_APT_SUITE override it."""
    entries: list[tuple[str, str]] = []
    sources_d = root / "etc/apt/sources.list.d"
    for path in sorted(sources_d.glob("*.sources")) if sources_d.is_dir() else []:
        for stanza in path.read_text(errors="replace").split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if ":" in line and not line.lstrip().startswith("#"):
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
                for uri in fields.get("uris", "").split():
                    for suite in fields.get("suites", "").split():
                        entries.append((uri, suite))
    classic = [root / "etc/apt/sources.list", *sorted(sources_d.glob("*.list"))]
    for path in classic:
        if path.is_file():
            for line in path.read_text(errors="replace").splitlines():
                words = re.sub(r"\[[^]]*\]", "", line).split()
                if len(words) >= 3 and words[0] == "deb":
                    entries.append((words[1], words[2]))
    main = [(u, s) for u, s in entries if "-" not in s and "/" not in s]
    uri, suite = settings.current().apt_mirror, settings.current().apt_suite
    if main and not uri:
        uri = main[0][0]
    if main and not suite:
        suite = main[0][1]
    if not uri or not suite:
        raise ImageError(
            "no Debian mirror found in this machine's apt configuration "
            "(/etc/apt/sources.list*); set GRADEBOX_APT_MIRROR and GRADEBOX_APT_SUITE"
        )
    return Mirror(uri=uri.rstrip("/"), suite=suite)


def _base_inputs(mirror: Mirror) -> str:
    spec = f"debootstrap minbase {mirror.suite} {mirror.uri} {' '.join(BASE_PACKAGES)}"
    return "sha256:" + hashlib.sha256(spec.encode()).hexdigest()
