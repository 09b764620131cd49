#!/bin/bash
# The guest's side of tests/guest/v2guest.py: run by gradebox-guest.service at boot, from the
# host's share (/mnt/share). Installs the checkout offline (the share's wheelhouse), loads the
# locked images, runs each named subset and writes, into /mnt/share/out: guest.log (all of it),
# phases.tsv (phase, seconds, exit code), one junit file and one log per subset, and `done`
# (the overall exit code). The guest has no network device; it powers off when this ends.
set -u
SHARE=/mnt/share
OUT=$SHARE/out
mkdir -p "$OUT"
exec > >(tee -a "$OUT/guest.log") 2>&1

# shellcheck disable=SC1091
. "$SHARE/config.env"  # MODE, SUBSETS, PYTEST_K, PYTEST_CUSTOM, BUDGET (s), BENCH, LOGIN_USER
MODE=${MODE:-run}       # warm: install the dependencies and load the images, then stop
APP=/opt/gradebox       # readable by the unprivileged users the non-root subsets run as
VENV=/opt/venv
PY=$VENV/bin/python
START=$SECONDS
OVERALL=0

log() { echo "guest[$(date -u +%H:%M:%S) +$((SECONDS - START))s] $*"; }
left() { echo $((BUDGET - (SECONDS - START))); }
phase() {  # phase NAME SECONDS RC [NOTE]
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >> "$OUT/phases.tsv"
}
finish() {
    log "finished: exit $OVERALL"
    echo "$OVERALL" > "$OUT/done"
    sync
    exit 0  # the verdict is in the share; the unit powers the guest off either way
}

log "booted: $(uname -r), uptime $(cut -d' ' -f1 /proc/uptime)s, cgroup fs $(stat -fc %T /sys/fs/cgroup)"
phase boot "$(cut -d' ' -f1 /proc/uptime | cut -d. -f1)" 0 "kernel start to this script"
{
    echo "kernel: $(uname -r)"
    echo "cmdline: $(cat /proc/cmdline)"
    echo "cgroup fs: $(stat -fc %T /sys/fs/cgroup)"
    echo "cgroup controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)"
    echo "crun: $(crun --version 2>&1 | head -1)"
    echo "runc: $(runc --version 2>&1 | head -1)"
    echo "python: $(python3 -V 2>&1)"
    echo "cpus: $(nproc), memory: $(free -m | awk '/Mem:/{print $2}') MiB"
} > "$OUT/guest-info.txt"
cat "$OUT/guest-info.txt"

# --- install: the checkout, and a venv from the wheelhouse (no index: there is no network).
# The venv's dependencies are installed once, by the warm-up boot (MODE=warm), and kept in the
# cached disk with the loaded images; each run installs only the checkout, editable, over it.
t=$SECONDS
rc=0
{
    rm -rf "$APP" && mkdir -p "$APP" && tar -xf "$SHARE/checkout.tar" -C "$APP" &&
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV" &&
        "$VENV/bin/pip" install -q --no-index --find-links "$SHARE/wheels" --no-compile \
            -r "$SHARE/requirements.txt"
    fi &&
    "$VENV/bin/pip" install -q --no-index --no-deps --no-build-isolation -e "$APP" &&
    "$PY" -m compileall -q "$APP/src/gradebox" &&
    chmod -R a+rX "$APP" "$VENV"
} || rc=$?
phase install $((SECONDS - t)) $rc
log "install: exit $rc in $((SECONDS - t))s"
if [ $rc != 0 ]; then OVERALL=2; finish; fi

# --- the engine, then the locked images ---
t=$SECONDS
for _ in $(seq 1 120); do docker info >/dev/null 2>&1 && break; sleep 1; done
docker info --format 'docker {{.ServerVersion}}: cgroup v{{.CgroupVersion}} ({{.CgroupDriver}}), storage {{.Driver}}, security {{.SecurityOptions}}' \
    | tee -a "$OUT/guest-info.txt"
if [ "$MODE" = run ]; then
    # Loaded by the warm-up boot: the images are checked against the checkout's lock.
    rc=0
    (cd "$APP" && "$VENV/bin/gradebox" images verify) || rc=$?
    phase images-verify $((SECONDS - t)) $rc "loaded by the warm-up boot"
    log "gradebox images verify: exit $rc in $((SECONDS - t))s"
    if [ $rc != 0 ]; then OVERALL=2; finish; fi
else
    # `docker load` of each image first (the CLI waits as long as the engine takes), then
    # `gradebox images load` of the same archive: the product's path, which verifies each
    # image against the lock, now without layers to write. Loading 1.2 GiB takes this emulated
    # engine longer than the SDK's 120 s read timeout: `gradebox images load` alone fails here.
    rc=0
    python3 - "$SHARE/images.tar" <<'PY' || rc=$?
import shutil, subprocess, sys, tarfile
with tarfile.open(sys.argv[1]) as archive:  # each image's `docker save`, streamed to the CLI
    for member in archive:
        if member.name.endswith(".tar"):
            load = subprocess.Popen(["docker", "load", "-q"], stdin=subprocess.PIPE)
            shutil.copyfileobj(archive.extractfile(member), load.stdin, 1 << 20)
            load.stdin.close()
            if load.wait() != 0:
                sys.exit(f"docker load of {member.name} failed")
PY
    phase docker-load $((SECONDS - t)) $rc
    log "docker load: exit $rc in $((SECONDS - t))s"
    if [ $rc != 0 ]; then OVERALL=2; finish; fi
    t=$SECONDS rc=0
    (cd "$APP" && "$VENV/bin/gradebox" images load "$SHARE/images.tar") || rc=$?
    phase images-load $((SECONDS - t)) $rc "gradebox images load (the layers already there)"
    log "gradebox images load: exit $rc in $((SECONDS - t))s"
    [ $rc = 0 ] || OVERALL=2
    systemctl stop docker docker.socket containerd  # a clean engine in the kept disk
    rm -rf "$APP"
    finish
fi

# --- the subsets ---
run_timed() {  # run_timed NAME CMD...: the subset's exit code, 124 when out of time
    local budget
    budget=$(( $(left) - 30 ))
    if [ "$budget" -lt 60 ]; then
        log "$1: not run (out of time)"; phase "$1" 0 125 "not run: out of time"; return 125
    fi
    shift
    timeout --kill-after=20 "$budget" "$@"
}

pytest_subset() {  # pytest_subset NAME ARGS...
    local name=$1; shift
    local t=$SECONDS rc=0
    log "$name: pytest $*"
    # Each test's line as it finishes (the host streams guest.log), everything in the log.
    (cd "$APP" && run_timed "$name" "$PY" -m pytest -v -p no:cacheprovider \
        --junitxml="$OUT/$name.xml" ${PYTEST_K:+-k "$PYTEST_K"} "$@") 2>&1 | tee "$OUT/$name.log" |
        grep --line-buffered -E ' (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)'
    rc=${PIPESTATUS[0]}
    grep -E '^(FAILED|ERROR) ' "$OUT/$name.log" | cut -c1-200
    tail -n 1 "$OUT/$name.log"
    [ $rc = 125 ] || phase "$name" $((SECONDS - t)) $rc
    log "$name: exit $rc in $((SECONDS - t))s"
    [ $rc = 0 ] || OVERALL=1
}

quickstart() {  # quickstart NAME ENV...: `gradebox run` of the quickstart, exit 0 or 1 expected
    local name=$1; shift
    local t=$SECONDS rc=0
    log "$name: $* gradebox run examples/quickstart/suite.yaml"
    (cd "$APP" && run_timed "$name" env "$@" "$VENV/bin/gradebox" run examples/quickstart/suite.yaml \
        --out "/tmp/$name" --junit "$OUT/$name.xml") > "$OUT/$name.log" 2>&1 || rc=$?
    tail -n 15 "$OUT/$name.log"
    [ $rc = 125 ] || phase "$name" $((SECONDS - t)) $rc "0 or 1 expected (fails some tests on purpose)"
    log "$name: exit $rc in $((SECONDS - t))s"
    [ $rc -le 1 ] || OVERALL=1
}

quickstart_login() {  # the quickstart as a docker-group user in a PAM login (session-N.scope)
    local name=quickstart-login user=${LOGIN_USER:-gbxlogin}
    local t=$SECONDS rc=0
    id "$user" >/dev/null 2>&1 || useradd -m -G docker -s /bin/bash "$user"
    grep -q "^$user:" /etc/subuid || usermod --add-subuids 200000-265535 --add-subgids 200000-265535 "$user"
    loginctl enable-linger "$user"
    log "$name: su -l $user (a login session, as ssh would make it)"
    run_timed "$name" su -l "$user" -c "
        echo \"session cgroup: \$(cat /proc/self/cgroup)\"
        echo \"XDG_RUNTIME_DIR=\$XDG_RUNTIME_DIR\"
        COLUMNS=160 $VENV/bin/gradebox doctor; echo \"doctor: exit \$?\"
        cd $APP && $VENV/bin/gradebox run examples/quickstart/suite.yaml \
            --out \"\$HOME/quickstart\" --junit \"\$HOME/quickstart.xml\"
        rc=\$?; cp \"\$HOME/quickstart.xml\" /tmp/$name.xml 2>/dev/null; exit \$rc
    " > "$OUT/$name.log" 2>&1 || rc=$?
    cp "/tmp/$name.xml" "$OUT/$name.xml" 2>/dev/null
    tail -n 15 "$OUT/$name.log"
    [ $rc = 125 ] || phase "$name" $((SECONDS - t)) $rc "0 or 1 expected; auto's choice: $(grep -m1 '^sandbox:' "$OUT/$name.log")"
    log "$name: exit $rc in $((SECONDS - t))s"
    [ $rc -le 1 ] || OVERALL=1
}

for subset in $SUBSETS; do
    case $subset in
        conformance) pytest_subset "$subset" tests/docker/test_conformance.py ;;
        wheel)       pytest_subset "$subset" tests/docker/test_wheel.py tests/docker/test_doctor.py ;;
        adversarial) pytest_subset "$subset" tests/docker/test_adversarial.py ;;
        faults)      pytest_subset "$subset" tests/docker/test_faults.py ;;
        runtimes)    pytest_subset "$subset" tests/docker/test_runtimes.py ;;
        slots)       # the v2 counterpart of the slots (a cgroup per container), where it exists
                     pytest_subset "$subset" $(cd "$APP" && ls tests/docker/test_slots.py \
                         tests/docker/test_cgroups.py tests/unit/test_slots.py \
                         tests/unit/test_cgroups_unit.py 2>/dev/null) ;;
        nonroot)     pytest_subset "$subset" tests/docker/test_nonroot.py ;;
        custom)      # shellcheck disable=SC2086  # the user's own pytest arguments, split
                     pytest_subset "$subset" $PYTEST_CUSTOM ;;
        quickstart)
            quickstart quickstart-oci-crun GRADEBOX_SANDBOX=oci GRADEBOX_RUNTIME=crun
            quickstart quickstart-oci-runc GRADEBOX_SANDBOX=oci GRADEBOX_RUNTIME=runc
            quickstart quickstart-docker GRADEBOX_SANDBOX=docker ;;
        quickstart-login) quickstart_login ;;
        *) log "unknown subset $subset"; OVERALL=2 ;;
    esac
done

if [ "${BENCH:-0}" = 1 ]; then
    t=$SECONDS rc=0
    log "bench: python bench/run.py --only speed"
    (cd "$APP" && run_timed bench "$PY" bench/run.py --only speed --quick) > "$OUT/bench.log" 2>&1 || rc=$?
    tail -n 30 "$OUT/bench.log"
    [ $rc = 125 ] || phase bench $((SECONDS - t)) $rc
    [ $rc = 0 ] || OVERALL=1
fi
finish
