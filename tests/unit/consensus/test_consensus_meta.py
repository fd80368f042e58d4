from pathlib import Path

import pytest

from kudu_async.common.errors import KuduCorruption
from kudu_async.consensus.consensus_meta import ConsensusMetadata


def test_round_trip_and_absent_file(tmp_path: Path) -> None:
    path = tmp_path / "cmeta"
    assert ConsensusMetadata.load(path) is None
    meta = ConsensusMetadata(term=7, voted_for="abc", commit_index=41, config={"voters": ["a", "b", "c"]})
    meta.save(path)
    assert ConsensusMetadata.load(path) == meta


def test_damaged_file_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / "cmeta"
    ConsensusMetadata(term=3, voted_for="x").save(path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(KuduCorruption, match="checksum"):
        ConsensusMetadata.load(path)
