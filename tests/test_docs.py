"""The README and docs say what the code does: their commands, files and configs are real."""

from __future__ import annotations

import itertools
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from agent.cli import build_parser
from agent.errors import ConfigError
from agent.settings import AgentSettings, load_settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
#: A path inside the repository, as docs name them (configs/rpi.yaml, docs/mqtt.md, ...).
REPO_PATH = re.compile(
    r"(?<![\w/.~-])((?:configs|docs|systemd|models|bench|assets|agent|tests|\.ci)/[\w./-]*\w)"
)
OPERATORS = {"&&", "||", "|", ";"}


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _blocks(path: Path) -> list[tuple[str, str]]:
    """(language, text) of each fenced code block."""
    return [(m[1], m[2]) for m in FENCE.finditer(path.read_text(encoding="utf-8"))]


def _shell_lines(text: str) -> list[str]:
    """Command lines of a shell block, continuation lines joined."""
    return text.replace("\\\n", " ").splitlines()


def _commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line: split at && || | ;, comments dropped."""
    out: list[list[str]] = [[]]
    for token in shlex.split(line, comments=True):
        if token in OPERATORS:
            out.append([])
        else:
            out[-1].append(token)
    return [c for c in out if c]


def _strip_prefix(argv: list[str]) -> list[str]:
    """argv without leading sudo [-u USER] and VAR=value assignments."""
    while argv:
        if argv[0] == "sudo":
            argv = argv[3:] if argv[1:2] == ["-u"] else argv[1:]
        elif re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):
            argv = argv[1:]
        else:
            break
    return argv


def _doc_commands() -> list[tuple[str, list[str]]]:
    """(where, argv) of every command in a sh/bash block of the README and docs."""
    found = []
    for path in DOCS:
        for lang, text in _blocks(path):
            if lang not in ("sh", "bash", "shell", "console"):
                continue
            for line in _shell_lines(text):
                for argv in _commands(line):
                    found.append((f"{_rel(path)}: {line.strip()[:80]}", _strip_prefix(argv)))
    return found


def _edge_agent_commands() -> list[tuple[str, list[str]]]:
    """Every `edge-agent ...` command line in code blocks and in inline code."""
    found = [(w, a[1:]) for w, a in _doc_commands() if a and a[0].endswith("edge-agent")]
    for path in DOCS:
        for span in INLINE.findall(path.read_text(encoding="utf-8")):
            if span.startswith("edge-agent ") and "," not in span and "..." not in span:
                found.append((f"{_rel(path)}: `{span}`", shlex.split(span)[1:]))
    return found


EDGE_AGENT = _edge_agent_commands()


def test_docs_name_edge_agent_commands():
    """The extraction finds the README's and docs' commands (the checks below check something)."""
    commands = {argv[0] for _, argv in EDGE_AGENT if argv}
    assert {"run", "watch", "doctor", "detect", "rollback", "config", "push-model"} <= commands
    assert len(EDGE_AGENT) >= 30


@pytest.mark.parametrize(("where", "argv"), EDGE_AGENT, ids=[w for w, _ in EDGE_AGENT])
def test_edge_agent_commands_parse(where, argv):
    """Every `edge-agent ...` command of the README and docs is accepted by the real CLI.

    A command in a code block must parse as written. Inline code may name a command
    with a few of its options (`edge-agent quantize --activations int8`): the command and
    each option named must exist.
    """
    parser = build_parser()
    if "`" not in where:
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:
            pytest.fail(f"{where}: the CLI refuses it (exit {e.code})")
        assert callable(args.handler)
        return
    sub = parser._subparsers._group_actions[0].choices
    assert argv and argv[0] in sub, f"{where}: no such command"
    node = sub[argv[0]]
    rest = argv[1:]
    if rest and node._subparsers is not None and not rest[0].startswith("-"):
        node = node._subparsers._group_actions[0].choices[rest[0]]
        rest = rest[1:]
    options = {o for action in node._actions for o in action.option_strings}
    for token in rest:
        if token.startswith("--"):
            assert token.split("=")[0] in options, f"{where}: no option {token}"


def _install_flags() -> set[str]:
    text = (ROOT / "systemd" / "install.sh").read_text(encoding="utf-8")
    return set(re.findall(r"^\s+(--[a-z-]+)(?:\)| \|)", text, re.MULTILINE))


INSTALLS = [(w, a) for w, a in _doc_commands() if a and a[0].endswith("systemd/install.sh")]


@pytest.mark.parametrize(("where", "argv"), INSTALLS, ids=[w for w, _ in INSTALLS])
def test_install_commands_use_real_options(where, argv):
    """Every `systemd/install.sh ...` in the docs uses options install.sh accepts."""
    flags = _install_flags()
    assert {"--ort", "--jetson", "--pi", "--dry-run"} <= flags
    for token in argv[1:]:
        if token.startswith("--"):
            assert token in flags, f"{where}: install.sh has no option {token}"


def _referenced_paths() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for ref in REPO_PATH.findall(text):
            found.append((_rel(path), ref.rstrip(".")))
        for doc in re.findall(r"(?<![\w/.])(\.\./[\w./-]+\.md)", text):
            found.append((_rel(path), doc))  # a document outside the repository
        for link in re.findall(r"\]\(([^)#\s]+)", text):
            if not re.match(r"[a-z]+:", link):
                target = (path.parent / link).resolve()
                found.append((_rel(path), _rel(target) if target.is_relative_to(ROOT) else link))
    return sorted(set(found))


def _outputs() -> set[str]:
    """Files the docs' own commands write (``--out X``): named, but not in the repository.

    An output directory (``--out models/``) covers the paths under it in the same block.
    """
    written = set()
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        units = [t for lang, t in _blocks(path) if lang in ("sh", "bash")]
        units += [s for s in INLINE.findall(text) if s.startswith("edge-agent ")]
        for unit in units:
            dirs = []
            for line in _shell_lines(unit):
                for argv in _commands(line):
                    for flag, value in itertools.pairwise(argv):
                        if flag in ("--out", "--draw", "--events"):
                            written.add(value.rstrip("/"))
                            if value.endswith("/"):
                                dirs.append(value)
            written |= {r for r in REPO_PATH.findall(unit) if any(r.startswith(d) for d in dirs)}
    return written


#: Named by docs being written on main together with these files (issue 22, regions).
PENDING: set[str] = set()
REFS = [
    r
    for r in _referenced_paths()
    if not re.search(r"[*<>{}]|^bench/results", r[1]) and r[1] not in _outputs()
]


@pytest.mark.parametrize(("doc", "ref"), REFS, ids=[f"{d}->{r}" for d, r in REFS])
def test_referenced_repo_files_exist(doc, ref):
    """Every repository path the README and docs name (or link to) exists in the repository."""
    assert not ref.startswith(".."), f"{doc} links outside the repository: {ref}"
    if ref in PENDING and not (ROOT / ref).exists():
        pytest.xfail(f"{doc} names {ref}, not written yet")
    assert (ROOT / ref).exists(), f"{doc} names {ref}, which is not in the repository"


CONFIG_REFS = sorted({r for _, r in REFS if re.fullmatch(r"configs/[\w.-]+\.yaml", r)})


@pytest.mark.parametrize("ref", CONFIG_REFS)
def test_referenced_configs_load(ref):
    """Every configs/*.yaml the docs name loads as a valid agent config."""
    assert load_settings(ROOT / ref).cameras


def _config_blocks() -> list[tuple[str, str]]:
    """YAML blocks of the docs that are agent configs (top-level keys are config sections)."""
    sections = set(AgentSettings.model_fields)
    found = []
    for path in DOCS:
        for i, (lang, text) in enumerate(_blocks(path)):
            if lang == "yaml":
                data = yaml.safe_load(text)
                if isinstance(data, dict) and set(data) <= sections:
                    found.append((f"{_rel(path)}#{i}", text))
    return found


CONFIG_BLOCKS = _config_blocks()


@pytest.mark.parametrize(("where", "text"), CONFIG_BLOCKS, ids=[w for w, _ in CONFIG_BLOCKS])
def test_yaml_config_snippets_are_valid(tmp_path, where, text):
    """Every agent-config YAML snippet in the docs passes the config's validation."""
    cfg = tmp_path / "snippet.yaml"
    cfg.write_text(text)
    try:
        load_settings(cfg)
    except ConfigError as e:
        pytest.fail(f"{where}: {e}")


def test_config_snippets_found():
    """The README's camera-and-broker config and the trusted_keys snippet are among them."""
    texts = "\n".join(t for _, t in CONFIG_BLOCKS)
    assert "rtsp://" in texts and "trusted_keys" in texts and "username" in texts


def test_ci_runs_the_readme_test_command():
    """.ci/run runs the README's test command verbatim."""
    readme_blocks = [t.strip() for lang, t in _blocks(ROOT / "README.md") if lang == "sh"]
    test_cmd = next(b for b in readme_blocks if b.endswith("-m pytest"))
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_cmd in ci


def test_readme_is_short_and_names_every_example_config():
    """The README stays a user's page (about 120 lines) and points at every shipped config."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 130
    for config in sorted((ROOT / "configs").glob("*.yaml")):
        assert f"configs/{config.name}" in text, f"README does not mention configs/{config.name}"


def test_bench_doc_keeps_method_and_classes_not_history():
    """docs/bench/README.md has the method and one section per CPU class, not per machine."""
    text = (ROOT / "docs" / "bench" / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert "## Method" in text and "AVX2 only" in text and "not measured" in text
    assert not re.search(r"^## Machine [A-Z]\b", text, re.MULTILINE)


def test_docs_agree_on_openvino_pi_wheel_and_csi_cameras():
    """The claims that once contradicted each other (issue 25, problem 5) now agree."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rpi = (ROOT / "configs" / "rpi.yaml").read_text(encoding="utf-8")
    operations = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    # OpenVINO wins on some CPUs only: no doc may call it faster on the same cores.
    for text in (readme, operations):
        assert "faster than the CPU provider on the same cores" not in text
    # The Pi runs the model quantized for ARM that rpi.yaml names, and the README says so.
    model = re.search(r"^\s*model:\s*(\S+)", rpi, re.M)
    assert model is not None and (ROOT / model.group(1)).is_file()
    assert Path(model.group(1)).name in readme
    assert "works as is" not in readme
    # CSI cameras: V4L2 is not how a libcamera Camera Module works, in every doc.
    assert "USB or CSI camera through V4L2" not in rpi
    assert "libcamera" in rpi and "libcamera" in operations and "libcamera" in readme


#: Placeholder ids: each stands for the docs' <name> in a topic or object id.
_PLACEHOLDERS = {
    "xpx": "<p>",
    "xdx": "<d>",
    "xcx": "<c>",
    "xlabelx": "<label>",
    "xzonex": "<zone>",
    "xlinex": "<line>",
    "xeventx": "<event_id>",
    "xnamex": "<name>",
}


def _templated(text: str) -> str:
    for token, name in _PLACEHOLDERS.items():
        text = text.replace(token, name)
    return text


def _discovery() -> list:
    from agent.mqtt.topics import Topics
    from agent.service.homeassistant import CameraObjectTopics, discovery_messages

    spec = CameraObjectTopics(
        zones=[("xzonex", "xlabelx")], lines=[("xlinex", "xlabelx", d) for d in ("in", "out")]
    )
    return discovery_messages(
        Topics("xpx", "xdx"),
        version="0",
        cameras={"xcx": ["xlabelx"]},
        health_interval_s=10,
        objects={"xcx": spec},
        motion=["xcx"],
    )


def test_mqtt_doc_lists_every_published_topic():
    """docs/mqtt.md's topic table has every topic the agent publishes (topics.py)."""
    from agent.mqtt.topics import Topics

    t = Topics("xpx", "xdx")
    published = [
        t.status, t.health, t.model, t.reply("xnamex"), t.progress("xnamex"),
        t.camera_detections("xcx"), t.camera_status("xcx"), t.camera_label("xcx", "xlabelx"),
        t.camera_snapshot("xcx"), t.camera_events("xcx"), t.event_snapshot("xcx", "xeventx"),
        t.zone_count("xcx", "xzonex", "xlabelx"), t.camera_motion("xcx"),
        t.line_count("xcx", "xlinex", "xlabelx", "in"),
    ]  # fmt: skip
    text = (ROOT / "docs" / "mqtt.md").read_text(encoding="utf-8")
    rows = {m[1] for m in re.finditer(r"^\| `([^`]+)`", text, re.MULTILINE)}
    missing = [_templated(topic) for topic in published if _templated(topic) not in rows]
    assert not missing, f"docs/mqtt.md's topic table lacks {missing}"


def test_homeassistant_doc_lists_every_entity_and_object_id():
    """docs/homeassistant.md names every discovery object id and each entity's state topic."""
    text = (ROOT / "docs" / "homeassistant.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    section = text.split("## Discovery topics and payloads", 1)[1].split("```", 1)[0]
    named = set(INLINE.findall(section.replace("\n", " ")))
    for msg in _discovery():
        object_id = _templated(msg.topic.split("/")[-2])
        assert object_id in named, f"object id {object_id} is not listed"
        state = _templated(json.loads(msg.payload)["state_topic"])
        state = state.removesuffix("/out") + "/in" if state.endswith("/out") else state
        component = msg.topic.split("/")[1]
        assert any(f"`{state}`" in row and f"`{component}`" in row for row in rows), (
            f"no {component} entity row with state from {state}"
        )


def test_mqtt_doc_says_what_the_last_will_ts_is():
    """The status row says the Last Will's ts is its connection's time, not the drop's."""
    text = (ROOT / "docs" / "mqtt.md").read_text(encoding="utf-8")
    (row,) = [line for line in text.splitlines() if line.startswith("| `<p>/<d>/status` |")]
    assert "the Last Will's `ts` is the connect time" in row


def test_exit_codes_documented_and_unit_agrees():
    """Each `run` exit status is in docs/operations.md; the unit restarts just the right ones."""
    from agent.errors import ModelError, ProviderError

    ops = (ROOT / "docs" / "operations.md").read_text()
    rows = dict(re.findall(r"^\s*\| (\d+) \| .* \| (not restarted|restarted after 5 s)", ops, re.M))
    for code in (0, 1, ConfigError.exit_code, ModelError.exit_code, ProviderError.exit_code):
        assert str(code) in rows, f"exit status {code} is not in docs/operations.md"
    unit = (ROOT / "systemd" / "edge-vision-agent.service").read_text()
    prevent = re.search(r"^RestartPreventExitStatus=(.*)$", unit, re.M)
    assert prevent is not None
    documented = {int(c) for c, how in rows.items() if how == "not restarted" and c != "0"}
    assert set(map(int, prevent.group(1).split())) == documented
