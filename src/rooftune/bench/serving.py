"""Serving a model to requests: an open-loop load generator, latency percentiles with their
intervals, and the search for the largest arrival rate whose p99 (or p90) stays within a target.

The arrivals are scheduled ahead from a seeded Poisson process (MLPerf's Server scenario; all at
time 0 for Offline), and each request's latency is counted from its *scheduled* arrival to the
end of the call that answered it: a server that falls behind shows as queueing, never as a lower
load (a closed loop, which waits for an answer before it sends, would hide exactly that).

A server is a list of *slots*, each a blocking callable ``call(k)`` that answers ``k`` requests
at once (a worker process, one of a runtime's streams, or in the tests a sleep). One thread per
slot takes the requests that have arrived, up to ``batch`` of them; with ``wait_s`` (dynamic
batching, as Triton's dynamic batcher does) it waits up to that long after the first request's
arrival for the batch to fill. A slot that is idle sleeps until the next arrival. The threads
spend their time blocked in the call, so the generator's own CPU is small; it is measured
(``LoadRun.generator_cpu_s``) and stated beside every figure.

:func:`simulate_queue` runs the same policy as a discrete-event simulation (the M/D/c queue
with the same batching), which is what the generator is checked against.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rooftune.bench.stats import CONFIDENCE
from rooftune.errors import InvalidArgument

#: The scenarios (MLPerf Inference's names): one request at a time, Poisson arrivals under a
#: latency bound, everything queued at once.
SCENARIOS = ("single-stream", "server", "offline")

#: The latency quantiles every serving table gives.
QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}


def samples_for_quantile(q: float, confidence: float = CONFIDENCE) -> int:
    """The fewest latencies whose order statistics bound the ``q`` quantile on both sides at
    ``confidence`` (368 for p99, 36 for p90, 6 for the median at 95 %): a run shorter than this
    gives its p99 without an upper bound."""
    from scipy.stats import binom

    alpha = 1.0 - confidence
    n = 1
    while binom.ppf(1 - alpha / 2, n, q) + 1 > n:
        n += 1
    return n


def quantile_interval(xs: Sequence[float], q: float,
                      confidence: float = CONFIDENCE) -> tuple[float, float | None, float | None]:
    """The ``q`` quantile of ``xs`` and its distribution-free interval from order statistics
    (ranks from the binomial, no assumption on the latencies' shape); a bound the sample count
    cannot give is None."""
    from scipy.stats import binom

    s = np.sort(np.asarray(xs, dtype=float))
    n = len(s)
    if n == 0:
        raise ValueError("no latencies")
    alpha = 1.0 - confidence
    lo_rank = int(binom.ppf(alpha / 2, n, q))  # 1-based ranks
    hi_rank = int(binom.ppf(1 - alpha / 2, n, q)) + 1
    lo = float(s[lo_rank - 1]) if lo_rank >= 1 else None
    hi = float(s[hi_rank - 1]) if hi_rank <= n else None
    return float(np.quantile(s, q)), lo, hi


def poisson_arrivals(rate: float, n: int, seed: int = 0) -> np.ndarray:
    """``n`` arrival times (seconds from the start) of a Poisson process of ``rate`` requests per
    second, the first at its own exponential gap; the same seed gives the same schedule."""
    check_rate(rate)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
    return np.cumsum(gaps)


def check_rate(rate: Any) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
        raise InvalidArgument("rate", rate, "allowed a number of requests per second > 0")
    return float(rate)


@dataclass(frozen=True)
class LoadRun:
    """One run of the load generator: the offered rate (None: offline), the latencies (seconds,
    in arrival order), the batch each request was answered in, and what the run cost."""

    offered: float | None
    latencies: tuple[float, ...]
    batches: tuple[int, ...]
    #: from the first scheduled arrival to the last answer
    seconds: float
    #: CPU time of the generator's own threads (scheduling, the call's pipe and bookkeeping)
    generator_cpu_s: float
    #: each call's own duration, as the slot measured it
    call_s: tuple[float, ...] = ()

    @property
    def served(self) -> float:
        """Requests answered per second over the run."""
        return len(self.latencies) / self.seconds if self.seconds > 0 else math.inf

    def quantile(self, q: float) -> tuple[float, float | None, float | None]:
        return quantile_interval(self.latencies, q)

    def percentiles(self) -> dict[str, dict[str, float | None]]:
        """p50, p90 and p99 in milliseconds, each with its 95 % interval (None where the run is
        too short to bound it)."""
        out: dict[str, dict[str, float | None]] = {}
        for name, q in QUANTILES.items():
            v, lo, hi = self.quantile(q)
            out[name] = {"ms": v * 1e3, "lo": None if lo is None else lo * 1e3, "hi": None if hi is None else hi * 1e3}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"offered": self.offered, "served": self.served, "requests": len(self.latencies),
                "seconds": self.seconds, "mean_batch": float(np.mean(self.batches)) if self.batches else 0.0,
                "generator_cpu_us_per_request": 1e6 * self.generator_cpu_s / max(1, len(self.latencies)),
                "percentiles": self.percentiles()}


def run_load(slots: Sequence[Callable[[int], Any]], arrivals: Sequence[float] | np.ndarray, *, batch: int = 1,
             wait_s: float = 0.0, warmup: int = 2, offered: float | None = None,
             clock: Callable[[], float] = time.perf_counter) -> LoadRun:
    """Serve ``arrivals`` (seconds from the start; all 0 for offline) with ``slots``: each slot's
    thread first makes ``warmup`` untimed calls, then takes up to ``batch`` arrived requests per
    call, waiting at most ``wait_s`` after the first one's arrival for more (see the module)."""
    a = np.asarray(arrivals, dtype=float)
    n = len(a)
    if n == 0 or not slots:
        raise ValueError("a load run needs requests and slots")
    batch = max(1, int(batch))
    done = np.zeros(n)
    sizes = np.zeros(n, dtype=int)
    lock = threading.Lock()
    state = {"next": 0}
    cpu: list[float] = []
    calls: list[float] = []
    errors: list[BaseException] = []
    t0_box: list[float] = []
    # the run's clock starts once every slot is warmed up (the barrier's action, before any is released)
    start = threading.Barrier(len(slots) + 1, action=lambda: t0_box.append(clock()))

    def take(now: float) -> tuple[int, int] | float:
        """The requests a free slot takes at ``now`` (first index, count), else when to look again."""
        i = state["next"]
        if i >= n:
            return -1.0
        last = a[min(i + batch - 1, n - 1)]
        ready = a[i] if batch == 1 else max(a[i], min(a[i] + wait_s, last))
        if ready > now:
            return ready
        k = int(np.searchsorted(a[i:min(i + batch, n)], now, side="right"))
        k = max(1, k)
        state["next"] = i + k
        return i, k

    def loop(call: Callable[[int], Any]) -> None:
        cpu0 = time.thread_time()
        used = 0.0
        try:
            for _ in range(warmup):
                call(batch)
            start.wait()
            cpu0 = time.thread_time()
            t0 = t0_box[0]
            while not errors:
                with lock:
                    got = take(clock() - t0)
                if isinstance(got, float):
                    if got < 0:
                        break
                    time.sleep(max(0.0, got - (clock() - t0)))
                    continue
                i, k = got
                c0 = clock()
                call(k)
                c1 = clock()
                calls.append(c1 - c0)
                done[i:i + k] = c1 - t0
                sizes[i:i + k] = k
        except BaseException as exc:  # a slot's failure ends the run; the caller sees it
            errors.append(exc)
            try:
                start.abort()
            except threading.BrokenBarrierError:
                pass
        finally:
            used = time.thread_time() - cpu0
            with lock:
                cpu.append(used)

    threads = [threading.Thread(target=loop, args=(s,), daemon=True) for s in slots]
    for t in threads:
        t.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:  # a slot failed while warming up
        pass
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    latencies = done - a
    return LoadRun(offered=offered, latencies=tuple(latencies.tolist()), batches=tuple(sizes.tolist()),
                   seconds=float(done.max() - min(0.0, float(a.min()))), generator_cpu_s=float(sum(cpu)),
                   call_s=tuple(calls))


def simulate_queue(arrivals: Sequence[float] | np.ndarray, service_s: float | Callable[[int], float], servers: int,
                   *, batch: int = 1, wait_s: float = 0.0) -> np.ndarray:
    """Each request's time in system (waiting and service) under :func:`run_load`'s policy with
    ``servers`` identical slots whose call of ``k`` requests takes ``service_s`` (a constant: the
    M/D/c queue, or a function of k): the prediction the generator is checked against."""
    import bisect
    import heapq

    a = [float(x) for x in arrivals]
    n = len(a)
    free = [0.0] * servers  # a heap of the times the slots come free
    out = np.zeros(n)
    i = 0
    while i < n:
        t_free = heapq.heappop(free)
        last = a[min(i + batch - 1, n - 1)]
        ready = a[i] if batch == 1 else max(a[i], min(a[i] + wait_s, last))
        begin = max(t_free, ready)
        k = 1 if batch == 1 else max(1, bisect.bisect_right(a, begin, i, min(i + batch, n)) - i)
        end = begin + (service_s(k) if callable(service_s) else service_s)
        heapq.heappush(free, end)
        for j in range(i, i + k):
            out[j] = end - a[j]
        i += k
    return out


@dataclass(frozen=True)
class RateSearch:
    """The largest probed arrival rate whose latency quantile stayed within the target, its
    interval, and every probe (rate, run) in the order run."""

    quantile: str
    slo_s: float
    rate: float
    #: the largest probed rate whose quantile's upper bound was within the target (0: none), and
    #: the smallest whose lower bound was above it (the capacity where none was)
    lo: float
    hi: float
    capacity: float
    probes: tuple[tuple[float, LoadRun], ...] = field(default=())

    @property
    def at_rate(self) -> LoadRun | None:
        """The run at the rate reported."""
        for rate, run in self.probes:
            if rate == self.rate:
                return run
        return None

    def to_dict(self) -> dict[str, Any]:
        run = self.at_rate
        return {"quantile": self.quantile, "slo_ms": self.slo_s * 1e3, "rate": self.rate, "lo": self.lo,
                "hi": self.hi, "capacity": self.capacity,
                "at_rate": run.to_dict() if run is not None else None,
                "probes": [{"rate": r, **run.to_dict()} for r, run in self.probes]}


def rate_under_slo(probe: Callable[[float], LoadRun], slo_s: float, capacity: float, *, quantile: str = "p99",
                   steps: int = 7, rel_tol: float = 0.03, floor: float = 0.1) -> RateSearch:
    """Bisect the arrival rate between 0 and ``capacity`` (the offline rate, where the queue no
    longer settles) for the largest one whose ``quantile`` of latency is within ``slo_s``;
    ``probe(rate)`` serves one seeded schedule at that rate. A probe passes by its point estimate;
    the interval of the answer is where the probes' own intervals decided. A probe that fails at
    ``floor`` x the capacity or below ends the search with no rate: the target is missed for want
    of speed per call, not of capacity (a call after idle time is slower than back to back)."""
    q = QUANTILES[quantile]
    lo, hi = 0.0, capacity
    sure_lo, sure_hi = 0.0, capacity
    probes: list[tuple[float, LoadRun]] = []
    for _ in range(steps):
        rate = (lo + hi) / 2 if probes else 0.7 * capacity  # most answers lie near the knee
        run = probe(rate)
        probes.append((rate, run))
        value, qlo, qhi = run.quantile(q)
        if value <= slo_s:
            lo = rate
            if qhi is not None and qhi <= slo_s:
                sure_lo = max(sure_lo, rate)
        else:
            hi = rate
            if qlo is not None and qlo > slo_s:
                sure_hi = min(sure_hi, rate)
            if lo == 0 and rate <= floor * capacity:
                break
        if lo > 0 and (hi - lo) / hi <= rel_tol:
            break
    sure_lo = min(sure_lo, lo)
    sure_hi = max(sure_hi, lo)
    return RateSearch(quantile=quantile, slo_s=slo_s, rate=lo, lo=sure_lo, hi=sure_hi, capacity=capacity,
                      probes=tuple(probes))


def predicted_rate(service_s: float | Callable[[int], float], servers: int, slo_s: float, *, quantile: str = "p99",
                   batch: int = 1, wait_s: float = 0.0, requests: int = 50_000, seed: int = 1) -> float:
    """The largest arrival rate whose simulated ``quantile`` of time in system stays within
    ``slo_s`` (:func:`simulate_queue` of ``requests`` arrivals, bisected to 0.2 %): the M/D/c queue's answer, with the
    generator's batching."""
    q = QUANTILES[quantile]
    one = service_s(batch) if callable(service_s) else service_s
    lo, hi = 0.0, servers * batch / one
    unit = np.random.default_rng(seed).exponential(1.0, size=requests).cumsum()  # arrivals at rate 1
    while hi - lo > 2e-3 * hi:
        mid = (lo + hi) / 2
        ok = float(np.quantile(simulate_queue(unit / mid, service_s, servers, batch=batch, wait_s=wait_s), q)) <= slo_s
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo
