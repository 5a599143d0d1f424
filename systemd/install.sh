#!/usr/bin/env bash
# Install edge-vision-agent as a systemd service on this device, from a source checkout.
#
#   sudo systemd/install.sh [--ort onnxruntime|onnxruntime-gpu|onnxruntime-openvino]
#                           [--ort-wheel FILE|URL] [--jetson] [--pi] [--system-site-packages]
#                           [--prefix DIR] [--python PYTHON] [--no-start] [--dry-run]
#
# Idempotent: run it again after `git pull` to upgrade. It never overwrites an existing
# /etc/edge-vision-agent/agent.yaml. Walkthrough per device: docs/operations.md.
set -euo pipefail

readonly UNIT=edge-vision-agent
readonly SERVICE_USER=edge-agent
readonly CONF_DIR=/etc/edge-vision-agent
readonly UNIT_DIR=/etc/systemd/system
readonly SYSUSERS_DIR=/usr/lib/sysusers.d
readonly DEFAULT_PREFIX=/opt/edge-vision-agent

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX=$DEFAULT_PREFIX
PYTHON=python3
ORT=onnxruntime
ORT_WHEEL=""
JETSON=0
BOARD=""
SYSTEM_SITE=0
START=1
DRY_RUN=0

usage() {
    cat <<'EOF'
Usage: sudo systemd/install.sh [options]

  --ort PACKAGE          onnxruntime wheel to install (default: onnxruntime)
                           onnxruntime           CPU; x86_64 and aarch64 (Raspberry Pi)
                           onnxruntime-gpu       CUDA/TensorRT on x86_64 with an NVIDIA GPU
                           onnxruntime-openvino  Intel/AMD x86_64 CPUs and Intel iGPUs
  --ort-wheel FILE|URL   install this onnxruntime wheel instead (Jetson: the JetPack build
                           of onnxruntime-gpu; PyPI's wheels do not support Jetson's GPU)
  --jetson               Jetson: install the jetson.conf drop-in, reuse JetPack's OpenCV
                           (GStreamer) and numpy (implies --system-site-packages)
  --pi                   Raspberry Pi config: the 320 INT8 model at 5 frames/s, publish on
                           change (chosen by itself on a Pi: /proc/device-tree/model)
  --system-site-packages venv sees the system's packages; OpenCV is not installed from PyPI
  --prefix DIR           install root (default: /opt/edge-vision-agent)
  --python PYTHON        interpreter for the venv, >= 3.10 (default: python3)
  --no-start             install and enable, but do not (re)start the service
  --dry-run              print what would be done, change nothing (no root needed)
  -h, --help             this text
EOF
}

die() { echo "install.sh: error: $*" >&2; exit 1; }
note() { echo "==> $*"; }

# Every change to the system goes through run(), so --dry-run shows all of them.
run() {
    if ((DRY_RUN)); then
        printf '+'; printf ' %q' "$@"; printf '\n'
    else
        "$@"
    fi
}

while (($#)); do
    case "$1" in
        --ort) ORT="${2:?--ort needs a value}"; shift 2 ;;
        --ort-wheel) ORT_WHEEL="${2:?--ort-wheel needs a value}"; shift 2 ;;
        --jetson) JETSON=1; SYSTEM_SITE=1; BOARD=jetson; shift ;;
        --pi) BOARD=pi; shift ;;
        --system-site-packages) SYSTEM_SITE=1; shift ;;
        --prefix) PREFIX="${2:?--prefix needs a value}"; shift 2 ;;
        --python) PYTHON="${2:?--python needs a value}"; shift 2 ;;
        --no-start) START=0; shift ;;
        --dry-run) DRY_RUN=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown option: $1" ;;
    esac
done

case "$ORT" in
    onnxruntime | onnxruntime-gpu | onnxruntime-openvino) ;;
    *) die "--ort must be onnxruntime, onnxruntime-gpu or onnxruntime-openvino, not '$ORT'" ;;
esac
[[ "$PREFIX" == /* ]] || die "--prefix must be an absolute path"
if [[ -z "$BOARD" ]]; then
    BOARD=generic
    grep -qs "Raspberry Pi" /proc/device-tree/model && BOARD=pi
fi
VENV="$PREFIX/venv"

# --- Preflight --------------------------------------------------------------------------
if ((!DRY_RUN)) && ((EUID != 0)); then
    die "run as root (sudo $0 ...), or add --dry-run to see the steps"
fi
[[ -f "$SRC/pyproject.toml" && -d "$SRC/agent" ]] || die "$SRC is not an edge-vision-agent checkout"
command -v systemctl >/dev/null || ((DRY_RUN)) || die "systemd (systemctl) is required"
command -v "$PYTHON" >/dev/null || die "$PYTHON not found (apt install python3)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || die "$PYTHON is older than 3.10"
"$PYTHON" -c 'import ensurepip, venv' 2>/dev/null \
    || die "$PYTHON cannot create virtual environments (apt install python3-venv)"
for group in video $( ((JETSON)) && echo render); do
    getent group "$group" >/dev/null || echo "install.sh: warning: no '$group' group; the" \
        "unit's SupplementaryGroups=$group will fail: create it (groupadd -r $group)" >&2
done

# --- Service user (sysusers.d when available, else useradd) -----------------------------
note "service user $SERVICE_USER"
run install -D -m 0644 "$SRC/systemd/$UNIT.sysusers" "$SYSUSERS_DIR/$UNIT.conf"
if command -v systemd-sysusers >/dev/null; then
    run systemd-sysusers "$SYSUSERS_DIR/$UNIT.conf"
elif ! getent passwd "$SERVICE_USER" >/dev/null; then
    run useradd --system --user-group --home-dir "/var/lib/$UNIT" --no-create-home \
        --shell /usr/sbin/nologin "$SERVICE_USER"
fi

# --- Virtual environment and packages ---------------------------------------------------
note "virtual environment $VENV"
if [[ ! -x "$VENV/bin/python" ]]; then
    venv_args=()
    ((SYSTEM_SITE)) && venv_args+=(--system-site-packages)
    run "$PYTHON" -m venv "${venv_args[@]}" "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --no-input)
run "${PIP[@]}" install --upgrade pip wheel

note "edge-vision-agent from $SRC"
# The project itself without dependencies first: its declared dependency on `onnxruntime`
# would drag in the CPU wheel, which must not sit next to onnxruntime-gpu/-openvino (they
# install the same `onnxruntime` module). Its other dependencies follow, read from the
# installed metadata (works on Python 3.10, no tomllib).
run "${PIP[@]}" install --no-deps --force-reinstall "$SRC"
REQS="$(mktemp)"
trap 'rm -f "$REQS"' EXIT
if ((DRY_RUN)) && [[ ! -x "$VENV/bin/python" ]]; then
    echo "+ (requirements of edge-vision-agent except onnxruntime) > $REQS"
else
    SKIP_OPENCV=$SYSTEM_SITE "$VENV/bin/python" - >"$REQS" <<'EOF'
import os
import re
from importlib.metadata import requires

skip = {"onnxruntime"}
if os.environ.get("SKIP_OPENCV") == "1":
    # JetPack's OpenCV (with GStreamer) comes through --system-site-packages, and it was
    # built against numpy 1.x: a numpy 2 in the venv would break `import cv2`.
    skip |= {"opencv-python-headless", "opencv-python"}
    print("numpy<2")
for req in requires("edge-vision-agent") or []:
    name = re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower()
    if "extra ==" not in req and name not in skip:
        print(req)
EOF
fi
if [[ -n "$ORT_WHEEL" ]]; then
    echo "$ORT_WHEEL" >>"$REQS"
else
    echo "$ORT" >>"$REQS"
fi
run "${PIP[@]}" install --upgrade -r "$REQS"
if ((!DRY_RUN)); then
    # The three onnxruntime distributions install the same module: exactly one may stay.
    chosen="$ORT"
    if [[ -n "$ORT_WHEEL" ]]; then  # onnxruntime_gpu-1.20.0-cp310-...whl -> onnxruntime-gpu
        chosen="$(basename "$ORT_WHEEL")"
        chosen="${chosen%%-[0-9]*}"
        chosen="${chosen//_/-}"
    fi
    others=()
    for dist in onnxruntime onnxruntime-gpu onnxruntime-openvino; do
        if [[ "$dist" != "$chosen" ]] && "${PIP[@]}" show "$dist" >/dev/null 2>&1; then
            others+=("$dist")
        fi
    done
    if ((${#others[@]})); then
        note "removing conflicting ${others[*]}; reinstalling $chosen over the shared module"
        run "${PIP[@]}" uninstall -y "${others[@]}"
        run "${PIP[@]}" install --force-reinstall --no-deps "${ORT_WHEEL:-$ORT}"
    fi
    note "onnxruntime: $("$VENV/bin/python" -c \
        'import onnxruntime as o; print(o.__version__, *o.get_available_providers())')"
fi

# --- Bundled models, docs and sample images (read-only, under the prefix) ---------------
note "bundled models in $PREFIX/models"
run install -d -m 0755 "$PREFIX/models" "$PREFIX/docs" "$PREFIX/assets"
for f in "$SRC"/models/*.onnx "$SRC"/models/*.json; do
    [[ -e "$f" ]] && run install -m 0644 "$f" "$PREFIX/models/"
done
for f in "$SRC"/docs/*.md; do
    [[ -e "$f" ]] && run install -m 0644 "$f" "$PREFIX/docs/"
done
# Sample pictures: what `detector.select: benchmark` compares providers' detections on.
for f in "$SRC"/assets/*.jpg; do
    [[ -e "$f" ]] && run install -m 0644 "$f" "$PREFIX/assets/"
done

# --- Configuration (never overwritten) --------------------------------------------------
CONFIG="$CONF_DIR/agent.yaml"
if [[ -e "$CONFIG" ]]; then
    note "keeping existing $CONFIG"
else
    note "writing $CONFIG (root:$SERVICE_USER 0640)"
    run install -d -m 0755 "$CONF_DIR"
    render=("$VENV/bin/python" "$SRC/systemd/render_config.py" "$SRC/configs/agent.yaml" "$PREFIX" "$ORT" "$BOARD")
    if ((DRY_RUN)); then
        [[ -x "${render[0]}" ]] || render[0]="$PYTHON"
        echo "+ write $CONFIG:"
        "${render[@]}" | sed 's/^/    /' || echo "    (needs PyYAML; the venv has it)"
    else
        tmp="$(mktemp "$CONF_DIR/.agent.yaml.XXXXXX")"
        "${render[@]}" >"$tmp"
        chown "root:$SERVICE_USER" "$tmp"
        chmod 0640 "$tmp"
        mv "$tmp" "$CONFIG"
    fi
fi

# --- Unit and drop-ins ------------------------------------------------------------------
note "unit $UNIT_DIR/$UNIT.service"
if [[ "$PREFIX" == "$DEFAULT_PREFIX" ]]; then
    run install -m 0644 "$SRC/systemd/$UNIT.service" "$UNIT_DIR/$UNIT.service"
else
    run sh -c "sed 's#$DEFAULT_PREFIX/#$PREFIX/#g' '$SRC/systemd/$UNIT.service' \
        > '$UNIT_DIR/$UNIT.service' && chmod 0644 '$UNIT_DIR/$UNIT.service'"
fi
DROPIN_DIR="$UNIT_DIR/$UNIT.service.d"
for name in jetson openvino; do
    want=0
    [[ $name == jetson ]] && ((JETSON)) && want=1
    [[ $name == openvino && ($ORT == onnxruntime-openvino || $ORT_WHEEL == *openvino*) ]] && want=1
    if ((want)); then
        run install -D -m 0644 "$SRC/systemd/$name.conf" "$DROPIN_DIR/$name.conf"
    elif [[ -e "$DROPIN_DIR/$name.conf" ]]; then
        run rm -f "$DROPIN_DIR/$name.conf"
    fi
done

run systemctl daemon-reload
run systemctl enable "$UNIT.service"
if ((START)); then
    # restart, not start: an upgrade must replace the running code.
    run systemctl restart "$UNIT.service"
    ((DRY_RUN)) || systemctl --no-pager --lines=0 status "$UNIT.service" || true
fi

cat <<EOF

Installed edge-vision-agent (${ORT_WHEEL:-$ORT}) in $PREFIX.
  config:   $CONFIG  (then: systemctl restart $UNIT)
  broker:   set mqtt.host (and mqtt.username/password, mqtt.tls.ca) in the config
  state:    /var/lib/$UNIT  (models, spool)
  logs:     journalctl -u $UNIT -f
  status:   systemctl status $UNIT
EOF
