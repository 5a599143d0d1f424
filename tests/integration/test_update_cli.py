"""Operator tools: keygen -> sign round trip, and push-model to devices over a real broker."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from agent.cli import main
from agent.mqtt.topics import Topics
from agent.settings import ModelsSettings
from agent.update.keys import parse_public_key
from agent.update.manifest import find_signer
from agent.update.store import ModelStore
from tests.brokers import retain_status
from tests.update import models
from tests.update.harness import running

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def base():
    return models.base_model()


@pytest.fixture(scope="module")
def v2(tmp_path_factory, base):
    return models.other_model(base) or models.variant(
        base, tmp_path_factory.mktemp("cli") / "v2.onnx"
    )


def _printed(out: str, key: str) -> list[dict[str, Any]]:
    """The JSON objects push-model printed (log lines share stdout in-process)."""
    found = []
    for line in out.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and key in obj:
            found.append(obj)
    return found


def _keygen(tmp_path: Path, capsys) -> str:
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--name", "op"]) == 0
    return capsys.readouterr().out.strip()


def test_keygen_sign_round_trip(tmp_path, capsys, base):
    """sign's manifest describes the model and its signature verifies with keygen's key."""
    pub = _keygen(tmp_path, capsys)
    assert (tmp_path / "keys" / "op.pub").read_text().strip() == pub
    key = str(tmp_path / "keys" / "op.key")
    assert main(["sign", "--key", key, "--model", str(base), "--version", "7"]) == 0
    out = json.loads(capsys.readouterr().out)
    m = out["manifest"]
    assert m["version"] == 7 and m["size"] == base.stat().st_size and m["format"] == "onnx"
    assert m["task"] == "pose" and m["labels"] == ["person"] and len(m["sha256"]) == 64
    signer = find_signer(m, base64.b64decode(out["signature"]), (parse_public_key(pub, "t"),))
    assert signer is not None


def test_sign_errors_are_one_line(tmp_path, capsys, base):
    """Signing without a version or with a public key as private key fails clearly."""
    import onnx

    _keygen(tmp_path, capsys)
    key = str(tmp_path / "keys" / "op.key")
    proto = onnx.load(str(base))
    kept = [p for p in proto.metadata_props if p.key != "model_version"]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    unversioned = tmp_path / "unversioned.onnx"
    onnx.save_model(proto, str(unversioned))
    assert main(["sign", "--key", key, "--model", str(unversioned)]) == 4
    assert "pass --version N" in capsys.readouterr().err
    pub = str(tmp_path / "keys" / "op.pub")
    assert main(["sign", "--key", pub, "--model", str(base), "--version", "2"]) == 2


class FakeDevice:
    """MQTT glue around a real UpdateManager, the way the agent wires it."""

    def __init__(self, broker, device: str, manager, groups=()) -> None:
        self.topics = Topics("vision", device, tuple(groups))
        self.manager = manager
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        self.client.on_message = self._on_message
        self.ready = threading.Event()
        self.client.on_subscribe = lambda *a: self.ready.set()
        self.client.connect(broker.host, broker.port)
        subs = self.topics.cmd_subscriptions() + self.topics.upload_subscriptions()
        self.client.subscribe([(t, 1) for t in subs])
        self.client.loop_start()
        assert self.ready.wait(10)
        # Announced as an agent announces itself: operator commands check it exists.
        retain_status(broker, device, {"state": "online", "groups": list(groups)})

    def _on_message(self, client, userdata, msg) -> None:
        up = self.topics.parse_upload(msg.topic)
        if up is not None:
            self.manager.on_chunk(up[0], up[1], msg.payload)
            return
        if self.topics.parse_cmd(msg.topic) != "model/deploy":
            return
        body = json.loads(msg.payload)
        response = getattr(msg.properties, "ResponseTopic", None)
        correlation = getattr(msg.properties, "CorrelationData", None)

        def reply(ok: bool, result: Any, code: str | None, message: str) -> None:
            payload = json.dumps(
                {
                    "id": body.get("id"),
                    "ok": ok,
                    "result": result,
                    "error": None if ok else {"code": code, "message": message},
                    "ts": "2026-11-22T08:00:00.000000Z",
                }
            ).encode()
            self.client.publish(self.topics.reply("model/deploy"), payload, qos=1)
            if response:
                props = Properties(PacketTypes.PUBLISH)
                props.CorrelationData = correlation
                self.client.publish(response, payload, qos=1, properties=props)

        def accepted() -> None:
            progress = {"id": body.get("id"), "stage": "accepted", "ts": "2026-11-22T08:00:00Z"}
            self.client.publish(self.topics.progress("model/deploy"), json.dumps(progress), qos=1)

        self.manager.deploy(body, reply, accepted)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _push(broker, tmp_path, model, *target, version=2, extra=()):
    return main(
        [
            "push-model",
            "--broker",
            f"{broker.host}:{broker.port}",
            *target,
            "--model",
            str(model),
            "--key",
            str(tmp_path / "keys" / "op.key"),
            "--version",
            str(version),
            *extra,
        ]
    )


def test_push_model_by_chunks_to_a_device(tmp_path, capsys, broker, base, v2):
    """push-model sends command + chunks; the device commits; the ok reply is printed, exit 0."""
    pub = _keygen(tmp_path, capsys)
    settings = ModelsSettings(trusted_keys=[pub], health_frames=3)
    with running(tmp_path / "dev", base, settings) as (manager, _):
        dev = FakeDevice(broker, "dev1", manager)
        try:
            t0 = time.monotonic()
            rc = _push(broker, tmp_path, v2, "--device", "dev1", extra=["--chunk-size", "65536"])
            out = capsys.readouterr().out
            assert rc == 0, out
            (reply,) = _printed(out, "ok")
            assert reply["ok"] and reply["result"]["model"]["version"] == 2
            assert time.monotonic() - t0 < 30
            # Same version again: anti-rollback error reply, exit status 1.
            assert _push(broker, tmp_path, v2, "--device", "dev1") == 1
            err = _printed(capsys.readouterr().out, "ok")[0]["error"]
            assert err["code"] == "version_not_newer"
        finally:
            dev.close()
    assert ModelStore(tmp_path / "dev").active.version == 2


def test_push_model_to_a_group_by_url(tmp_path, capsys, broker, base, v2):
    """A group deploy by URL reaches every member; each reply is printed with its device."""
    from tests.update.harness import file_server

    pub = _keygen(tmp_path, capsys)
    settings = ModelsSettings(trusted_keys=[pub], health_frames=3)
    with (
        file_server({"/v2.onnx": v2}) as url,
        running(tmp_path / "a", base, settings) as (ma, _),
        running(tmp_path / "b", base, settings) as (mb, _),
    ):
        devs = [FakeDevice(broker, "a", ma, ["g1"]), FakeDevice(broker, "b", mb, ["g1"])]
        try:
            rc = _push(
                broker,
                tmp_path,
                v2,
                "--group",
                "g1",
                extra=["--via", "url", f"{url}/v2.onnx", "--timeout", "60", "--expect", "2"],
            )
        finally:
            for d in devs:
                d.close()
    lines = _printed(capsys.readouterr().out, "reply")
    assert rc == 0
    assert sorted(x["device"] for x in lines) == ["a", "b"]
    assert all(x["reply"]["ok"] for x in lines)


def test_push_model_times_out_without_a_device(tmp_path, capsys, broker, base, recorder):
    """No device answering: exit status 3 after --accept-timeout, and no chunk is sent."""
    rec = recorder(broker, ["vision/ghost/#"])
    retain_status(broker, "ghost", {"state": "offline"})  # known, but not there
    _keygen(tmp_path, capsys)
    extra = ["--timeout", "0.5", "--accept-timeout", "0.5"]
    rc = _push(broker, tmp_path, base, "--device", "ghost", extra=extra)
    assert rc == 3
    assert rec.wait_for(lambda r: len(r.on("vision/ghost/cmd/model/deploy")) == 1, 5)
    assert not [m for m in rec.messages if "/model/upload/" in m.topic]
