"""Runtime overrides: merge rules, precedence over file and environment, drops, a full disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agent.service.hotconfig import entries, patch_of, reset_patch
from agent.service.overrides import Override, OverrideStore, RuntimeOverrides, apply_stored
from agent.settings import AgentSettings

ZONE = {"polygon": [[0, 0], [0.5, 0], [0.5, 1], [0, 1]], "objects": ["person"]}


def _settings(tmp_path: Path, **extra: object) -> AgentSettings:
    cams = [{"id": "front", "source": "a.mp4", "zones": {"right": ZONE}}]
    return AgentSettings(state_dir=tmp_path, cameras=cams, **extra)  # type: ignore[arg-type]


def test_patch_round_trips_through_flat_paths() -> None:
    """A patch becomes one entry per value, zone and line, and back."""
    patch = {
        "detector": {"conf_threshold": 0.4},
        "publish": {"mode": "on_change"},
        "cameras": {"front": {"fps": 5, "zones": {"left": ZONE, "right": None}}},
    }
    flat = entries(patch)
    assert set(flat) == {
        "detector.conf_threshold",
        "publish.mode",
        "cameras.front.fps",
        "cameras.front.zones.left",
        "cameras.front.zones.right",
    }
    assert patch_of(flat) == patch


def test_later_set_wins_and_earlier_ones_stay(tmp_path: Path) -> None:
    """Each config set merges into the kept overrides; the file holds them all."""
    ov = RuntimeOverrides.start(_settings(tmp_path))
    assert ov.record({"detector.conf_threshold": 0.4, "cameras.front.fps": 5}, 1.0)["persisted"]
    ov.record({"detector.conf_threshold": 0.6}, 2.0)
    stored = OverrideStore(tmp_path).load()
    assert {k: o.value for k, o in stored.items()} == {
        "detector.conf_threshold": 0.6,
        "cameras.front.fps": 5,
    }
    assert stored["cameras.front.fps"].ts < stored["detector.conf_threshold"].ts
    assert not list(tmp_path.glob("*.tmp"))


def test_runtime_beats_environment_beats_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At start a kept override wins over EDGE_AGENT__ variables, which win over the file."""
    monkeypatch.setenv("EDGE_AGENT__DETECTOR__CONF_THRESHOLD", "0.3")
    monkeypatch.setenv("EDGE_AGENT__DETECTOR__IOU_THRESHOLD", "0.5")
    store = OverrideStore(tmp_path)
    store.save({"detector.conf_threshold": Override(0.7, "2026-11-26T00:00:00.000000Z")})
    settings = AgentSettings(state_dir=tmp_path, detector={"conf_threshold": 0.2})  # type: ignore[arg-type]
    ov = RuntimeOverrides.start(settings)
    assert settings.detector.conf_threshold == 0.7
    assert settings.detector.iou_threshold == 0.5
    values = ov.describe(settings)["values"]
    assert values["detector.conf_threshold"]["source"] == "runtime"
    assert values["detector.conf_threshold"]["base"] == 0.3
    assert values["detector.iou_threshold"] == {
        "value": 0.5,
        "source": "env",
        "env": "EDGE_AGENT__DETECTOR__IOU_THRESHOLD",
    }
    assert values["detector.max_det"]["source"] == "file"


def test_overrides_that_no_longer_fit_are_dropped_not_fatal(tmp_path: Path) -> None:
    """A removed camera's and an invalid override are dropped and the file rewritten."""
    ts = "2026-11-26T00:00:00.000000Z"
    OverrideStore(tmp_path).save(
        {
            "detector.conf_threshold": Override(0.4, ts),
            "cameras.back.fps": Override(5, ts),
            "detector.iou_threshold": Override(7, ts),
            "cameras.front.zones.left": Override(ZONE, ts),
            "cameras.front.zones.bad": Override({"polygon": [[0, 0], [1, 0]]}, ts),
            "mqtt.port": Override(1, ts),
        }
    )
    settings = _settings(tmp_path)
    with capture_logs() as logs:
        ov = RuntimeOverrides.start(settings)
    dropped = {e["override"]: e for e in logs if e["event"] == "override_dropped"}
    assert set(dropped) == {
        "cameras.back.fps",
        "detector.iou_threshold",
        "cameras.front.zones.bad",
        "mqtt.port",
    }
    assert dropped["cameras.back.fps"]["log_level"] == "info"
    assert "camera back is not configured" in dropped["cameras.back.fps"]["reason"]
    assert dropped["detector.iou_threshold"]["log_level"] == "warning"
    assert "iou_threshold" in dropped["detector.iou_threshold"]["reason"]
    assert set(ov.current) == {"detector.conf_threshold", "cameras.front.zones.left"}
    assert settings.detector.conf_threshold == 0.4
    assert settings.detector.iou_threshold == 0.45
    assert set(settings.cameras[0].zones) == {"right", "left"}
    assert set(OverrideStore(tmp_path).load()) == set(ov.current)


def test_zone_override_without_objects_is_dropped(tmp_path: Path) -> None:
    """A kept zone is dropped when the new file turns objects off."""
    stored = {"cameras.front.zones.left": Override(ZONE, "t")}
    settings = _settings(tmp_path, objects={"enabled": False})
    assert apply_stored(settings, stored) == {}
    assert set(settings.cameras[0].zones) == {"right"}


def test_unreadable_file_starts_without_overrides(tmp_path: Path) -> None:
    """A corrupt overrides.json is logged and ignored, never a failure to start."""
    (tmp_path / "overrides.json").write_text("{not json")
    settings = _settings(tmp_path)
    assert RuntimeOverrides.start(settings).current == {}


def test_write_failure_applies_but_says_it_will_not_survive(tmp_path: Path) -> None:
    """When overrides.json cannot be written the reply says so; the value is kept in memory."""
    ov = RuntimeOverrides.start(_settings(tmp_path))
    (tmp_path / "overrides.json").mkdir()  # os.replace onto a directory fails
    result = ov.record({"detector.conf_threshold": 0.4})
    assert result["persisted"] is False
    assert "will not survive a restart" in result["warning"]
    assert "overrides.json" in result["warning"]
    assert ov.current["detector.conf_threshold"].value == 0.4
    assert not list(tmp_path.glob("*.tmp"))


def test_reset_patch_removes_runtime_zones_and_restores_values(tmp_path: Path) -> None:
    """config reset's patch sets the base values back and removes zones the file lacks."""
    base = _settings(tmp_path)
    current = base.model_copy(deep=True)
    current.cameras = [current.cameras[0].model_copy(update={"fps": 3.0})]
    current.cameras[0].zones["left"] = current.cameras[0].zones["right"]
    patch = reset_patch(current, base, objects_enabled=True)
    assert patch["cameras"]["front"]["fps"] is None
    assert patch["cameras"]["front"]["zones"]["left"] is None
    assert patch["cameras"]["front"]["zones"]["right"] == json.loads(
        json.dumps(base.cameras[0].zones["right"].model_dump(mode="json"))
    )


def test_config_show_local_names_sources_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`config show --config FILE` prints the effective values and their sources, read-only."""
    from agent.cli import main

    cfg = tmp_path / "agent.yaml"
    cfg.write_text(f"state_dir: {tmp_path}\ncameras: [{{id: front, source: a.mp4}}]\n")
    ts = "2026-11-26T00:00:00.000000Z"
    OverrideStore(tmp_path).save(
        {"detector.conf_threshold": Override(0.5, ts), "cameras.gone.fps": Override(3, ts)}
    )
    before = (tmp_path / "overrides.json").read_bytes()
    assert main(["config", "show", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"  detector.conf_threshold = 0.5  [runtime ({ts}; without it: 0.25)]" in out
    assert "  detector.iou_threshold = 0.45  [file]" in out
    assert not any(line.strip().startswith("cameras.gone") for line in out)
    assert (tmp_path / "overrides.json").read_bytes() == before


def test_class_filter_the_model_lacks_is_dropped_after_load(tmp_path: Path) -> None:
    """A kept detector.classes is checked against the loaded model's labels, not fatal."""
    from agent.detect.inputs import build_detector, thresholds
    from tests.agent_proc import pick_model

    ts = "2026-11-26T00:00:00.000000Z"
    OverrideStore(tmp_path).save(
        {"detector.classes": Override(["car"], ts), "detector.conf_threshold": Override(0.5, ts)}
    )
    settings = AgentSettings(state_dir=tmp_path, detector={"model": str(pick_model())})  # type: ignore[arg-type]
    ov = RuntimeOverrides.start(settings)
    assert settings.detector.classes is None and set(ov.held) == {"detector.classes"}
    detector = build_detector(settings.detector)  # the pose model: person only
    ov.apply_held(settings, lambda ds: detector.check_thresholds(thresholds(ds)))
    assert settings.detector.classes is None
    assert set(ov.current) == {"detector.conf_threshold"}
    assert set(OverrideStore(tmp_path).load()) == {"detector.conf_threshold"}

    OverrideStore(tmp_path).save({"detector.classes": Override(["person"], ts)})
    settings = AgentSettings(state_dir=tmp_path, detector={"model": str(pick_model())})  # type: ignore[arg-type]
    ov = RuntimeOverrides.start(settings)
    ov.apply_held(settings, lambda ds: detector.check_thresholds(thresholds(ds)))
    assert settings.detector.classes == ["person"]
