# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""Credentials that never make a call wait, unless they are about to be useless.

botocore resolves the provider chain (environment, profiles, SSO, container
and instance metadata) but refreshes *synchronously* inside the call that
notices expiry, blocking the event loop for a network round trip. Here the
chain runs in a worker thread, ahead of expiry:

- advisory window: a background refresh starts; calls keep using the
  current credentials.
- mandatory window: calls wait for the refresh in progress, because the
  credentials may expire mid-flight.

By default the windows scale with how long the credentials live: half and a
quarter of their lifetime, at most 15 and 10 minutes (botocore's fixed
values, which suit the usual hour-long role credentials). Fixed windows
would put credentials that live under 10 minutes in the mandatory window
from the moment they arrive, and every call would wait for a refresh.
Windows given explicitly are used as given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from gateway import errors
from gateway._aws.sigv4 import Credentials
from gateway._observe.events import CredentialsRefreshed, CredentialsRefreshFailed, Emit

__all__ = ["CredentialSource", "botocore_fetcher"]

log = logging.getLogger("gateway.credentials")

Fetcher = Callable[[], Credentials]

DEFAULT_ADVISORY_S = 15 * 60.0
DEFAULT_MANDATORY_S = 10 * 60.0
# Shares of the credentials' lifetime the default windows take.
_ADVISORY_SHARE = 0.5
_MANDATORY_SHARE = 0.25


def botocore_fetcher(session: Any) -> Fetcher:
    """Fetch credentials through a botocore session's provider chain."""

    def fetch() -> Credentials:
        resolved = session.get_credentials()
        if resolved is None:
            raise errors.ConfigError(
                "no AWS credentials found: set credentials in the config, the environment "
                "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), a profile, or an instance role"
            )
        frozen = resolved.get_frozen_credentials()
        expiry_time = getattr(resolved, "_expiry_time", None)
        expiry = expiry_time.timestamp() if expiry_time is not None else None
        return Credentials(frozen.access_key, frozen.secret_key, frozen.token, expiry)

    return fetch


class CredentialSource:
    """Holds the current credentials; ``current()`` is the hot-path call."""

    def __init__(
        self,
        fetch: Fetcher,
        *,
        advisory_s: float | None = None,
        mandatory_s: float | None = None,
        retry_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fetch = fetch
        # None: scale with the credentials' lifetime (see the module docstring).
        self._advisory_setting = advisory_s
        self._mandatory_setting = mandatory_s
        self._advisory = DEFAULT_ADVISORY_S if advisory_s is None else advisory_s
        self._mandatory = DEFAULT_MANDATORY_S if mandatory_s is None else mandatory_s
        self._windows_expiry: float | None = None
        self._retry = retry_s
        self._clock = clock
        self._credentials: Credentials | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last_failed = False
        # Clock time before which no new attempt starts after a failed refresh.
        self._retry_at = 0.0
        # Clock time before which no *background* refresh starts: set when a
        # refresh brought credentials already inside the advisory window.
        self._quiet_until = 0.0
        self._closed = False
        self.refreshes = 0
        self.refresh_failures = 0
        # Told about every refresh and failure (the gateway's state-change
        # stream: log line, metrics); None: a failure is logged here.
        self.observer: Emit | None = None

    @classmethod
    def static(cls, credentials: Credentials) -> CredentialSource:
        source = cls(lambda: credentials)
        source._credentials = credentials
        return source

    async def start(self) -> None:
        if self._credentials is None:
            await self._run_refresh()
        # Not nested in the test above: mypy would keep the attribute narrowed
        # to None across the await, and the compiled module trusts narrowing.
        if self._credentials is None:
            raise errors.ConfigError("could not load AWS credentials")
        self._schedule()

    def current(self) -> Credentials:
        """The credentials to sign with now. Never blocks."""
        credentials = self._credentials
        if credentials is None:
            raise errors.ConfigError(
                "credentials are not loaded: use the gateway inside 'async with'"
            )
        return credentials

    def must_wait(self) -> bool:
        """True when the credentials are inside the mandatory window (or past expiry).

        Inside the advisory window it also starts a background refresh if none
        is running: the timer alone would be late after a suspend (it runs on
        the monotonic clock, expiry is wall-clock time) and never fires under a
        test's clock.
        """
        credentials = self._credentials
        if credentials is None or credentials.expiry is None:
            return credentials is None
        now = self._clock()
        left = credentials.expiry - now
        if (
            left <= self._advisory
            and now >= self._retry_at
            and now >= self._quiet_until
            and not self._refreshing()
        ):
            with contextlib.suppress(RuntimeError):  # no running loop: the timer will do
                self._start_refresh()
        return left <= self._mandatory

    def _refreshing(self) -> bool:
        return self._refresh is not None and not self._refresh.done()

    def usable(self) -> bool:
        """Credentials are loaded and not past their expiry (what readiness reports)."""
        credentials = self._credentials
        if credentials is None:
            return False
        return credentials.expiry is None or credentials.expiry > self._clock()

    async def fresh(self, deadline: float | None = None) -> Credentials:
        """Credentials safe to sign with; waits only inside the mandatory window.

        ``deadline`` (a ``time.monotonic()`` value, the call's own) bounds the
        wait, and a call waits only if the current credentials expire before
        its deadline: otherwise they cannot expire mid-call, and the refresh
        goes on in the background. A refresh that hangs (a credentials
        endpoint that never answers) thus costs a call nothing while its
        credentials last, and after expiry the expired-credentials error by
        its deadline. After a failed refresh a new attempt waits ``retry_s``:
        calls meanwhile get the old credentials while they last, never a
        fetch each.
        """
        if self.must_wait():
            if self._refreshing() or self._clock() >= self._retry_at:
                self._start_refresh()
                refresh = self._refresh
                assert refresh is not None
                if not self._outlive(deadline):
                    await _wait_until(refresh, deadline)
            if self.must_wait():
                credentials = self._credentials
                if credentials is None or (
                    credentials.expiry is not None and credentials.expiry <= self._clock()
                ):
                    raise errors.SignatureError(
                        "AWS credentials expired and could not be refreshed",
                        code="ExpiredTokenException",
                    )
        return self.current()

    def _outlive(self, deadline: float | None) -> bool:
        """The current credentials stay valid past ``deadline`` (monotonic)."""
        credentials = self._credentials
        if deadline is None or credentials is None or credentials.expiry is None:
            return False
        return credentials.expiry - self._clock() > deadline - time.monotonic()

    def _schedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._closed:
            return
        credentials = self._credentials
        if credentials is None:
            delay = self._retry
        elif credentials.expiry is None:
            return  # static credentials never need a refresh
        else:
            # After a failed refresh, or one that brought credentials already inside
            # the advisory window, wait retry_s before the next try instead of spinning.
            now = self._clock()
            delay = max(
                credentials.expiry - self._advisory - now,
                self._retry_at - now,
                self._quiet_until - now,
                0.0,
            )
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(delay, self._start_refresh)

    def _start_refresh(self) -> None:
        if self._closed:
            return
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.get_running_loop().create_task(self._run_refresh())
            self._refresh.add_done_callback(lambda _: self._schedule())

    async def _run_refresh(self) -> None:
        try:
            credentials = await asyncio.to_thread(self._fetch)
        except Exception as exc:
            self.refresh_failures += 1
            # The message of a provider error can name a profile, never a secret;
            # only the type is passed on.
            observer = self.observer
            if observer is not None:
                observer(CredentialsRefreshFailed(type(exc).__name__))
            else:
                log.warning("credential refresh failed: %s", type(exc).__name__)
            # Keep serving with what we have; _schedule retries after retry_s.
            self._last_failed = True
            self._retry_at = self._clock() + self._retry
            return
        self._last_failed = False
        now = self._clock()
        self._fit_windows(credentials, now)
        soon = credentials.expiry is not None and credentials.expiry - now <= self._advisory
        self._retry_at = 0.0
        self._quiet_until = now + self._retry if soon else 0.0
        self._credentials = credentials
        self.refreshes += 1
        observer = self.observer
        if observer is not None:
            observer(CredentialsRefreshed(credentials.expiry))

    @property
    def windows(self) -> tuple[float, float]:
        """(advisory, mandatory) seconds before expiry, as applied to the current credentials."""
        return self._advisory, self._mandatory

    def _fit_windows(self, credentials: Credentials, now: float) -> None:
        """Scale the default windows to the lifetime of newly issued credentials.

        Only a new expiry counts: a provider that hands back the same
        credentials again must not shrink the windows towards their expiry.
        """
        expiry = credentials.expiry
        if expiry is None or expiry == self._windows_expiry:
            return
        self._windows_expiry = expiry
        lifetime = max(0.0, expiry - now)
        if self._advisory_setting is None:
            self._advisory = min(DEFAULT_ADVISORY_S, lifetime * _ADVISORY_SHARE)
        if self._mandatory_setting is None:
            # Never wider than the advisory window: a refresh starts before calls wait.
            mandatory = min(DEFAULT_MANDATORY_S, lifetime * _MANDATORY_SHARE)
            self._mandatory = min(mandatory, self._advisory)

    async def aclose(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._refresh is not None and not self._refresh.done():
            self._refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresh


async def _wait_until(task: asyncio.Task[None], deadline: float | None) -> None:
    """Wait for ``task`` until ``deadline`` (monotonic) at most; never cancels it."""
    if deadline is None:
        await asyncio.shield(task)
        return
    left = deadline - time.monotonic()
    if left > 0:
        await asyncio.wait((task,), timeout=left)
