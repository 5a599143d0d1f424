"""Signing keys: keygen files, trusted-key loading and its error messages."""

from __future__ import annotations

import base64
import stat

import pytest

from agent.errors import ConfigError
from agent.settings import ModelsSettings
from agent.update.keys import (
    load_private_key,
    load_trusted_keys,
    parse_public_key,
    read_keys_file,
    write_keypair,
)

pytestmark = pytest.mark.timeout(20)


def test_keygen_writes_private_0600_and_raw_public(tmp_path):
    """keygen writes NAME.key (PEM PKCS#8, 0600) and NAME.pub (base64 of 32 raw bytes)."""
    files = write_keypair(tmp_path / "keys", "op")
    assert stat.S_IMODE(files.private.stat().st_mode) == 0o600
    assert files.private.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert files.public.read_text().strip() == files.public_b64
    assert len(base64.b64decode(files.public_b64)) == 32
    key = load_private_key(files.private)
    assert parse_public_key(files.public_b64, "t").public_key.public_bytes_raw() == (
        key.public_key().public_bytes_raw()
    )


def test_keygen_refuses_to_overwrite(tmp_path):
    """A second keygen with the same name fails unless forced."""
    write_keypair(tmp_path, "op")
    with pytest.raises(ConfigError, match="refusing to overwrite"):
        write_keypair(tmp_path, "op")
    write_keypair(tmp_path, "op", force=True)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not base64!!", "not valid base64"),
        (base64.b64encode(b"x" * 31).decode(), "got 31 bytes"),
        (base64.b64encode(b"x" * 64).decode(), "got 64 bytes"),
        ("", "got 0 bytes"),
    ],
)
def test_malformed_public_keys_name_their_origin(text, match):
    """A malformed trusted key is a ConfigError naming where it came from."""
    with pytest.raises(ConfigError, match=match) as e:
        parse_public_key(text, "models.trusted_keys[3]")
    assert "models.trusted_keys[3]" in str(e.value)


def test_trusted_keys_from_config_and_file_with_comments(tmp_path):
    """Keys come from the config list and the file (comments, blanks ignored), deduplicated."""
    a = write_keypair(tmp_path, "a").public_b64
    b = write_keypair(tmp_path, "b").public_b64
    f = tmp_path / "trusted"
    f.write_text(f"# fleet signers\n\n{b}  # build server\n{a}\n")
    keys = load_trusted_keys(ModelsSettings(trusted_keys=[a], trusted_keys_file=f))
    assert len(keys) == 2
    assert [k.origin for k in keys] == ["models.trusted_keys[0]", f"{f}:3"]


def test_bad_line_in_keys_file_names_the_line(tmp_path):
    """A bad key in the file is reported with file and line number."""
    f = tmp_path / "trusted"
    f.write_text("# ok\nAAAA\n")
    with pytest.raises(ConfigError, match=r"trusted:2"):
        read_keys_file(f)


def test_missing_keys_file_is_a_config_error(tmp_path):
    """A configured keys file that does not exist is a ConfigError."""
    with pytest.raises(ConfigError, match="cannot read"):
        load_trusted_keys(ModelsSettings(trusted_keys_file=tmp_path / "nope"))


def test_private_key_errors(tmp_path):
    """A missing file, a .pub file or a non-Ed25519 key are clear errors."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    with pytest.raises(ConfigError, match="cannot read"):
        load_private_key(tmp_path / "missing.key")
    pub = write_keypair(tmp_path, "k").public
    with pytest.raises(ConfigError, match="not an unencrypted PEM"):
        load_private_key(pub)
    ec_key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (tmp_path / "ec.key").write_bytes(ec_key)
    with pytest.raises(ConfigError, match="not an Ed25519 key"):
        load_private_key(tmp_path / "ec.key")
