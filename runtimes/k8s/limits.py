"""What keeps the k8s backend from pressing too hard on the API server.

- A token bucket (QPS, burst) that every call of a runtime's API client
  passes through, as client-go's rate limiter does.
- At most INFLIGHT calls sent at once, over as many kept-alive connections:
  urllib3 keeps 10 per host and opens (then drops) one more for every call
  beyond, so 1,000 threads creating pods made ~700 TLS connections, and the
  API server's accept queue overflowed (client-go multiplexes one HTTP/2
  connection instead).
- Backoff on the server's "not now" answers: 429 (Too Many Requests, API
  priority and fairness, max in-flight) for any call, and 500/502/503/504
  for calls that do not create (a POST may have landed before its answer
  failed; only 429 and 503 say it did not). The wait doubles from
  BACKOFF_START_S up to BACKOFF_MAX_S, or is the server's Retry-After.
- A cap on the pods a runtime holds at once (PodSlots): a create waits for
  a slot, and says so after `wait_s`.
- The namespace's ResourceQuota: a create the quota refuses waits (with
  backoff) for a pod to go, then fails with one line naming the quota.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable

QPS_ENV, BURST_ENV = "SANDGYM_K8S_QPS", "SANDGYM_K8S_BURST"
RETRIES_ENV = "SANDGYM_K8S_RETRIES"
INFLIGHT_ENV = "SANDGYM_K8S_INFLIGHT"
INFLIGHT = 32
MAX_PODS_ENV = "SANDGYM_K8S_MAX_PODS"
QUOTA_WAIT_ENV = "SANDGYM_K8S_QUOTA_WAIT_S"
QPS, BURST, RETRIES = 50.0, 100, 8
QUOTA_WAIT_S = 60.0
BACKOFF_START_S, BACKOFF_MAX_S = 0.25, 8.0
RETRY_ANY = {429, 500, 502, 503, 504}
RETRY_CREATE = {429, 503}  # the server says nothing was done


def _number(env: str, default: float, minimum: float, what: str) -> float:
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"{env}={raw!r} must be {what}")
    return value


def limit_settings(
    qps: float | None = None, burst: int | None = None, max_pods: int | None = None
) -> tuple[float, int, int, int, float]:
    """(qps, burst, retries, max pods (0: no cap), quota wait in s) from the arguments and environment."""
    qps = qps if qps is not None else _number(QPS_ENV, QPS, 0.001, "a positive number of API calls per second")
    if burst is None:
        burst = int(_number(BURST_ENV, BURST, 1, "a whole number of calls, at least 1"))
    retries = int(_number(RETRIES_ENV, RETRIES, 0, "a whole number of retries, 0 or more"))
    if max_pods is None:
        max_pods = int(_number(MAX_PODS_ENV, 0, 0, "a whole number of pods (0: no cap)"))
    quota_wait = _number(QUOTA_WAIT_ENV, QUOTA_WAIT_S, 0, "a number of seconds, 0 or more")
    if qps <= 0 or burst < 1 or max_pods < 0:
        raise ValueError(f"qps={qps} must be positive, burst={burst} at least 1, max_pods={max_pods} 0 or more")
    return qps, burst, retries, max_pods, quota_wait


class RateLimiter:
    """A token bucket: `burst` calls at once, then `qps` a second. Counts the
    calls that had to wait (`waited`) and the retries made (`retries`)."""

    def __init__(self, qps: float, burst: int):
        self.qps, self.burst = qps, burst
        self._tokens = float(burst)
        self._at = time.monotonic()
        self._lock = threading.Lock()
        self.calls = self.waited = self.retries = 0

    def note_retry(self) -> None:
        with self._lock:
            self.retries += 1

    def acquire(self) -> None:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1  # taken now; a negative balance is the queue ahead
            self.calls += 1
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
            if wait > 0:
                self.waited += 1
        if wait > 0:
            time.sleep(wait)


def retry_after(value) -> float | None:
    """The server's Retry-After header in seconds (capped), or None."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return min(max(seconds, 0.0), BACKOFF_MAX_S)


def inflight_setting() -> int:
    """Calls a runtime's client sends at once (SANDGYM_K8S_INFLIGHT, default INFLIGHT)."""
    return int(_number(INFLIGHT_ENV, INFLIGHT, 1, "a whole number of calls, at least 1"))


def limit_client(api_client, limiter: RateLimiter, retries: int, inflight: int = INFLIGHT) -> None:
    """Send every REST call of `api_client` through `limiter`, at most
    `inflight` at once over as many reused connections, retrying the
    server's "not now" answers with backoff. Wraps the client's REST layer,
    under the API methods (which turn a final refusal into ApiException);
    websocket streams do not pass there (they get a client of their own)."""
    rest = api_client.rest_client
    send = rest.request
    rest.pool_manager.connection_pool_kw["maxsize"] = inflight
    rest.pool_manager.clear()  # pools made before now keep their size
    sending = threading.BoundedSemaphore(inflight)

    def request(method: str, url: str, *args, **kwargs):
        delay = BACKOFF_START_S
        attempt = 0
        while True:
            limiter.acquire()
            with sending:
                response = send(method, url, *args, **kwargs)
            allowed = RETRY_CREATE if method == "POST" else RETRY_ANY
            if response.status not in allowed or attempt >= retries:
                return response
            wait = retry_after(response.getheader("Retry-After"))
            try:
                response.read()  # drained, so its connection is reused
            except Exception:
                pass
            attempt += 1
            limiter.note_retry()
            time.sleep(wait if wait is not None else delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, BACKOFF_MAX_S)

    rest.request = request


class PodSlots:
    """At most `cap` pods held at once (0: no cap). `take` blocks for a slot
    for up to `wait_s`, then raises `error()`."""

    def __init__(self, cap: int):
        self.cap = cap
        self.held = 0
        self.waits = 0  # takes that found every slot held
        self._cond = threading.Condition()

    def take(self, wait_s: float, error: Callable[[], Exception]) -> None:
        if not self.cap:
            return
        deadline = time.monotonic() + wait_s
        with self._cond:
            if self.held >= self.cap:
                self.waits += 1
            while self.held >= self.cap:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise error()
                self._cond.wait(left)
            self.held += 1

    def give(self) -> None:
        if not self.cap:
            return
        with self._cond:
            self.held = max(0, self.held - 1)
            self._cond.notify()


def quota_refusal(e: Exception) -> bool:
    """The API server refused a create because a ResourceQuota is used up."""
    return getattr(e, "status", None) == 403 and "exceeded quota" in str(getattr(e, "body", "") or "")
