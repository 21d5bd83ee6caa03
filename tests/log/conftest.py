"""Log tests run against every storage kind: local disk, fsspec memory, a real S3 server
(SeaweedFS, or MinIO when Docker answers) and moto's S3 server; `root` is a local one."""
from __future__ import annotations

import pytest

from logcore.log.log_root import LogRoot


@pytest.fixture
def root(tmp_path):
    """A log root on local disk, closed after the test."""
    root = LogRoot.open(str(tmp_path / "root"), create=True)
    yield root
    root.close()


@pytest.fixture(params=["local", "memory",
                        pytest.param("seaweedfs", marks=pytest.mark.s3),
                        pytest.param("moto", marks=pytest.mark.s3)])
def root_target(request, storage_targets):
    """A fresh, empty root location on each storage kind."""
    return storage_targets.make(request.param)


@pytest.fixture
def open_root(root_target):
    """Open (creating) a log root at the target; closes every root it opened."""
    opened = []

    def _open(**kwargs):
        kwargs.setdefault("create", True)
        root = LogRoot.open(root_target.url, storage_options=root_target.storage_options, **kwargs)
        opened.append(root)
        return root

    yield _open
    for root in opened:
        try:
            root.close()
        except Exception:
            pass
