"""LD_PRELOAD shims: a few C functions put in front of libc's for an agent under test (a
refused system call, a slow disk), built with the machine's C compiler."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def build_shim(source: str, workdir: Path, name: str) -> Path:
    """``source`` compiled into ``workdir/<name>.so``; the test is skipped with no compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip(f"no C compiler to build the {name} shim")
    src, lib = workdir / f"{name}.c", workdir / f"{name}.so"
    src.write_text(source)
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(lib), str(src), "-ldl"], check=True, timeout=60
    )
    return lib
