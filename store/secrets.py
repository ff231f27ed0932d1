"""Secrets kept at rest (model API keys, webhook secrets): Fernet with a key made once."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from store.errors import ConfigError

KEY_FILE = "secrets.key"
_KEYS_DIR_MODE = 0o700
_KEY_FILE_MODE = 0o600


class Sealer:
    """Encrypts and decrypts small secrets with the data dir's Fernet key."""

    def __init__(self, keys_dir: Path) -> None:
        self.keys_dir = keys_dir
        self._fernet: Fernet | None = None

    def _key(self) -> Fernet:
        if self._fernet is None:
            self._fernet = Fernet(load_or_create_key(self.keys_dir))
        return self._fernet

    def seal(self, secret: str) -> str:
        return self._key().encrypt(secret.encode()).decode()

    def unseal(self, token: str) -> str:
        try:
            return self._key().decrypt(token.encode()).decode()
        except InvalidToken:
            raise ConfigError(
                f"A stored secret can't be decrypted with {self.keys_dir / KEY_FILE}; set it again."
            ) from None


def load_or_create_key(keys_dir: Path) -> bytes:
    """The Fernet key in `keys_dir`, created (0600, in a 0700 folder) on first use."""
    keys_dir.mkdir(parents=True, exist_ok=True, mode=_KEYS_DIR_MODE)
    path = keys_dir / KEY_FILE
    if not path.exists():
        write_once(path, Fernet.generate_key())
    return path.read_bytes().strip()


def write_once(path: Path, content: bytes) -> None:
    """Create `path` (0600) with `content` unless another process created it first."""
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _KEY_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temp, path)  # a hard link creates the file only if nobody made one first
    except FileExistsError:
        pass
    finally:
        temp.unlink(missing_ok=True)
