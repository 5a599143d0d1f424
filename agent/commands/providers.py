"""`edge-agent providers`: measure the execution providers here, as `select: benchmark` does."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import onnxruntime as ort

from agent.commands.common import add_config_arg, settings_from_args
from agent.cv import cv2
from agent.detect.inputs import provider_models, session_spec, thresholds
from agent.detect.select import (
    candidate_providers,
    default_images,
    format_table,
    prepare_spec,
    provider_model,
    select_provider,
)
from agent.errors import ConfigError
from agent.log import configure_logging
from agent.service.engine import cpu_budget, layout
from agent.settings import resolve_path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "providers",
        help="time the execution providers on the model and show which one would be chosen",
    )
    p.add_argument("images", nargs="*", type=Path, help="images (default: bundled samples)")
    p.add_argument("--model", type=Path, default=None, help="ONNX model (default: from config)")
    p.add_argument("--runs", type=int, default=5, help="timed rounds per provider (default 5)")
    p.add_argument(
        "--no-cache", action="store_true", help="measure even if the state dir has a choice"
    )
    add_config_arg(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    # The table is this command's output, printed once; the selection's info lines (the
    # daemon's record of the same table) stay out, its warnings go to stderr.
    configure_logging("warning", json=False, stream=sys.stderr)
    ds = settings.detector
    if args.runs < 1:
        raise ConfigError("--runs must be at least 1")
    model = resolve_path(args.model if args.model is not None else ds.live_model)
    # detector.provider_models belong to the configured model, not to one named here.
    own = provider_models(ds) if args.model is None else {}
    images = []
    for path in args.images:
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if image is None:
            raise ConfigError(f"not a readable image: {path}")
        images.append(image)
    images = images or default_images()
    if not images:
        raise ConfigError("no image to compare providers on: pass one or more image files")
    available = ort.get_available_providers()
    # The daemon's spec (provider defaults merged in), timed as the daemon times it: with
    # the thread count of its worker sessions. Same cache key as the daemon's measurement.
    spec, _ = prepare_spec(
        session_spec(ds), model_path=model, state_dir=settings.state_dir, available=available
    )
    threads = layout(ds, cpu_budget())[1]
    candidates = candidate_providers(spec, available)
    print(f"onnxruntime {ort.__version__}; available: {', '.join(available)}")
    print(f"candidates for providers={ds.providers}: {', '.join(candidates)}")
    print(f"timed with {threads} thread(s) per session (the worker sessions of the layout)")
    for provider in candidates:
        print(f"{provider} runs {provider_model(own, provider, model)}")
    sel = select_provider(
        model,
        images,
        spec=replace(spec, threads=threads),
        state_dir=settings.state_dir,
        thresholds=thresholds(ds),
        runs=args.runs,
        available=available,
        use_cache=not args.no_cache,
        measure_single=True,
        models=own,
    )
    source = "cached in " + str(settings.state_dir) if sel.from_cache else "measured now"
    print(format_table(sel.trials, sel.provider))
    print(
        f"chosen: {sel.provider} ({source}); session order: {', '.join(sel.providers_in_order())}"
    )
    return 0
