"""measure_isolated: a real child process, its environment, and how its failures surface."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rooftune.bench import Measurement, Policy, measure_isolated
from rooftune.errors import InvalidArgument, MeasurementError

HERE = Path(__file__).resolve().parent
POLICY = Policy(budget_s=0.2, min_sample_time_s=0.001, warmup_s=0)


@pytest.fixture
def child_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment additions that make isolation_targets importable in the child."""
    monkeypatch.delenv("ROOFTUNE_TEST_VALUE", raising=False)
    existing = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(HERE), existing) if p)}


def test_measure_isolated_returns_subprocess_measurement(child_env: dict[str, str]) -> None:
    m = measure_isolated(
        "isolation_targets:small_work",
        {"n": 100},
        label="sum-100",
        params={"n": 100},
        policy=POLICY,
        env=child_env,
        platform_id="feedfacefeedface",
    )
    assert isinstance(m, Measurement)
    assert m.label == "sum-100"
    assert m.params == {"n": 100}
    assert m.platform_id == "feedfacefeedface"
    assert m.method.isolation == "subprocess"
    assert m.method.policy == POLICY
    assert m.method.clock == "perf_counter"
    assert m.method.stop_reason in ("stable", "budget", "max_samples")
    assert m.n >= 1
    assert m.number >= 1
    assert all(s > 0 for s in m.samples)


def test_env_reaches_the_child(child_env: dict[str, str]) -> None:
    env = {**child_env, "ROOFTUNE_TEST_VALUE": "forty-two"}
    m = measure_isolated(
        "isolation_targets:needs_env", {"expected": "forty-two"}, label="env", policy=POLICY, env=env
    )
    assert m.label == "env"
    assert m.method.isolation == "subprocess"


def test_child_failure_is_a_measurement_error(child_env: dict[str, str]) -> None:
    with pytest.raises(MeasurementError) as exc:
        measure_isolated(
            "isolation_targets:needs_env",
            {"expected": "forty-two"},
            label="env",
            policy=POLICY,
            env=child_env,
        )
    message = str(exc.value)
    assert message.startswith("env: subprocess failed (exit 1): ")
    assert "RuntimeError: ROOFTUNE_TEST_VALUE is None, expected 'forty-two'" in message


def test_child_crash_is_a_measurement_error(child_env: dict[str, str]) -> None:
    with pytest.raises(MeasurementError, match=r"^crash: subprocess failed \(exit 3\): exit status 3$"):
        measure_isolated("isolation_targets:hard_exit", label="crash", policy=POLICY, env=child_env)


def test_child_timeout_is_a_measurement_error(child_env: dict[str, str]) -> None:
    with pytest.raises(MeasurementError, match="hang: subprocess exceeded its time limit of 1 s"):
        measure_isolated("isolation_targets:hang", label="hang", policy=POLICY, env=child_env, timeout_s=1)


@pytest.mark.parametrize("target", ["nocolon", "isolation_targets.small_work", ""])
def test_bad_target_is_rejected_before_starting_a_child(target: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        measure_isolated(target, label="x", policy=POLICY)
    assert exc.value.name == "target"
    assert str(exc.value) == f"invalid target {target!r}: expected 'package.module:factory'"
