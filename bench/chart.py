"""Draw bench/compare.py's JSON as a PNG: frames/s per system and provider, and latency
percentiles. Needs matplotlib (compare.py runs it with the Ultralytics venv's python).

    python bench/chart.py bench/results/compare.json bench/results/compare.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLOURS = {"agent": "#1f77b4", "ultralytics": "#ff7f0e", "raw": "#9a9a9a"}


def main() -> None:
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    data = json.loads(src.read_text())
    rows = sorted(data["medians"].values(), key=lambda r: r.get("fps") or 0)
    names = [r["system"] + ("" if r["layout"] in ("-", "auto") else f" {r['layout']}")
             for r in rows]  # fmt: skip
    names = [n.replace(" 2x1 2x1", " 2x1").replace(" 1x2 1x2", " 1x2") for n in names]
    colours = [COLOURS.get(r["kind"], "#555555") for r in rows]
    hatches = ["//" if r["provider"] == "openvino" else "" for r in rows]
    fig, (ax1, ax2) = plt.subplots(
        1, 2, figsize=(14, 0.42 * len(rows) + 2.2), sharey=True, gridspec_kw={"wspace": 0.05}
    )
    y = range(len(rows))
    fps = [r.get("fps") or 0 for r in rows]
    bars = ax1.barh(y, fps, color=colours, edgecolor="black", linewidth=0.4)
    for b, h in zip(bars, hatches, strict=True):
        b.set_hatch(h)
    for i, r in enumerate(rows):
        label = f"{fps[i]:.1f}"
        if r.get("vs_ultra"):
            label += f"  ({r['vs_ultra']:.2f}x)"
        ax1.text(fps[i] + max(fps) * 0.01, i, label, va="center", fontsize=8)
    ax1.set_yticks(list(y), names, fontsize=8)
    ax1.set_xlabel("frames/s (higher is better); (x) = vs Ultralytics predict, FP32 ONNX")
    ax1.set_xlim(0, max(fps) * 1.3)
    ax1.grid(axis="x", alpha=0.3)
    p50 = [r.get("lat_p50") or 0 for r in rows]
    p99 = [r.get("lat_p99") or 0 for r in rows]
    ax2.barh([i + 0.2 for i in y], p50, height=0.4, color=colours, label="p50")
    ax2.barh([i - 0.2 for i in y], p99, height=0.4, color=colours, alpha=0.45, label="p99")
    ax2.set_xlabel(
        "latency ms (lower is better): agent capture-to-publish, Ultralytics pre+infer+post, "
        "raw session.run",
        fontsize=8,
    )
    ax2.grid(axis="x", alpha=0.3)
    ax2.legend(loc="lower right", fontsize=8)
    m = data["machine"]
    fig.suptitle(
        f"YOLO11n-pose 640 on vtest.avi, {m['nproc']} cores {m['cpu']}, onnxruntime "
        f"{m.get('onnxruntime')}; medians of {data['rounds']} rounds x {data['frames']} frames\n"
        "(blue: this agent end to end via mosquitto; orange: Ultralytics; grey: raw ORT; "
        "hatched: OpenVINO EP)",
        fontsize=9,
    )
    fig.tight_layout()
    dst.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dst, dpi=110, bbox_inches="tight")  # long row names stay inside


if __name__ == "__main__":
    main()
