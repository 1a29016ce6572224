"""Keep secrets out of messages: every text the transport reports passes through ``scrub``.

Credentials reach the store from the environment, an AWS profile or an instance role;
they are never part of a URL, a config value or a file we write. Transport errors can
still quote requests, so ``scrub`` replaces the values of the credential variables in
the environment (and any value registered with ``register_secret``, such as profile keys
read in this process) and the signature parts of signed URLs and headers with ``***``.
"""

from __future__ import annotations

import os
import re
import threading

__all__ = ["SECRET_ENV_VARS", "register_secret", "scrub"]

SECRET_ENV_VARS = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_TOKEN",
    "AWS_SSE_CUSTOMER_KEY_BASE64",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_TOKEN",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
)
_MASK = "***"
# Signed-URL query parameters and authorisation headers, whatever the store.
_PATTERNS = (
    re.compile(r"(?i)(x-amz-(?:signature|credential|security-token)=)[^&\s\"']+"),
    re.compile(r"(?i)((?:^|[?&])(?:sig|signature|se|sp|sv|token)=)[^&\s\"']+"),
    re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)[^\n\"']+"),
    re.compile(r"(?i)((?:secret_access_key|session_token|account_key|client_secret)[\"']?\s*[:=]\s*[\"']?)[^\s,\"'}]+"),
)
_MIN_SECRET_LEN = 8  # shorter values would mask ordinary words
_registered: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Mask ``value`` in every later ``scrub`` (credentials obtained in this process)."""
    if value and len(value) >= _MIN_SECRET_LEN:
        with _lock:
            _registered.add(value)


def scrub(text: str) -> str:
    """``text`` with every known secret value and signature replaced by ``***``."""
    with _lock:
        secrets = set(_registered)
    for name in SECRET_ENV_VARS:
        value = os.environ.get(name)
        if value and len(value) >= _MIN_SECRET_LEN:
            secrets.add(value)
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, _MASK)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + _MASK, text)
    return text


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a parent thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)
