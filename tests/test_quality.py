"""Lint, format and strict typing are part of the test suite."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "argv",
    [
        (sys.executable, "-m", "ruff", "check", "."),
        (sys.executable, "-m", "ruff", "format", "--check", "."),
        (sys.executable, "-m", "mypy", "--strict", "agent"),
    ],
    ids=["ruff-check", "ruff-format", "mypy-strict"],
)
def test_tool_passes(argv):
    """The tool reports no problems on the whole tree."""
    proc = _run(*argv)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


#: Where each part of ``agent`` sits: a module may import only from a lower layer (base
#: modules also from each other). Arrows point down (STYLE.md 15): a base module imports no
#: stage, a stage never imports the package that consumes it, and ``mqtt`` is transport
#: that no stage needs (the payload records are the base module ``messages``). A new
#: module or package must be placed here.
LAYERS: dict[str, int] = {
    # base: the package (__version__), payload records, configuration, logging, helpers
    **dict.fromkeys(
        ("agent", "messages", "settings", "provider_names", "errors", "log", "cv", "osthread"),
        0,
    ),
    **dict.fromkeys(("frames", "stats", "causes", "redact"), 0),
    # stages, each only below the ones that consume it
    **dict.fromkeys(("capture", "detect"), 1),
    **dict.fromkeys(("regions", "objects", "update", "modeltools"), 2),
    **dict.fromkeys(("mqtt", "render"), 3),
    "fleet": 4,
    "service": 5,
    "commands": 6,
    "cli": 7,
    "__main__": 8,
}


def _unit(module: str) -> str:
    """'agent.detect.runtime' -> 'detect', 'agent.settings' -> 'settings', 'agent' -> 'agent'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _is_module(root: Path, module: str) -> bool:
    path = root.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _agent_imports(root: Path, path: Path, module: str) -> list[tuple[int, str]]:
    """(line, module) of every ``agent`` import in ``path``: top level, lazy or TYPE_CHECKING."""
    found: list[tuple[int, str]] = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            for a in node.names:  # ``from agent import x``: module x, or a name of agent
                name = f"{target}.{a.name}"
                found.append((node.lineno, name if _is_module(root, name) else target))
    return [(line, m) for line, m in found if m == "agent" or m.startswith("agent.")]


def import_violations(root: Path) -> list[str]:
    """Every import under ``root/agent`` that runs up or across the layers, as 'file:line: why'."""
    problems = [
        f"LAYERS names agent.{u}, which does not exist"
        for u in LAYERS
        if u != "agent" and not _is_module(root, f"agent.{u}")
    ]
    for path in sorted((root / "agent").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        src = _unit(module)
        if src not in LAYERS:
            problems.append(f"{path.relative_to(root)}: agent.{src} has no layer in LAYERS")
            continue
        for line, target in sorted(set(_agent_imports(root, path, module))):
            dst = _unit(target)
            if dst == src or (LAYERS.get(dst) == LAYERS[src] == 0):
                continue
            if dst not in LAYERS or LAYERS[dst] >= LAYERS[src]:
                where = "unplaced" if dst not in LAYERS else f"layer {LAYERS[dst]}"
                problems.append(
                    f"{path.relative_to(root)}:{line}: agent.{src} (layer {LAYERS[src]}) "
                    f"imports {target} (agent.{dst}, {where})"
                )
    return problems


def test_imports_point_down():
    """No module imports from its own layer or above (base modules may share layer 0)."""
    assert import_violations(ROOT) == []


def test_import_check_sees_every_kind_of_upward_import(tmp_path):
    """Top-level, lazy, TYPE_CHECKING, relative and ``from agent import`` imports all count."""
    for name in ("agent/__init__.py", "agent/objects/__init__.py", "agent/mqtt/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    for unit in LAYERS.keys() - {"agent", "objects", "mqtt"}:
        (tmp_path / f"agent/{unit}.py").write_text("")
    (tmp_path / "agent/mqtt/messages.py").write_text("X = 1\n")
    (tmp_path / "agent/settings.py").write_text("from agent import service\n")
    (tmp_path / "agent/objects/stage.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from agent import errors, log\n"
        "from ..mqtt import messages\n"
        "if TYPE_CHECKING:\n    import agent.render\n"
        "def f():\n    from agent.mqtt.messages import X\n"
    )
    assert import_violations(tmp_path) == [
        "agent/objects/stage.py:3: agent.objects (layer 2) imports agent.mqtt.messages "
        "(agent.mqtt, layer 3)",
        "agent/objects/stage.py:5: agent.objects (layer 2) imports agent.render "
        "(agent.render, layer 3)",
        "agent/objects/stage.py:7: agent.objects (layer 2) imports agent.mqtt.messages "
        "(agent.mqtt, layer 3)",
        "agent/settings.py:1: agent.settings (layer 0) imports agent.service "
        "(agent.service, layer 5)",
    ]
