"""Retries with exponential backoff and full jitter, bounded by a time-out without progress.

``Retrier`` follows one operation: ``failed(err)`` either raises the ``RemoteError`` that
``err`` calls for (a missing object, refused credentials: at once; a transient failure:
after ``max_attempts`` attempts or ``timeout_s`` without progress) or sleeps the backoff;
``progressed()`` (bytes received, a request answered) restarts both counts, so a long
transfer that keeps moving never times out.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from dataprep.remote.config import RemoteConfig
from dataprep.remote.errors import (
    RemoteAccessError,
    RemoteChangedError,
    RemoteError,
    RemoteNotFoundError,
    RemoteTimeoutError,
)
from dataprep.remote.transport import ErrorKind, TransportError

__all__ = ["RetryCounter", "Retrier", "backoff_s", "remote_error"]

log = logging.getLogger("dataprep.remote")


class RetryCounter:
    """Retries made by one client, across its threads (tests bound it; tools report it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def add(self) -> None:
        with self._lock:
            self.value += 1


def backoff_s(attempt: int, config: RemoteConfig, rng: random.Random) -> float:
    """The wait before retry ``attempt`` (1-based): uniform in [0, min(max_backoff_s, backoff_s * 2**(attempt-1))]."""
    ceiling = min(config.max_backoff_s, config.backoff_s * 2.0 ** min(attempt - 1, 30))
    return rng.uniform(0.0, ceiling)


class Retrier:
    """The retry state of one operation on ``url`` (module docstring)."""

    def __init__(self, config: RemoteConfig, url: str, what: str, counter: RetryCounter | None = None) -> None:
        self.config = config
        self.url = url
        self.what = what
        self.counter = counter
        self.attempts = 0
        self._since = time.monotonic()
        self._rng = random.Random()

    def progressed(self) -> None:
        self.attempts = 0
        self._since = time.monotonic()

    def failed(self, err: TransportError) -> None:
        """Raise the error ``err`` calls for, or sleep before the next attempt."""
        if err.kind is not ErrorKind.TRANSIENT:
            raise remote_error(err, self.url, self.what) from err
        self.attempts += 1
        waited = time.monotonic() - self._since
        if self.attempts >= self.config.max_attempts or waited >= self.config.timeout_s:
            raise RemoteTimeoutError(
                f"{self.what} {self.url}: no progress for {waited:.1f} s after {self.attempts} attempt(s) "
                f"(timeout_s={self.config.timeout_s}, max_attempts={self.config.max_attempts}); "
                f"last error: {err.detail}. "
                "Check that the endpoint is up and reachable (AWS_ENDPOINT_URL, network), or raise timeout_s",
                url=self.url) from err
        delay = min(backoff_s(self.attempts, self.config, self._rng), self.config.timeout_s - waited)
        if self.counter is not None:
            self.counter.add()
        log.info("retrying %s %s in %.2f s (attempt %d): %s", self.what, self.url, delay, self.attempts + 1, err)
        time.sleep(max(delay, 0.0))


def remote_error(err: TransportError, url: str, what: str) -> RemoteError:
    """The RemoteError for a failure that retrying cannot fix."""
    detail = err.detail
    if err.kind is ErrorKind.NOT_FOUND:
        if "NoSuchBucket" in detail:
            return RemoteNotFoundError(f"{what} {url}: the bucket does not exist ({detail}); create it first, or fix "
                                       "the URL", url=url)
        return RemoteNotFoundError(f"{what} {url}: no such object ({detail}); check the URL and prefix", url=url)
    if err.kind is ErrorKind.ACCESS:
        return RemoteAccessError(f"{what} {url}: access refused ({detail}); check the credentials (AWS_ACCESS_KEY_ID / "
                                 "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, the instance role) and the bucket policy",
                                 url=url)
    if err.kind is ErrorKind.CHANGED:
        return RemoteChangedError(f"{what} {url}: the object was replaced while it was read ({detail}); read it again",
                                  url=url)
    return RemoteError(f"{what} {url}: {detail}", url=url)
