#!/bin/sh
# mmdebstrap --customize-hook for the cgroup v2 guest (tests/guest/v2guest.py): $1 is the
# guest's root. Runs on the host, once per cached image; the image's cache key hashes this file.
set -eu
root="$1"

echo gbguest > "$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 gbguest\n::1 localhost ip6-localhost\n' > "$root/etc/hosts"

# The root disk, and the host's share (9p over virtio: no network device at all).
mkdir -p "$root/mnt/share"
cat > "$root/etc/fstab" <<'TAB'
/dev/vda / ext4 rw,errors=remount-ro 0 1
share /mnt/share 9p trans=virtio,version=9p2000.L,msize=262144,access=any,nofail 0 0
TAB
printf '9p\n9pnet_virtio\n' > "$root/etc/modules-load.d/gradebox-9p.conf"

# The run: the script the host put in the share, once the engine is up; the guest powers off
# when it ends, whatever its exit code (the verdict is in the share).
cat > "$root/etc/systemd/system/gradebox-guest.service" <<'UNIT'
[Unit]
Description=gradebox guest run (the script in the host's share)
Wants=docker.service
After=docker.service containerd.service systemd-logind.service systemd-user-sessions.service
RequiresMountsFor=/mnt/share
ConditionPathExists=/mnt/share/inside.sh
SuccessAction=poweroff
FailureAction=poweroff

[Service]
Type=oneshot
ExecStart=/bin/bash /mnt/share/inside.sh
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
UNIT
chroot "$root" systemctl enable gradebox-guest.service >/dev/null 2>&1

# Nothing in the background competes with the tests on an emulated CPU.
for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service \
            fstrim.timer man-db.timer dpkg-db-backup.timer systemd-tmpfiles-clean.timer \
            logrotate.timer; do
    chroot "$root" systemctl mask "$unit" >/dev/null 2>&1 || true
done
mkdir -p "$root/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' > "$root/etc/systemd/journald.conf.d/volatile.conf"

# A root shell on the serial console for whoever debugs a kept image (there is no network).
chroot "$root" passwd -d root >/dev/null
