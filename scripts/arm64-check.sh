#!/usr/bin/env bash
# arm64 check: runs this checkout on a Debian bookworm arm64 userland (Raspberry Pi OS's
# base) under qemu-user emulation, the way a Pi user installs it, and compares with x86.
#
#   sudo scripts/arm64-check.sh [--root DIR] [--media DIR] [--run-seconds N] [--start-timeout N]
#                               [--eval-frames N] [--mirror URL] [--skip-eval]
#                               [--pip-cert FILE] [--dest DIR_IN_ROOT]
#
# Steps (each prints "== name: ok" or fails the script):
#   1. debootstrap --arch=arm64 bookworm into DIR/root once (cached: later runs reuse it)
#   2. copy the checkout (tracked + untracked, not ignored files) to /opt/checkout (--dest) in the
#      root and install it as the README says: python3 -m venv .venv && .venv/bin/pip install .
#   3. edge-agent doctor
#   4. edge-agent detect --json on the photos of --media, arm64 and x86 (this machine's
#      .venv), compared: boxes AP50/IoU, keypoint distance (scripts/arm64_compare.py)
#   5. edge-agent run against a mosquitto on this machine's loopback, camera = vtest.avi:
#      detections must arrive on vision/<device>/front/detections (the first within
#      --start-timeout, 600 s: emulated imports are slow), then --run-seconds (60) more,
#      then SIGINT: the agent must stop on its own within 60 s
#   6. systemd-analyze verify systemd/edge-vision-agent.service (systemd is in the root)
#   7. edge-agent evaluate of the ARM model named by configs/rpi.yaml (S8S8) against its
#      FP32 model on the photos and --eval-frames (20) frames of vtest.avi (decoded on x86
#      into PNGs: emulated decoding is slower than the inference), on arm64, gated as
#      models/build.sh gates (AP50 0.95, keypoints 1.5 % of the box height)
# Results go to DIR/results/ (JSON and logs). Emulated: no timing means anything.
#
# Needs root, debootstrap, qemu-user-static and binfmt-support (Debian: apt-get install -y
# debootstrap qemu-user-static binfmt-support), mosquitto, and this checkout's .venv for the
# x86 side. Host /proc and /dev are never copied or bound into the root: a fresh proc is
# mounted, the device nodes are debootstrap's own (mknod), and a trap unmounts everything.
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$(pwd)

base=${ARM64_CHECK_DIR:-/var/tmp/edge-agent-arm64}
media=../shared/data/media
run_seconds=60
start_timeout=600
eval_frames=20
mirror=http://deb.debian.org/debian
skip_eval=0
dest=/opt/checkout  # where the checkout goes inside the root
pip_cert=${PIP_CERT:-}  # a CA bundle pip needs here (a TLS-inspecting proxy) is needed there too
while [ $# -gt 0 ]; do
  case "$1" in
    --root) base=$2; shift 2 ;;
    --media) media=$2; shift 2 ;;
    --run-seconds) run_seconds=$2; shift 2 ;;
    --start-timeout) start_timeout=$2; shift 2 ;;
    --eval-frames) eval_frames=$2; shift 2 ;;
    --mirror) mirror=$2; shift 2 ;;
    --skip-eval) skip_eval=1; shift ;;
    --pip-cert) pip_cert=$2; shift 2 ;;
    --dest) dest=$2; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "arm64-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "arm64-check: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mount): run it with sudo"
for tool in debootstrap chroot mosquitto mosquitto_sub; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] ||
    die "$tool not found: apt-get install -y debootstrap qemu-user-static binfmt-support mosquitto mosquitto-clients"
done
[ -x .venv/bin/edge-agent ] ||
  die ".venv/bin/edge-agent not found: python3 -m venv .venv && .venv/bin/pip install -e . (x86 side)"
[ -d "$media" ] || die "--media $media is not a directory (the shared photos and vtest.avi)"
model=$(sed -n 's/^ *model: *//p' configs/rpi.yaml | head -1)
[ -f "$model" ] || die "configs/rpi.yaml names $model, which is not in this checkout"
fp32=${model%-int8*.onnx}-fp32.onnx
[ -f "$fp32" ] || die "no FP32 model $fp32 for $model"

# binfmt_misc: qemu-aarch64 with the F flag (the interpreter is opened at registration,
# so the root needs no copy of qemu).
if [ ! -e /proc/sys/fs/binfmt_misc/status ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  update-binfmts --enable qemu-aarch64 ||
    die "cannot register qemu-aarch64 in binfmt_misc (apt-get install -y qemu-user-static binfmt-support)"
fi

root=$base/root
results=$base/results
mkdir -p "$base" "$results" "$base/pip-cache"
echo "== arm64 root: $root"
if [ ! -f "$root/.edge-agent-root" ]; then
  rm -rf "$base/root.partial"
  debootstrap --arch=arm64 --variant=minbase \
    --include=python3,python3-venv,python3-pip,ca-certificates,systemd \
    bookworm "$base/root.partial" "$mirror" > "$base/debootstrap.log" 2>&1 ||
    die "debootstrap failed, see $base/debootstrap.log"
  touch "$base/root.partial/.edge-agent-root"
  mv "$base/root.partial" "$root"
fi
[ "$(chroot "$root" uname -m)" = aarch64 ] || die "the root does not run as aarch64"

mounts=()
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[$i]}" 2>/dev/null || true; done
  [ -n "${broker_pid:-}" ] && kill "$broker_pid" 2>/dev/null || true
  [ -n "${sub_pid:-}" ] && kill "$sub_pid" 2>/dev/null || true
  [ -n "${agent_pid:-}" ] && kill -KILL "$(cat "$root/tmp/arm64-check-agent.pid" 2>/dev/null)" 2>/dev/null || true
}
trap cleanup EXIT
mount -t proc proc "$root/proc"; mounts+=("$root/proc")
# No /sys: onnxruntime's cpuinfo then prints "failed to parse the list of possible
# processors" and falls back to defaults (harmless here; a second sysfs mount failed on
# the machine this was written on, and the emulated runs segfaulted with one).
mount -t tmpfs -o size=64m tmpfs "$root/dev/shm"; mounts+=("$root/dev/shm")
mkdir -p "$root/root/.cache/pip"
mount --bind "$base/pip-cache" "$root/root/.cache/pip"; mounts+=("$root/root/.cache/pip")
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
grep -q localhost "$root/etc/hosts" 2>/dev/null || printf '127.0.0.1 localhost\n::1 localhost\n' >> "$root/etc/hosts"
root_env=(HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8)
if [ -n "$pip_cert" ]; then
  [ -f "$pip_cert" ] || die "--pip-cert/PIP_CERT $pip_cert is not a file"
  cp -L "$pip_cert" "$root/etc/ssl/certs/edge-agent-host-ca.crt"
  root_env+=(PIP_CERT=/etc/ssl/certs/edge-agent-host-ca.crt)
fi
for var in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY PIP_INDEX_URL; do
  [ -n "${!var:-}" ] && root_env+=("$var=${!var}")
done
in_root() { chroot "$root" /usr/bin/env -i "${root_env[@]}" bash -c "cd $dest && $1"; }

echo "== install the checkout as the README says (python3-venv, pip install .)"
rm -rf "$root$dest" && mkdir -p "$root$dest" "$root/opt/media"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - |
  tar -xf - -C "$root$dest"
cp "$media"/*.jpg "$media"/*.png "$media"/vtest.avi "$root/opt/media/" 2>/dev/null || true
in_root "python3 -m venv .venv && .venv/bin/pip install -q ." > "$results/install.log" 2>&1 ||
  die "pip install . failed in the arm64 root, see $results/install.log"
in_root ".venv/bin/pip freeze" > "$results/pip-freeze.txt"
echo "== install: ok ($(grep -i '^onnxruntime' "$results/pip-freeze.txt"))"

echo "== mosquitto on the host loopback"
port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\n' "$port" > "$results/mosquitto.conf"
mosquitto -c "$results/mosquitto.conf" > "$results/mosquitto.log" 2>&1 & broker_pid=$!
sleep 1
kill -0 "$broker_pid" 2>/dev/null || die "mosquitto did not start, see $results/mosquitto.log"
root_env+=(EDGE_AGENT__MQTT__HOST=127.0.0.1 "EDGE_AGENT__MQTT__PORT=$port")

echo "== edge-agent doctor"
in_root ".venv/bin/edge-agent doctor" > "$results/doctor.txt" 2>&1 ||
  { cat "$results/doctor.txt"; die "doctor failed on arm64"; }
cat "$results/doctor.txt"
grep -q "(aarch64)" "$results/doctor.txt" || die "doctor did not run on aarch64"
echo "== doctor: ok"

echo "== detect on the photos, arm64 vs x86 ($model)"
photos=$(cd "$media" && ls -1 ./*.jpg ./*.png 2>/dev/null | sed 's|^\./||' | tr '\n' ' ')
[ -n "$photos" ] || die "no photos in $media"
in_root ".venv/bin/edge-agent detect --json --model $model $(printf '/opt/media/%s ' $photos)" \
  > "$results/detect-arm64.jsonl" 2> "$results/detect-arm64.log" ||
  die "detect failed on arm64, see $results/detect-arm64.log"
.venv/bin/edge-agent detect --json --model "$model" $(printf "$media/%s " $photos) \
  > "$results/detect-x86.jsonl" 2> "$results/detect-x86.log"
.venv/bin/python scripts/arm64_compare.py "$results/detect-x86.jsonl" \
  "$results/detect-arm64.jsonl" --json "$results/detect-compare.json"
echo "== detect: ok"

echo "== run for ${run_seconds} s (after its first detection) against the broker on the host loopback"
mosquitto_sub -h 127.0.0.1 -p "$port" -t 'vision/arm64-check/+/detections' -q 1 -v \
  > "$results/run-detections.txt" 2>&1 & sub_pid=$!
cat > "$root$dest/arm64-check.yaml" <<EOF
device_id: arm64-check
state_dir: /var/tmp/edge-agent-state
mqtt: {host: 127.0.0.1, port: $port, topic_prefix: vision}
cameras:
  - {id: front, source: /opt/media/vtest.avi, loop: true, realtime: true, fps: 5}
detector: {model: $model, providers: [auto]}
publish: {mode: every_frame}
health: {interval_s: 10}
EOF
# Emulated, the agent takes a minute or more to import and start: the minute of running
# counts from its first detection (at most --start-timeout to get there), then SIGINT
# (as Ctrl-C; systemd sends SIGTERM, handled alike): it must exit on its own.
rm -f "$root/tmp/arm64-check-agent.pid"
in_root "echo \$\$ > /tmp/arm64-check-agent.pid && exec .venv/bin/edge-agent run --config arm64-check.yaml --log-format json" \
  > "$results/run.log" 2>&1 & agent_pid=$!
started=0
for _ in $(seq "$start_timeout"); do
  if grep -q '/detections ' "$results/run-detections.txt" 2>/dev/null; then started=1; break; fi
  kill -0 "$agent_pid" 2>/dev/null || break
  sleep 1
done
[ "$started" = 1 ] || die "no detection within --start-timeout $start_timeout s, see $results/run.log"
sleep "$run_seconds"
kill -INT "$(cat "$root/tmp/arm64-check-agent.pid")" 2>/dev/null || true
for _ in $(seq 60); do kill -0 "$agent_pid" 2>/dev/null || break; sleep 1; done
kill -0 "$agent_pid" 2>/dev/null && die "the agent did not stop within 60 s of SIGINT, see $results/run.log"
agent_pid=
sleep 2
kill "$sub_pid" 2>/dev/null || true; sub_pid=
received=$(grep -c '/detections ' "$results/run-detections.txt" || true)
people=$(grep -o '"label": *"person"' "$results/run-detections.txt" | wc -l || true)
echo "detection messages received: $received (person objects in them: $people)"
[ "$received" -gt 0 ] && [ "$people" -gt 0 ] || die "no people detected, see $results/run.log"
echo "== run: ok"

echo "== systemd-analyze verify systemd/edge-vision-agent.service"
# The unit names the venv install.sh makes and its user; give the root both, as
# install.sh would, so verify checks the unit and not the missing install.
in_root "mkdir -p /opt/edge-vision-agent && ln -sfn $dest/.venv /opt/edge-vision-agent/venv &&
  install -D -m 0644 systemd/edge-vision-agent.sysusers /usr/lib/sysusers.d/edge-vision-agent.conf &&
  systemd-sysusers /usr/lib/sysusers.d/edge-vision-agent.conf &&
  cp systemd/edge-vision-agent.service /etc/systemd/system/ &&
  SYSTEMD_LOG_LEVEL=notice systemd-analyze verify /etc/systemd/system/edge-vision-agent.service" \
  > "$results/systemd-verify.txt" 2>&1 || { cat "$results/systemd-verify.txt"; die "systemd-analyze verify failed"; }
cat "$results/systemd-verify.txt"
echo "== systemd verify: ok"

if [ "$skip_eval" = 0 ]; then
  # The video's frames are decoded here, on x86, into lossless PNGs: decoding vtest.avi
  # under emulation (up to its last sampled frame) took longer than the inferences.
  echo "== evaluate $model against $fp32 on arm64 (photos, then $eval_frames frames of vtest.avi)"
  rm -rf "$root/opt/eval-frames" && mkdir -p "$root/opt/eval-frames"
  .venv/bin/python -c '
import sys, cv2
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
cap = cv2.VideoCapture(src)
total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
want = {round(i * (total - 1) / max(1, n - 1)) for i in range(n)}
i = 0
while True:
    ok, img = cap.read()
    if not ok:
        break
    if i in want:
        cv2.imwrite(f"{out}/vtest-{i:04d}.png", img)
    i += 1
' "$media/vtest.avi" "$root/opt/eval-frames" "$eval_frames" ||
    die "could not decode $media/vtest.avi into frames"
  gates="--min-ap50 0.95 --max-kpt-dist-pct 1.5"
  in_root ".venv/bin/edge-agent evaluate --reference $fp32 --candidate $model \
    $(printf '/opt/media/%s ' $photos) --json $dest/eval-arm64-photos.json $gates" \
    > "$results/evaluate-photos.txt" 2>&1 ||
    { cat "$results/evaluate-photos.txt"; die "evaluate (photos) failed its gates on arm64"; }
  cat "$results/evaluate-photos.txt"
  in_root ".venv/bin/edge-agent evaluate --reference $fp32 --candidate $model \
    /opt/eval-frames --json $dest/eval-arm64-vtest.json $gates" \
    > "$results/evaluate-vtest.txt" 2>&1 ||
    { cat "$results/evaluate-vtest.txt"; die "evaluate (vtest.avi frames) failed its gates on arm64"; }
  cat "$results/evaluate-vtest.txt"
  cp "$root$dest/eval-arm64-photos.json" "$root$dest/eval-arm64-vtest.json" "$results/"
  echo "== evaluate: ok"
fi
echo "arm64-check: all steps passed; results in $results (emulated: timings mean nothing)"
