"""Arrows point down: the fleet mechanism lives in agent/fleet, the CLI only parses and prints."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "agent"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted((AGENT / "fleet").glob("*.py")), ids=lambda p: p.name)
def test_fleet_never_imports_commands(path: Path) -> None:
    """No module of agent/fleet imports agent.commands (commands use fleet, not the reverse)."""
    up = sorted(m for m in _imports(path) if m.split(".")[:2] == ["agent", "commands"])
    assert not up, f"{path.name} imports {up}"


def test_fleet_command_only_parses_and_prints() -> None:
    """commands/fleet.py stays under 200 lines: the rollout engine is agent/fleet/runner.py."""
    lines = (AGENT / "commands" / "fleet.py").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200


def test_commands_leave_through_one_function() -> None:
    """Only agent/fleet/session.py builds a command's MQTT 5 properties (Session.command), so
    whatever every command must carry is added in one place."""
    builders = [
        p.relative_to(AGENT.parent).as_posix()
        for folder in ("commands", "fleet")
        for p in sorted((AGENT / folder).glob("*.py"))
        if ".ResponseTopic =" in p.read_text(encoding="utf-8")
    ]
    assert builders == ["agent/fleet/session.py"]
