#!/usr/bin/env python3
"""Run named test subsets inside a Debian 12 guest booted on pure cgroup v2 (docs/guest.md).

Builds (once, cached) a Debian 12 disk image from Debian's packages with mmdebstrap, from the
mirror in this machine's apt configuration; boots it under qemu's TCG (no KVM) with no network
device at all; shares with it, over 9p, the checkout (tracked and untracked files of the
working tree), a wheelhouse of the project's dependencies and the locked images
(`gradebox images save`); inside, installs offline, loads the images and runs each subset on
every isolated backend and runtime; writes the counts to gradebox-runs/guest/results.md (and
results.json, and every log and junit file beside them).

Exit codes: 0 every subset passed; 1 a subset failed (or ran out of time); 2 the harness
itself failed (build, boot, install, images); 77 skipped: this machine cannot run the guest
(the one line printed says why). Standard library only: runs before any venv exists.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

SCRIPT_VERSION = 1  # bump to rebuild every cached image
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SUITE = "bookworm"

# What the guest needs: a booting systemd with logind (PAM sessions), Docker (with AppArmor, or
# it refuses to start containers), both OCI runtimes, the ids a rootless user maps, and Python
# 3.11 (Debian 12's, the host's version) with venv. Nothing for the browser or Ray tests.
PACKAGES = [
    "linux-image-amd64", "systemd", "systemd-sysv", "udev", "kmod", "dbus", "dbus-user-session",
    "libpam-systemd", "docker.io", "apparmor", "crun", "runc", "tini", "uidmap", "python3",
    "python3-venv", "git", "iproute2", "ca-certificates", "util-linux", "procps", "passwd",
    "login", "e2fsprogs", "iptables",
]  # fmt: skip
# The guest's kernel command line: pure cgroup v2, the console on the serial port (a file here).
CMDLINE = ("root=/dev/vda rw console=ttyS0,115200 systemd.unified_cgroup_hierarchy=1 "
           "panic=10 systemd.show_status=1 net.ifnames=0")  # fmt: skip

# name -> what it runs (inside.sh says how). Per pytest subset, each backend is a parameter of
# the `sandbox` fixture (tests/conftest.py): docker, oci (the runtime `auto` picks: crun),
# oci-runc. The quickstart runs once per backend and runtime.
SUBSETS = {
    "conformance": "pytest tests/docker/test_conformance.py (docker, oci/crun, oci-runc)",
    "adversarial": "pytest tests/docker/test_adversarial.py (the attack battery, every backend)",
    "faults": "pytest tests/docker/test_faults.py",
    "runtimes": "pytest tests/docker/test_runtimes.py",
    "slots": "pytest tests/docker/test_slots.py (skips on v2, saying so) and test_cgroups.py (its "
    "v2 counterpart), with their unit tests",
    "nonroot": "pytest tests/docker/test_nonroot.py (its subset again as a docker-group user)",
    "quickstart": "gradebox run examples/quickstart on oci+crun, oci+runc and docker "
    "(exit 0 or 1: it fails some tests on purpose)",
    "quickstart-login": "the quickstart as a docker-group user in a PAM login (su -l: "
    "session-N.scope, as ssh makes it), `auto` choosing",
    "wheel": "pytest tests/docker/test_wheel.py and test_doctor.py: the wheel built and installed "
    "in a fresh venv outside the checkout, its doctor, images and the quickstart",
    "custom": "pytest with --pytest's arguments (paths, -m, -k)",
}
# Measured here (TCG on 2 host cores): sized so a full run, build included, stays under 45 min.
DEFAULT_SUBSETS = "quickstart,quickstart-login,wheel,conformance"
SKIP = 77
_RUN_STARTED = time.time()
_PHASES = "| phase | seconds | note |"
_NOT_SUBSETS = ("boot", "install", "docker-load", "images-load", "images-verify")


class Skip(Exception):
    """This machine cannot run the guest: exit 77 with one line."""


class HarnessError(Exception):
    """The harness failed before or around the tests: exit 2."""


def say(msg: str) -> None:
    print(f"v2guest: {msg}", flush=True)


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, **kw)


# --- the machine ---------------------------------------------------------------------------


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gradebox" / "guest"


def apt_mirrors() -> tuple[str, str | None]:
    """(Debian's mirror, its security mirror or None), from this machine's apt configuration:
    never a host name of ours."""
    uris: list[tuple[str, list[str]]] = []
    deb822 = Path("/etc/apt/sources.list.d/debian.sources")
    files = [deb822] if deb822.exists() else []
    files += sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for path in dict.fromkeys(files):
        for stanza in re.split(r"\n\s*\n", path.read_text()):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
            if "deb" in fields.get("Types", "").split() and fields.get("Enabled", "yes") != "no":
                uris += [
                    (u, fields.get("Suites", "").split()) for u in fields.get("URIs", "").split()
                ]
    lists = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for path in lists:
        if path.exists():
            for line in path.read_text().splitlines():
                m = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m:
                    uris.append((m.group(1), [m.group(2)]))
    main = next((u for u, s in uris if any(not x.endswith("-security") for x in s)
                 and "security" not in u), None)  # fmt: skip
    security = next((u for u, s in uris if any(x.endswith("-security") for x in s)), None)
    if main is None:
        raise Skip("no Debian mirror in this machine's apt configuration (/etc/apt/sources.list*)")
    return main.rstrip("/"), security.rstrip("/") if security else None


def ensure_tools(need_build: bool) -> None:
    """qemu (and mmdebstrap when the image must be built), installed with apt as root."""
    missing = []
    if shutil.which("qemu-system-x86_64") is None:
        missing.append("qemu-system-x86")
    if need_build and shutil.which("mmdebstrap") is None:
        missing.append("mmdebstrap")
    if need_build and shutil.which("mkfs.ext4") is None and not Path("/sbin/mkfs.ext4").exists():
        missing.append("e2fsprogs")
    if not missing:
        return
    if os.geteuid() != 0:
        raise Skip(f"{' and '.join(missing)} missing, and only root installs them "
                   f"(sudo apt-get install {' '.join(missing)})")  # fmt: skip
    if shutil.which("apt-get") is None:
        raise Skip(f"{' and '.join(missing)} missing and no apt-get to install them")
    say(f"installing {' '.join(missing)} with apt")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(["apt-get", "update", "-qq"], env=env).returncode != 0:
        raise Skip("apt-get update failed: cannot install qemu/mmdebstrap")
    argv = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]
    if subprocess.run(argv, env=env, stdout=subprocess.DEVNULL).returncode != 0 and (
        "qemu-system-x86" in missing
    ):
        # A newer qemu-utils (a backport) breaks the distribution's qemu-system-common: take
        # qemu-utils of the same version as qemu-system-x86.
        policy = subprocess.run(["apt-cache", "policy", "qemu-system-x86"], capture_output=True,
                                text=True).stdout  # fmt: skip
        m = re.search(r"Candidate:\s*(\S+)", policy)
        if m:
            say(f"retrying with qemu-utils={m.group(1)} (the installed one breaks qemu-system-x86)")
            subprocess.run([*argv, "--allow-downgrades", f"qemu-utils={m.group(1)}"], env=env,
                           stdout=subprocess.DEVNULL)  # fmt: skip
    tools = {"qemu-system-x86": "qemu-system-x86_64", "mmdebstrap": "mmdebstrap"}
    still = [p for p, tool in tools.items() if p in missing and not shutil.which(tool)]
    if still:
        raise Skip(f"apt could not install {' '.join(still)}")


def tcg_accel() -> str:
    """`tcg,thread=multi` where this qemu runs an x86 guest's vCPUs on threads of their own."""
    probe = subprocess.run(
        ["qemu-system-x86_64", "-accel", "tcg,thread=multi", "-smp", "2", "-cpu", "max",
         "-nodefaults", "-display", "none", "-machine", "none", "-S", "-no-user-config",
         "-monitor", "none", "-serial", "none", "-version"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return "tcg,thread=multi" if probe.returncode == 0 else "tcg"


# --- the image -----------------------------------------------------------------------------


def image_key() -> str:
    h = hashlib.sha256()
    h.update(f"v{SCRIPT_VERSION}\n{SUITE}\n{' '.join(sorted(PACKAGES))}\n{CMDLINE}\n".encode())
    h.update((HERE / "customize.sh").read_bytes())
    return h.hexdigest()[:16]


def build_image(dest: Path, disk_gib: int) -> None:
    """mmdebstrap a Debian 12 root, then an ext4 filesystem image of it (mkfs.ext4 -d: no loop
    device), and the kernel and initrd beside it for -kernel/-initrd."""
    if os.geteuid() != 0:
        raise Skip("building the guest image needs root (mmdebstrap's root mode, /boot's kernel)")
    main, security = apt_mirrors()
    mirrors = [f"deb {main} {SUITE} main", f"deb {main} {SUITE}-updates main"]
    if security:
        mirrors.append(f"deb {security} {SUITE}-security main")
    work = Path(tempfile.mkdtemp(prefix="build-", dir=dest.parent))
    root = work / "root"
    try:
        say(f"building the guest image: mmdebstrap {SUITE}, {len(PACKAGES)} packages")
        started = time.monotonic()
        argv = ["mmdebstrap", "--mode=root", "--variant=required", "--quiet",
                "--include=" + ",".join(PACKAGES),
                "--customize-hook=" + str(HERE / "customize.sh") + ' "$1"',
                SUITE, str(root), *mirrors]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise HarnessError("mmdebstrap failed:\n" + (done.stderr or done.stdout)[-3000:])
        say(f"mmdebstrap: {time.monotonic() - started:.0f} s")
        kernels = sorted((root / "boot").glob("vmlinuz-*"))
        initrds = sorted((root / "boot").glob("initrd.img-*"))
        if not kernels or not initrds:
            raise HarnessError("the guest root has no /boot/vmlinuz-* or initrd.img-*")
        shutil.copy(kernels[-1], work / "vmlinuz")
        shutil.copy(initrds[-1], work / "initrd.img")
        mkfs = shutil.which("mkfs.ext4") or "/sbin/mkfs.ext4"
        run([mkfs, "-q", "-F", "-L", "gbroot", "-d", str(root), str(work / "disk.raw"),
             f"{disk_gib}G"])  # fmt: skip
        shutil.rmtree(root)
        (work / "packages.txt").write_text("\n".join(PACKAGES) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        work.rename(dest)
        say(f"guest image: {dest} ({time.monotonic() - started:.0f} s)")
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


# --- what the guest gets -------------------------------------------------------------------


def requirements() -> list[str]:
    """The project's dependencies and its dev extra, less what the guest does not run
    (playwright: the browser tests; ray: the cluster tests), and the build backend."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    dev = project.get("optional-dependencies", {}).get("dev", [])
    dropped = re.compile(r"^(playwright|ray)\b", re.I)
    build = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    return [*project["dependencies"], *(r for r in dev if not dropped.match(r)), *build, "wheel"]


def wheelhouse(venv: Path) -> Path:
    """Wheels of every requirement for cp311 on Debian 12 (this host is the same: the venv's
    pip builds or downloads what the guest's python takes), cached by the requirement list."""
    reqs = requirements()
    key = hashlib.sha256("\n".join(reqs).encode()).hexdigest()[:16]
    dest = cache_root() / f"wheels-{key}"
    if (dest / ".complete").exists():
        return dest
    pip = venv / "bin" / "pip"
    if not pip.exists():
        raise HarnessError(f"no {pip}: make install first (make guest does)")
    say(f"wheelhouse: pip wheel of {len(reqs)} requirements")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    done = subprocess.run([str(pip), "wheel", "-q", "--wheel-dir", str(tmp), *reqs],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise HarnessError("pip wheel failed:\n" + done.stderr[-2000:])
    (tmp / ".complete").touch()
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def checkout_tar(path: Path) -> int:
    """The working tree as it is: tracked and untracked files (not ignored ones), and the
    images' lock (ignored, machine-made) so that the guest's images verify against it."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout  # fmt: skip
    names = [n for n in listed.decode().split("\0") if n]
    if (REPO / "images" / "images.lock.json").exists():
        names.append("images/images.lock.json")
    count = 0
    with tarfile.open(path, "w") as tar:
        for name in names:
            full = REPO / name
            if full.is_file() or full.is_symlink():
                tar.add(full, arcname=name, recursive=False)
                count += 1
    return count


def save_images(venv: Path, archive: Path, names: list[str]) -> None:
    gradebox = venv / "bin" / "gradebox"
    verify = subprocess.run([str(gradebox), "images", "verify"], cwd=REPO,
                            capture_output=True, text=True)  # fmt: skip
    if verify.returncode != 0:
        raise HarnessError("the locked images are not all here (make images first):\n"
                           + (verify.stdout + verify.stderr)[-1500:])  # fmt: skip
    done = subprocess.run([str(gradebox), "images", "save", str(archive), *names], cwd=REPO,
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise HarnessError("gradebox images save failed:\n" + (done.stdout + done.stderr)[-1500:])


# --- the run -------------------------------------------------------------------------------


def warm_disk(image: Path, share: Path, args, deadline: float) -> tuple[Path, bool]:
    """The cached image with the project's dependencies installed (a venv at /opt/venv) and
    the locked images loaded into its engine, made by one boot of its own the first time a
    lock and wheelhouse are seen: loading 1.2 GiB of images takes this emulated engine ~7 min,
    installing the dependencies ~3, and neither changes from one run to the next."""
    lock = REPO / "images" / "images.lock.json"
    h = hashlib.sha256((share / "requirements.txt").read_bytes())
    h.update(lock.read_bytes() if lock.exists() else b"")  # the locked image ids
    h.update(args.images.encode())
    warm = image / f"warm-{h.hexdigest()[:16]}.raw"
    if warm.exists():
        say(f"warm disk cached: {warm}")
        return warm, False
    t = time.monotonic()
    save_images(args.venv, share / "images.tar", [n for n in args.images.split(",") if n])
    say(f"images save: {(share / 'images.tar').stat().st_size >> 20} MiB "
        f"in {time.monotonic() - t:.0f} s")  # fmt: skip
    say("warm-up boot: dependencies and images into a copy of the image, kept for next time")
    tmp = warm.with_suffix(".tmp")
    run(["cp", "--sparse=always", "--reflink=auto", str(image / "disk.raw"), str(tmp)])
    out = args.out / "warm-up"
    out.mkdir(parents=True, exist_ok=True)
    state, _ = boot(image, tmp, share, out, args, deadline, snapshot=False)
    gout = share / "out"
    ok = state == "done" and (gout / "done").read_text().strip() == "0"
    for f in list(gout.iterdir()):
        shutil.move(str(f), str(out / f.name))
    if not ok:
        tmp.unlink(missing_ok=True)
        tail = (out / "guest.log").read_text(errors="replace").splitlines()[-15:] \
            if (out / "guest.log").exists() else ["(no guest log)"]  # fmt: skip
        raise HarnessError(f"the warm-up boot failed ({state}):\n" + "\n".join(tail))
    for old in image.glob("warm-*.raw"):
        old.unlink()
    tmp.rename(warm)
    return warm, True


def _budget(deadline: float) -> str:
    """The guest's seconds: what is left, less its boot (in it) and 2.5 min to stop and report."""
    budget = int(deadline - time.monotonic() - 150)
    if budget < 300:
        raise HarnessError(f"only {budget} s left for the guest after the preparation")
    return str(budget)


def _write_config(share: Path, config: dict[str, str]) -> None:
    (share / "config.env").write_text("".join(f"{k}={_shq(v)}\n" for k, v in config.items()))


def boot(
    image: Path, disk: Path, share: Path, out: Path, args, deadline: float, snapshot: bool
) -> tuple[str, float | None]:
    """Boot the guest and follow it until it powers off or the deadline passes: ("done" |
    "timeout" | "exited", seconds from start to the guest's script)."""
    console = out / "console.log"
    accel = tcg_accel()
    smp = args.cpus if "multi" in accel else 1
    argv = ["qemu-system-x86_64", "-accel", accel, "-cpu", "max", "-smp", str(smp),
            "-m", f"{args.memory}M", "-nodefaults", "-no-user-config", "-display", "none",
            "-no-reboot", "-monitor", "none", "-serial", f"file:{console}", "-nic", "none",
            "-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.img"),
            "-append", CMDLINE,
            "-drive", f"file={disk},format=raw,if=virtio,cache=unsafe"
            + (",snapshot=on" if snapshot else ""),
            "-virtfs", f"local,path={share},mount_tag=share,security_model=none,id=share",
            "-device", "virtio-rng-pci"]  # fmt: skip
    (out / "qemu-argv.txt").write_text(" ".join(argv) + "\n")
    say(f"booting: {accel}, {smp} vCPU, {args.memory} MiB, no network; console: {console}")
    started = time.monotonic()
    qemu = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    guest_log = share / "out" / "guest.log"
    offset = 0
    first_line: float | None = None
    done_at: float | None = None
    boot_deadline = started + args.boot_timeout
    state = "exited"
    try:
        while True:
            if guest_log.exists():
                with guest_log.open("rb") as f:
                    f.seek(offset)
                    chunk = f.read()
                if chunk:
                    first_line = first_line or time.monotonic() - started
                    cut = chunk.rfind(b"\n") + 1
                    for line in chunk[:cut].decode(errors="replace").splitlines():
                        print(f"  | {line}", flush=True)
                    offset += cut
            if qemu.poll() is not None:
                state = "done" if (share / "out" / "done").exists() else "exited"
                break
            now = time.monotonic()
            if (share / "out" / "done").exists():  # finished: give its power-off 3 minutes
                done_at = done_at or now
                if now - done_at > 180:
                    say("the guest finished but did not power off: stopping qemu")
                    state = "done"
                    break
            if now > deadline:
                state = "timeout"
                break
            if first_line is None and now > boot_deadline:
                state = "boot-timeout"
                break
            time.sleep(2)
    finally:
        if qemu.poll() is None:
            qemu.terminate()
            try:
                qemu.wait(20)
            except subprocess.TimeoutExpired:
                qemu.kill()
                qemu.wait()
        (out / "qemu.log").write_bytes(qemu.stdout.read() if qemu.stdout else b"")
    return state, first_line


# --- the verdict ---------------------------------------------------------------------------


def backend_of(name: str, module: str = "") -> str:
    """The backend a test ran on, from its parameters' id: the `sandbox` fixture's (docker,
    oci, oci-runc) or a runtime's own (crun, runc); unit tests have none."""
    m = re.search(r"\[(.*)\]$", name)
    ids = m.group(1) if m else ""
    if "unit" in re.split(r"[./]", module):
        return "(unit)"
    if "oci-runc" in ids or re.search(r"(^|-)runc(-|$)", ids):
        return "oci-runc"
    if re.search(r"(^|-)(oci|crun)(-|$)", ids):
        return "oci (crun)"
    if re.search(r"(^|-)docker(-|$)", ids):
        return "docker"
    return "(no backend)"


def _zero() -> dict:
    return {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "first": []}


def junit_counts(path: Path) -> dict[str, dict]:
    """backend -> {passed, failed, errors, skipped, first failures}, from a junit file."""
    by: dict[str, dict] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        row = by.setdefault(backend_of(name, case.get("classname", "")), _zero())
        bad = case.find("failure")
        err = case.find("error")
        if case.find("skipped") is not None:
            row["skipped"] += 1
        elif bad is not None or err is not None:
            row["failed" if bad is not None else "errors"] += 1
            node = bad if bad is not None else err
            msg = (node.get("message") or node.text or "").strip().splitlines()
            if len(row["first"]) < 3:
                row["first"].append(f"{case.get('classname', '')}::{name}: "
                                    f"{msg[0][:240] if msg else '?'}")  # fmt: skip
        else:
            row["passed"] += 1
    return by


def log_counts(path: Path) -> dict[str, dict]:
    """The same from `pytest -v` lines, where the junit file was never written (killed)."""
    by: dict[str, dict] = {}
    key = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped"}
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED)", line)
        if m:
            row = by.setdefault(backend_of(m.group(1), m.group(1).split("::")[0]), _zero())
            row[key[m.group(2)]] += 1
    return by


def report(
    share: Path,
    out: Path,
    state: str,
    host_phases: dict[str, float],
    args,
    first_line: float | None,
) -> int:
    gout = share / "out"
    phases = []
    if (gout / "phases.tsv").exists():
        for line in (gout / "phases.tsv").read_text().splitlines():
            name, secs, rc, *note = line.split("\t") + [""]
            phases.append({"name": name, "seconds": int(secs or 0), "exit": int(rc or 0),
                           "note": note[0]})  # fmt: skip
    warm_tsv = out / "warm-up" / "phases.tsv"
    if warm_tsv.exists() and warm_tsv.stat().st_mtime >= _RUN_STARTED:
        for line in warm_tsv.read_text().splitlines():
            name, secs, rc, *note = line.split("\t") + [""]
            phases.insert(0, {"name": f"warm-up: {name}", "seconds": int(secs or 0),
                              "exit": int(rc or 0), "note": note[0]})  # fmt: skip
    for f in gout.iterdir() if gout.exists() else []:
        shutil.copy(f, out / f.name)
    subsets = []
    for p in phases:
        if p["name"] in _NOT_SUBSETS or p["name"].startswith("warm-up"):
            continue
        xml, logf = gout / f"{p['name']}.xml", gout / f"{p['name']}.log"
        counts = {}
        try:
            counts = (
                junit_counts(xml) if xml.exists() else (log_counts(logf) if logf.exists() else {})
            )
        except ET.ParseError:
            counts = log_counts(logf) if logf.exists() else {}
        subsets.append({**p, "counts": counts})
    ran = {p["name"] for p in phases}
    wanted = [s for s in args.subset.split(",") if s]
    guest_rc = int((gout / "done").read_text().strip()) if (gout / "done").exists() else None
    info = (gout / "guest-info.txt").read_text() if (gout / "guest-info.txt").exists() else ""
    doc = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "state": state, "guest_exit": guest_rc,
           "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                    capture_output=True, text=True).stdout.strip(),
           "dirty": bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                        cwd=REPO, capture_output=True, text=True).stdout.strip()),
           "subsets_asked": wanted, "host_phases_s": host_phases,
           "guest_script_after_s": round(first_line) if first_line else None,
           "phases": phases, "subsets": subsets, "guest": info}  # fmt: skip
    (out / "results.json").write_text(json.dumps(doc, indent=2) + "\n")

    lines = [f"# cgroup v2 guest run ({doc['date']})", "",
             f"commit {doc['commit']}{' + uncommitted changes' if doc['dirty'] else ''}; "
             f"state: {state}; guest exit: {guest_rc}; subsets asked: {', '.join(wanted)}", "",
             "```", info.strip(), "```", "", _PHASES, "|---|---|---|"]  # fmt: skip
    lines += [f"| {k} (host) | {v:.0f} | |" for k, v in host_phases.items()]
    if first_line is not None:
        lines.append(f"| qemu start to the guest's script (host) | {first_line:.0f} | |")
    lines += [f"| {p['name']} | {p['seconds']} |" + (f" {p['note']}" if p["note"] else "")
              for p in phases]  # fmt: skip
    lines += ["", "| subset | backend | passed | failed | errors | skipped | exit |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for s in subsets:
        for backend, c in sorted(s["counts"].items()) or [("-", {})]:
            if s["name"].startswith("quickstart-"):  # the backend is in the subset's name
                backend = s["name"].removeprefix("quickstart-")
            lines.append(f"| {s['name']} | {backend} | {c.get('passed', '-')} | "
                         f"{c.get('failed', '-')} | {c.get('errors', '-')} | "
                         f"{c.get('skipped', '-')} | {s['exit']} |")  # fmt: skip
    not_run = [n for n in wanted if n not in ran and not any(p.startswith(n) for p in ran)]
    if not_run:
        lines += ["", f"not run: {', '.join(not_run)}"]
    firsts = [
        (s["name"], b, f) for s in subsets for b, c in s["counts"].items() for f in c["first"]
    ]
    if firsts:
        lines += ["", "First failures (up to 3 per subset and backend):", ""]
        lines += [f"- {n} [{b}] {f}" for n, b, f in firsts]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[lines.index(_PHASES) :]), flush=True)
    say(f"results: {out / 'results.md'}")

    if state in ("boot-timeout", "exited") or guest_rc == 2:
        tail = (
            (out / "console.log").read_text(errors="replace").splitlines()[-25:]
            if (out / "console.log").exists()
            else []
        )
        say(f"the guest did not finish ({state}); the console's last lines:")
        print("\n".join(f"  > {t}" for t in tail), flush=True)
        return 2
    if state == "timeout":
        say(f"out of time after {args.timeout} min: what had not finished counts as failed")
        return 1
    failed = [s["name"] for s in subsets if s["exit"] != 0
              and not (s["name"].startswith("quickstart") and s["exit"] == 1)]  # fmt: skip
    if failed or guest_rc != 0 or not_run:
        say(f"FAILED: {', '.join(failed + not_run) or 'the guest run'}")
        return 1
    say("every subset passed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="subsets:\n" + "\n".join(f"  {k:17} {v}" for k, v in SUBSETS.items()),
    )  # fmt: skip
    parser.add_argument("--subset", default=DEFAULT_SUBSETS,
                        help=f"comma-separated subsets to run, in order (default: "
                        f"{DEFAULT_SUBSETS}; 'all' for every one but custom)")  # fmt: skip
    parser.add_argument(
        "-k", dest="k", default="", help="a pytest -k expression for every pytest subset"
    )
    parser.add_argument("--pytest", default="", help="the custom subset's pytest arguments "
                        "(paths, -m, -k), e.g. 'tests/docker/test_exec.py -k sigkill'")  # fmt: skip
    parser.add_argument(
        "--timeout",
        type=float,
        default=45,
        help="minutes for everything, build and boot included (default 45)",
    )
    parser.add_argument(
        "--boot-timeout",
        type=float,
        default=600,
        help="seconds for qemu to reach the guest's script (default 600)",
    )
    parser.add_argument(
        "--bench",
        action="store_true",
        help="also python bench/run.py --only speed (v2 ratios; TCG is ~16x slower)",
    )
    parser.add_argument("--keep-image", action="store_true",
                        help="keep the guest's disk as it ended (its engine, venv, caches) "
                        "in --out, to boot again; else its writes go to a throwaway "
                        "snapshot")  # fmt: skip
    parser.add_argument("--rebuild", action="store_true", help="build the image even when cached")
    parser.add_argument(
        "--images", default="", help="images to copy in (default: every locked one)"
    )
    parser.add_argument("--memory", type=int, default=6144, help="guest MiB (default 6144)")
    parser.add_argument(
        "--cpus", type=int, default=2, help="vCPUs where TCG runs threads (default 2)"
    )
    parser.add_argument("--disk", type=int, default=16, help="guest disk GiB, sparse (default 16)")
    parser.add_argument(
        "--venv",
        type=Path,
        default=REPO / ".venv",
        help="the host venv whose pip and gradebox are used (default .venv)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "gradebox-runs" / "guest")
    args = parser.parse_args(argv)
    if args.subset == "all":
        args.subset = ",".join(k for k in SUBSETS if k != "custom")
    unknown = [s for s in args.subset.split(",") if s and s not in SUBSETS]
    if unknown:
        parser.error(f"unknown subset(s) {', '.join(unknown)}: choose from {', '.join(SUBSETS)}")
    if "custom" in args.subset.split(",") and not args.pytest:
        parser.error("the custom subset needs --pytest ARGS")

    started = time.monotonic()
    deadline = started + args.timeout * 60
    host_phases: dict[str, float] = {}
    try:
        if os.uname().machine != "x86_64":
            raise Skip(f"an x86_64 host is needed (this is {os.uname().machine})")
        key = image_key()
        image = cache_root() / f"bookworm-{key}"
        need_build = args.rebuild or not (image / "disk.raw").exists()
        ensure_tools(need_build)
        if need_build:
            t = time.monotonic()
            image.parent.mkdir(parents=True, exist_ok=True)
            build_image(image, args.disk)
            for old in image.parent.glob("bookworm-*"):  # images of other keys: stale now
                if old != image:
                    shutil.rmtree(old, ignore_errors=True)
            host_phases["build image"] = time.monotonic() - t
        else:
            say(f"guest image cached: {image}")
        args.out.mkdir(parents=True, exist_ok=True)
        for old in args.out.iterdir():
            if old.is_file():
                old.unlink()
        with tempfile.TemporaryDirectory(prefix="gradebox-guest-") as tmp:
            share = Path(tmp)
            os.chmod(share, 0o755)
            (share / "out").mkdir()
            t = time.monotonic()
            wheels = wheelhouse(args.venv)
            shutil.copytree(wheels, share / "wheels", copy_function=_link_or_copy)
            (share / "requirements.txt").write_text("\n".join(requirements()) + "\n")
            host_phases["wheelhouse"] = time.monotonic() - t
            t = time.monotonic()
            files = checkout_tar(share / "checkout.tar")
            host_phases["checkout"] = time.monotonic() - t
            say(f"shared: {files} files of the checkout")
            shutil.copy(HERE / "inside.sh", share / "inside.sh")
            subsets = " ".join(s for s in args.subset.split(",") if s)
            config = {"SUBSETS": subsets, "PYTEST_K": args.k, "PYTEST_CUSTOM": args.pytest,
                      "BENCH": "1" if args.bench else "0", "LOGIN_USER": "gbxlogin"}  # fmt: skip
            _write_config(share, {**config, "MODE": "warm", "BUDGET": _budget(deadline)})
            t = time.monotonic()
            disk, warmed = warm_disk(image, share, args, deadline - 30)
            if warmed:
                host_phases["warm-up boot (once per lock and wheelhouse)"] = time.monotonic() - t
            _write_config(share, {**config, "MODE": "run", "BUDGET": _budget(deadline)})
            if args.keep_image:  # the guest writes into a copy of its own, left behind
                run(
                    [
                        "cp",
                        "--sparse=always",
                        "--reflink=auto",
                        str(disk),
                        str(args.out / "disk.raw"),
                    ]
                )
                disk = args.out / "disk.raw"
            t = time.monotonic()
            state, first_line = boot(
                image, disk, share, args.out, args, deadline - 30, snapshot=not args.keep_image
            )
            host_phases["guest (qemu start to power-off)"] = time.monotonic() - t
            rc = report(share, args.out, state, host_phases, args, first_line)
            if args.keep_image:
                say(
                    f"kept: the guest's disk as it ended, {args.out / 'disk.raw'} "
                    f"(boot it again by {args.out / 'qemu-argv.txt'})"
                )
        say(f"total: {(time.monotonic() - started) / 60:.1f} min")
        return rc
    except Skip as exc:
        print(f"skipped: {exc}", flush=True)
        return SKIP
    except HarnessError as exc:
        say(f"error: {exc}")
        return 2


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _shq(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


if __name__ == "__main__":
    sys.exit(main())
