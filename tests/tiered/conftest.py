"""Fixtures of the tiered-storage tests: RSA key pairs on disk (made once per session)."""
from __future__ import annotations

from pathlib import Path

import pytest

from logcore.tiered.encryption import KeyRing, generate_key_pair_pem


@pytest.fixture(scope="session")
def key_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("keys")
    files = {}
    for key_id in ("k1", "k2"):
        public, private = generate_key_pair_pem()
        (folder / f"{key_id}-public.pem").write_bytes(public)
        (folder / f"{key_id}-private.pem").write_bytes(private)
        files[key_id] = (folder / f"{key_id}-public.pem", folder / f"{key_id}-private.pem")
    return files


@pytest.fixture(scope="session")
def ring_k1(key_files) -> KeyRing:
    return KeyRing.from_pem_files({"k1": key_files["k1"]}, "k1")


@pytest.fixture(params=["folder", pytest.param("s3", marks=pytest.mark.s3)])
def remote(request, tmp_path, storage_targets, monkeypatch):
    """(remote root url, storage options): a local folder, or a bucket on the session's S3 server.

    A root never stores credentials: the readers a test opens without the writer's settings
    (LogRoot.open(url), `seglog consume`) find them in the environment, as a user's would."""
    if request.param == "folder":
        return str(tmp_path / "remote"), {}
    target = storage_targets.make("s3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", target.storage_options["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", target.storage_options["secret"])
    return target.url, target.storage_options
