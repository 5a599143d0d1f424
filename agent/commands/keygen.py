"""`edge-agent keygen`: an Ed25519 key pair for signing model deploys."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent.update.keys import write_keypair


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("keygen", help="create an Ed25519 key pair for signing model deploys")
    p.add_argument("--out", type=Path, required=True, help="directory for NAME.key and NAME.pub")
    p.add_argument("--name", default="model-signing", help="file name stem (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="overwrite existing key files")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    files = write_keypair(args.out, args.name, force=args.force)
    print(files.public_b64)
    print(
        f"private key: {files.private} (mode 0600; keep it secret, off the devices)\n"
        f"public key:  {files.public} (add it to models.trusted_keys on the devices)",
        file=sys.stderr,
    )
    return 0
