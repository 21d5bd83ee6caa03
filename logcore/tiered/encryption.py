"""Envelope encryption of remote segments.

Each segment gets a fresh random AES-256 data key and a random 32-byte AAD. Every chunk (and
every index) is sealed with AES-256-GCM under a fresh 12-byte nonce and stored as
`nonce(12) || ciphertext || tag(16)`: a chunk grows by 28 bytes. The data key is wrapped with
RSA-OAEP (MGF1 and label hash SHA-256) under the key ring's active key pair, and the manifest keeps
the key pair id beside the wrapped key, so old segments stay readable after the active id changes
as long as their key pair stays in the ring.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from logcore.errors import InvalidConfigError, RemoteStorageError

NONCE_SIZE = 12
TAG_SIZE = 16
OVERHEAD = NONCE_SIZE + TAG_SIZE
DATA_KEY_SIZE = 32
AAD_SIZE = 32
_OAEP = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(), label=None)


@dataclass(frozen=True)
class KeyPair:
    key_id: str
    public_key: rsa.RSAPublicKey
    private_key: rsa.RSAPrivateKey | None


class KeyRing:
    """Key pairs by id; `active_id` wraps new data keys, any pair in the ring unwraps."""

    def __init__(self, pairs: dict[str, KeyPair], active_id: str):
        if active_id not in pairs:
            raise InvalidConfigError(
                f"encryption key pair id {active_id!r} is not in the key ring ({', '.join(pairs) or 'empty'})")
        self.pairs = dict(pairs)
        self.active_id = active_id

    @classmethod
    def from_pem_files(cls, files: dict[str, tuple[Path, Path]], active_id: str) -> "KeyRing":
        pairs = {}
        for key_id, (public_file, private_file) in files.items():
            public = _load(public_file, key_id, "public")
            private = _load(private_file, key_id, "private")
            if not isinstance(public, rsa.RSAPublicKey) or not isinstance(private, rsa.RSAPrivateKey):
                raise InvalidConfigError(f"encryption key pair {key_id}: {public_file} and "
                                         f"{private_file} must hold an RSA public and private key")
            if public.public_numbers() != private.public_key().public_numbers():
                raise InvalidConfigError(f"encryption key pair {key_id}: the public key in "
                                         f"{public_file} does not belong to the private key in {private_file}")
            pairs[key_id] = KeyPair(key_id, public, private)
        return cls(pairs, active_id)

    def wrap(self, data_key: bytes) -> tuple[str, bytes]:
        pair = self.pairs[self.active_id]
        return pair.key_id, pair.public_key.encrypt(data_key, _OAEP)

    def unwrap(self, key_id: str, wrapped: bytes, *, where: str) -> bytes:
        pair = self.pairs.get(key_id)
        if pair is None or pair.private_key is None:
            raise RemoteStorageError(
                f"{where} is encrypted with key pair {key_id!r}, which is not in the key ring "
                f"({', '.join(self.pairs) or 'empty'}): add it to rsm.config.encryption.key.pairs")
        try:
            return pair.private_key.decrypt(wrapped, _OAEP)
        except ValueError:
            raise RemoteStorageError(
                f"{where}: the data key does not unwrap with key pair {key_id!r}: the ring holds a "
                f"different key under that id") from None


def _load(path: Path, key_id: str, which: str):
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidConfigError(f"encryption key pair {key_id}: cannot read the {which} key file "
                                 f"{path}: {exc.strerror}") from None
    try:
        if which == "public":
            return serialization.load_pem_public_key(data)
        return serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise InvalidConfigError(f"encryption key pair {key_id}: {path} is not a PEM {which} key "
                                 f"({exc})") from None


@dataclass(frozen=True)
class DataKey:
    """One segment's data key and AAD."""

    key: bytes
    aad: bytes

    @classmethod
    def generate(cls) -> "DataKey":
        return cls(AESGCM.generate_key(bit_length=256), os.urandom(AAD_SIZE))

    def seal(self, plain: bytes) -> bytes:
        nonce = os.urandom(NONCE_SIZE)
        return nonce + AESGCM(self.key).encrypt(nonce, plain, self.aad)

    def open(self, sealed: bytes, *, where: str) -> bytes:
        if len(sealed) < OVERHEAD:
            raise RemoteStorageError(f"{where}: encrypted block of {len(sealed)} bytes is too short")
        try:
            return AESGCM(self.key).decrypt(sealed[:NONCE_SIZE], sealed[NONCE_SIZE:], self.aad)
        except InvalidTag:
            raise RemoteStorageError(f"{where}: authentication failed (data altered or wrong key)") from None


def generate_key_pair_pem(bits: int = 2048) -> tuple[bytes, bytes]:
    """(public PEM, private PEM) of a new RSA key pair: for tests and `seglog` key setup."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    public_pem = private.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)
    private_pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption())
    return public_pem, private_pem
