"""`edge-agent sign`: a signed deploy manifest for an ONNX model, as JSON on stdout."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agent.update.keys import load_private_key
from agent.update.manifest import manifest_for_model, sign_manifest


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", type=Path, required=True, help="private key (PEM) from keygen")
    p.add_argument("--model", type=Path, required=True, help="the .onnx file to deploy")
    p.add_argument(
        "--version",
        type=int,
        default=None,
        help="model version (default: the model_version metadata; must exceed the device's)",
    )
    p.add_argument("--name", default=None, help="model name (default: metadata or file name)")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sign", help="print a signed deploy manifest for an ONNX model")
    add_model_args(p)
    p.set_defaults(handler=run)


def signed_manifest(args: argparse.Namespace) -> dict[str, Any]:
    """``{"manifest": {...}, "signature": "..."}`` for the model and key in ``args``."""
    key = load_private_key(args.key)
    manifest = manifest_for_model(args.model, name=args.name, version=args.version)
    return {"manifest": manifest, "signature": sign_manifest(manifest, key)}


def run(args: argparse.Namespace) -> int:
    print(json.dumps(signed_manifest(args), indent=2))
    return 0
