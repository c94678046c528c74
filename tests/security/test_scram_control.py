"""SCRAM credentials as metadata: ScramControlManager's records and errors, their replay into the
image (ScramImage), and their place in snapshots (image_records)."""

from __future__ import annotations

import hashlib

from kbroker.controller.scram_control import ScramControlManager
from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import MetadataImage
from kbroker.metadata.image_writer import image_records
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from kbroker.security import scram

Up = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
Del = AlterUserScramCredentialsRequest.ScramCredentialDeletion
SHA256, SHA512 = 1, 2


def _upsert(name: str, password: str, mechanism: int = SHA256, iterations: int = 4096) -> Up:
    h = "sha256" if mechanism == SHA256 else "sha512"
    salt = b"salt-" + name.encode()
    return Up(name=name, mechanism=mechanism, iterations=iterations, salt=salt,
              salted_password=scram.salted_password(h, password, salt, max(iterations, 1)))


def _alter(image: MetadataImage, deletions: list[Del], upsertions: list[Up]) -> tuple[MetadataImage, dict[str, tuple[int, str | None]]]:
    manager = ScramControlManager(lambda: image.scram)
    result = manager.alter_credentials(AlterUserScramCredentialsRequest(deletions=deletions, upsertions=upsertions))
    delta = MetadataDelta(image)
    delta.replay_all(result.records)
    return delta.apply(), {r.user: (r.error_code, r.error_message) for r in result.response.results}


def test_upsert_derives_kafkas_keys_and_delete_removes() -> None:
    image, results = _alter(MetadataImage.EMPTY, [], [_upsert("alice", "pw"), _upsert("bob", "pw2", SHA512, 8192)])
    assert results == {"alice": (0, None), "bob": (0, None)}
    expected = scram.new_credential("SCRAM-SHA-256", "pw", salt=b"salt-alice", iterations=4096)
    got = image.scram.get(SHA256, "alice")
    assert got is not None and (got.salt, got.stored_key, got.server_key, got.iterations) == (
        expected.salt, expected.stored_key, expected.server_key, 4096)
    assert got.stored_key == hashlib.sha256(scram.client_key("sha256", scram.salted_password(
        "sha256", "pw", b"salt-alice", 4096))).digest()
    image, results = _alter(image, [Del(name="alice", mechanism=SHA256)], [])
    assert results == {"alice": (0, None)}
    assert image.scram.get(SHA256, "alice") is None and image.scram.get(SHA512, "bob") is not None


def test_errors_per_user_and_all_or_nothing() -> None:
    image, results = _alter(MetadataImage.EMPTY, [Del(name="ghost", mechanism=SHA256), Del(name="x", mechanism=9)], [
        _upsert("few", "p", iterations=1000), _upsert("many", "p", iterations=20000),
        _upsert("twice", "p"), _upsert("twice", "p", SHA512), _upsert("", "p"), _upsert("ok", "p")])
    assert results == {
        "ghost": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        "x": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism."),
        "few": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        "many": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        "twice": (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
        "": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "ok": (0, None),
    }
    assert sorted(image.scram.credentials) == [(SHA256, "ok")]


def test_snapshot_records_rebuild_the_same_credentials() -> None:
    image, _ = _alter(MetadataImage.EMPTY, [], [_upsert("alice", "pw"), _upsert("bob", "pw", SHA512)])
    delta = MetadataDelta(MetadataImage.EMPTY)
    delta.replay_all(image_records(image))
    assert delta.apply().scram == image.scram
