"""``RemoteConfig``: time-outs, retries and transfer sizes of the object-store client, validated once."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dataprep.errors import require_int
from dataprep.remote.errors import RemoteConfigError

__all__ = ["RemoteConfig", "TransportMode"]


class TransportMode(enum.StrEnum):
    """Where requests run: AUTO picks INLINE where obstore can run in this process (it was first
    imported here, not inherited through a fork) and HELPER elsewhere (``dataprep.remote.helper``)."""

    AUTO = "auto"
    INLINE = "inline"
    HELPER = "helper"

_MIN_PART_BYTES = 5 * 2**20  # S3's smallest multipart part
_MAX_SINGLE_PUT_BYTES = 5 * 2**30  # S3's largest single PUT


@dataclass(frozen=True)
class RemoteConfig:
    """How the client waits, retries and chunks (all times in seconds, sizes in bytes).

    timeout_s: an operation that makes no progress for this long, its retries included,
        ends in ``RemoteTimeoutError`` naming the URL (progress: a request answered or
        body bytes received; a long download that keeps receiving never times out).
    stall_s: a response body silent this long is a stall: the read is retried from the
        byte reached. At most ``timeout_s``.
    connect_timeout_s: time to open a connection before that attempt counts as failed.
    request_retries: retries of one HTTP request inside the transport (5xx such as 503
        SlowDown, resets, time-outs), with exponential backoff and jitter, within
        ``timeout_s``; the client retries again, with the same backoff, until ``timeout_s``
        or ``max_attempts`` attempts without progress.
    backoff_s, max_backoff_s: first and largest backoff; each wait is drawn uniformly in
        ``[0, min(max_backoff_s, backoff_s * 2**attempt)]`` (full jitter).
    part_bytes: objects larger than this are uploaded in parts of this size (multipart;
        aborted on failure); at least 5 MiB.
    max_single_put_bytes: if set, objects up to this size go in one PUT whatever
        ``part_bytes`` (larger ones in parts of ``part_bytes``); at most 5 GiB (S3's limit).
    chunk_bytes: the size of the pieces a download is streamed in.
    transport: ``TransportMode`` (or its value).
    """

    timeout_s: float = 60.0
    stall_s: float = 15.0
    connect_timeout_s: float = 5.0
    request_retries: int = 3
    max_attempts: int = 10
    backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    part_bytes: int = 16 * 2**20
    chunk_bytes: int = 2**20
    transport: TransportMode = TransportMode.AUTO
    max_single_put_bytes: int | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "transport", TransportMode(self.transport))
        except ValueError:
            choices = ", ".join(repr(m.value) for m in TransportMode)
            raise RemoteConfigError(f"'transport' must be one of {choices} (got {self.transport!r})") from None
        for name in ("timeout_s", "stall_s", "connect_timeout_s", "backoff_s", "max_backoff_s"):
            _check_positive_number(name, getattr(self, name))
        for name, minimum in (("max_attempts", 1), ("chunk_bytes", 1), ("part_bytes", 1), ("request_retries", 0)):
            require_int(name, getattr(self, name), minimum=minimum, error=RemoteConfigError)
        if self.stall_s > self.timeout_s:
            raise RemoteConfigError(f"'stall_s' ({self.stall_s}) must be <= 'timeout_s' ({self.timeout_s}): "
                                    "a stall is detected within the time-out")
        if self.max_single_put_bytes is not None:
            require_int("max_single_put_bytes", self.max_single_put_bytes, minimum=1, error=RemoteConfigError)
            if self.max_single_put_bytes > _MAX_SINGLE_PUT_BYTES:
                raise RemoteConfigError(f"'max_single_put_bytes' must be <= {_MAX_SINGLE_PUT_BYTES} (S3's largest "
                                        f"single PUT; got {self.max_single_put_bytes})")
        if self.part_bytes < _MIN_PART_BYTES:
            raise RemoteConfigError(f"'part_bytes' must be >= {_MIN_PART_BYTES} (S3's smallest part; "
                                    f"got {self.part_bytes})")


def _check_positive_number(name: str, value: object) -> None:
    """Seconds: an int or a float above 0 (ints are checked by ``dataprep.errors.require_int``, the one int check)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise RemoteConfigError(f"{name!r} must be a positive number (got {value!r} that is a {type(value).__name__})")
