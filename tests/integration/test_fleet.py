"""fleet status/rollout against real agents on a real mosquitto (320 INT8 model, 3 agents).

The agents are started once for the module (starting one costs seconds of CPU); each test
deploys its own version, higher than the last, so the tests run in file order.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.cli import main
from tests.agent_proc import MEDIA, ROOT, AgentProc
from tests.brokers import Broker, Recorder, retain_status, wait_until
from tests.update.models import nan_model, variant

pytestmark = pytest.mark.timeout(120)

DEVICES = ("fa", "fb", "fc")
BASE = ROOT / "models" / "yolo11n-pose-320-int8.onnx"


class Fleet:
    def __init__(self, broker: Broker, key: Path, agents: list[AgentProc], rec: Recorder) -> None:
        self.broker, self.key, self.agents, self.rec = broker, key, agents, rec

    @property
    def url(self) -> str:
        return f"{self.broker.host}:{self.broker.port}"

    def deploy_ids(self, device: str) -> list[str]:
        """Ids of every deploy command that reached ``device`` (duplicates kept)."""
        return [
            json.loads(m.payload)["id"] for m in self.rec.on(f"vision/{device}/cmd/model/deploy")
        ]

    def status(self, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
        capsys.readouterr()
        assert main(["fleet", "status", "--broker", self.url, "--json"]) == 0
        out = capsys.readouterr().out.strip().splitlines()[-1]
        return {d["device"]: d for d in json.loads(out)["devices"]}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    import shutil

    from tests.brokers import MOSQUITTO

    if shutil.which(MOSQUITTO) is None or not BASE.is_file():
        pytest.skip("needs mosquitto and models/yolo11n-pose-320-int8.onnx")
    root = tmp_path_factory.mktemp("fleet")
    broker = Broker(root / "broker")
    broker.start()
    keys = root / "keys"
    assert main(["keygen", "--out", str(keys), "--name", "op"]) == 0
    pub = (keys / "op.pub").read_text().strip()
    rec = Recorder(broker, ["vision/+/cmd/#", "vision/+/model/upload/#"]).start()
    agents = []
    try:
        for d in DEVICES:
            (root / d).mkdir()
            cams = [{"id": "cam", "source": str(MEDIA / "*.jpg"), "loop": True, "fps": 2}]
            overrides = {
                "detector": {"model": str(BASE), "sessions": 1, "threads": 1},
                "models": {"trusted_keys": [pub], "health_frames": 3},
                "fleet": {"groups": ["lab"]},
            }
            agents.append(
                AgentProc(broker, root / d, cameras=cams, device_id=d, overrides=overrides).start()
            )
        for a in agents:
            assert a.wait_logged("mqtt_connected", 60), a.tail()
        yield Fleet(broker, keys / "op.key", agents, rec)
    finally:
        for a in agents:
            a.stop()
        rec.close()
        broker.close()


def _rollout(fl: Fleet, model: Path, version: int, *extra: str) -> list[str]:
    return ["fleet", "rollout", "--broker", fl.url, "--key", str(fl.key), "--model",
            str(model), "--version", str(version), "--device-timeout", "60", *extra]  # fmt: skip


def test_status_lists_every_agent(fleet, capsys):
    """fleet status --json: every agent online, in its group, on the bundled model."""
    assert wait_until(lambda: len(fleet.status(capsys)) == 3, 30)
    rows = fleet.status(capsys)
    for d in DEVICES:
        assert rows[d]["state"] == "online" and rows[d]["groups"] == ["lab"], rows[d]
        assert rows[d]["model"] and isinstance(rows[d]["model_version"], int)
        assert rows[d]["provider"] and rows[d]["stale"] is False


def test_failing_canary_aborts_and_others_receive_nothing(fleet, capsys, tmp_path):
    """A canary that refuses the model aborts the rollout; no deploy reaches the others."""
    bad = nan_model(BASE, tmp_path / "nan.onnx")
    before = {d: len(fleet.deploy_ids(d)) for d in DEVICES}
    rc = main([*_rollout(fleet, bad, 10, "--devices", "fa,fb,fc", "--canary", "1"), "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 1
    assert report == {
        "state": "aborted",
        "devices": {
            "fa": {"state": "failed", "code": "non_finite_output"},
            "fb": {"state": "not_attempted", "code": None},
            "fc": {"state": "not_attempted", "code": None},
        },
    }
    time.sleep(0.5)  # let any stray publish arrive before asserting it did not
    assert len(fleet.deploy_ids("fa")) == before["fa"] + 1
    assert len(fleet.deploy_ids("fb")) == before["fb"]
    assert len(fleet.deploy_ids("fc")) == before["fc"]


def test_good_rollout_reaches_every_device(fleet, capsys, tmp_path):
    """A group rollout in waves commits on all devices; fleet status shows the version."""
    v11 = variant(BASE, tmp_path / "v11.onnx")
    rc = main([*_rollout(fleet, v11, 11, "--group", "lab", "--canary", "1"), "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0, report
    assert report["state"] == "completed"
    assert report["devices"] == {d: {"state": "committed", "code": None} for d in DEVICES}
    rows = fleet.status(capsys)
    assert {rows[d]["model_version"] for d in DEVICES} == {11}


def test_killed_rollout_resumes_without_deploying_twice(fleet, capsys, tmp_path):
    """A rollout SIGKILLed mid-way and re-run with --state completes; one deploy id per device."""
    v12 = variant(BASE, tmp_path / "v12.onnx")
    state = tmp_path / "ro.json"
    args = _rollout(fleet, v12, 12, "--devices", "fa,fb,fc", "--canary", "1",
                    "--step-factor", "1", "--state", str(state))  # fmt: skip
    before = {d: len(fleet.deploy_ids(d)) for d in DEVICES}
    log = (tmp_path / "rollout.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent", *args], cwd=ROOT, stdout=log, stderr=log
    )  # fmt: skip

    def second_sending() -> bool:
        try:
            devs = json.loads(state.read_text())["devices"]
        except (OSError, ValueError):
            return False
        return devs["fa"]["state"] == "committed" and devs["fb"]["state"] == "sending"

    try:
        assert wait_until(second_sending, 60, 0.01), (tmp_path / "rollout.log").read_text()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["devices"] == {d: {"state": "committed", "code": None} for d in DEVICES}
    time.sleep(0.5)
    for d in DEVICES:
        new = fleet.deploy_ids(d)[before[d] :]
        assert len(set(new)) == 1, (d, new)  # a resend, if any, carries the same id
    assert {fleet.status(capsys)[d]["model_version"] for d in DEVICES} == {12}


def _uploads(fl: Fleet, device: str) -> int:
    return sum(1 for m in fl.rec.messages if m.topic.startswith(f"vision/{device}/model/upload/"))


def test_push_model_sends_no_chunk_to_a_refusing_or_absent_device(fleet, capsys, tmp_path):
    """push-model waits for acceptance: a bad signature or no device costs the deploy only."""
    assert main(["keygen", "--out", str(tmp_path / "k"), "--name", "x"]) == 0
    v20 = variant(BASE, tmp_path / "v20.onnx")
    capsys.readouterr()
    before = _uploads(fleet, "fa")
    push = ["push-model", "--broker", fleet.url, "--model", str(v20), "--version", "20"]
    rc = main([*push, "--device", "fa", "--key", str(tmp_path / "k" / "x.key")])
    reply = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 1 and reply["error"]["code"] == "bad_signature", reply
    retain_status(fleet.broker, "ghost", {"state": "offline"})  # known, but not there
    try:
        rc = main([*push, "--device", "ghost", "--key", str(fleet.key), "--accept-timeout", "1",
                   "--timeout", "1"])  # fmt: skip
    finally:
        retain_status(fleet.broker, "ghost", None)
    assert rc == 3
    time.sleep(0.5)
    assert _uploads(fleet, "fa") == before and _uploads(fleet, "ghost") == 0
    assert len(fleet.rec.on("vision/ghost/cmd/model/deploy")) == 1


def test_push_model_streams_after_acceptance(fleet, capsys, tmp_path):
    """An accepting agent gets every chunk after its progress message and commits."""
    v21 = variant(BASE, tmp_path / "v21.onnx")
    rc = main(["push-model", "--broker", fleet.url, "--device", "fc", "--key", str(fleet.key),
               "--model", str(v21), "--version", "21", "--timeout", "60"])  # fmt: skip
    reply = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and reply["result"]["state"] == "committed", reply
    assert _uploads(fleet, "fc") > 0


def test_rollout_by_url_sends_no_chunk(fleet, capsys, tmp_path):
    """--url: the device downloads the file; the broker carries the deploy, no chunk."""
    from tests.update.harness import file_server

    v30 = variant(BASE, tmp_path / "v30.onnx")
    before = _uploads(fleet, "fa")
    with file_server({"/v30.onnx": v30}) as url:
        rc = main([*_rollout(fleet, v30, 30, "--devices", "fa", "--url", f"{url}/v30.onnx"),
                   "--json"])  # fmt: skip
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and report["devices"]["fa"] == {"state": "committed", "code": None}, report
    assert _uploads(fleet, "fa") == before


def test_device_restarted_mid_transfer_gets_the_deploy_again(fleet, capsys, tmp_path):
    """An agent SIGKILLed once its file started flowing comes back with a new boot_id; the
    rollout sends it the same command (and the file) again instead of timing out."""
    v31 = variant(BASE, tmp_path / "v31.onnx")
    agent = fleet.agents[DEVICES.index("fb")]
    before_up, before_ids = _uploads(fleet, "fb"), len(fleet.deploy_ids("fb"))
    out = tmp_path / "rollout.json"
    args = [*_rollout(fleet, v31, 31, "--devices", "fb", "--chunk-size", "65536"), "--json"]
    with out.open("wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "agent", *args], cwd=ROOT, stdout=f)
    try:
        assert wait_until(lambda: _uploads(fleet, "fb") > before_up, 60, 0.005), agent.tail()
        agent.signal(signal.SIGKILL)
        agent.wait(10)
        agent.close()
        agent.start()
        assert proc.wait(100) == 0, out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    report = json.loads(out.read_text().strip().splitlines()[-1])
    assert report["devices"]["fb"] == {"state": "committed", "code": None}, report
    ids = fleet.deploy_ids("fb")[before_ids:]
    assert len(ids) >= 2 and len(set(ids)) == 1, ids  # sent again, same id
    assert agent.wait_logged("mqtt_connected", 30)
    assert fleet.status(capsys)["fb"]["model_version"] == 31
