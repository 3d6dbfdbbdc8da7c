"""The sweep_points table (schema 9): a version-8 store gains it and keeps its rows; a point is
stored once per (platform, key)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, inspect

from rooftune.platform import Platform
from rooftune.store import MIGRATIONS, SCHEMA_VERSION, Store
from rooftune.store.schema import SchemaInfo
from rooftune.sweep import SweepPoint, Variant


def _point(platform_id: str, key: str = "k1") -> SweepPoint:
    return SweepPoint(key=key, family="conv2d", params={"batch": 1}, pass_="fwd", precision="fp32",
                      variant=Variant("default", "NCHW", 1), device="cpu", platform_id=platform_id, status="ok",
                      flops=10.0, median_s=1e-3, ci_low_s=float("nan"), created_at=1.0)


def test_version_8_store_gains_sweep_points(tmp_path: Path, fake_platform: Platform) -> None:
    path = tmp_path / "v8.db"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        for version in range(1, 9):
            MIGRATIONS[version](conn)
        conn.execute(SchemaInfo.__table__.insert().values(key="schema_version", value="8"))
    engine.dispose()
    with Store(path) as s:
        assert s.schema_version() == SCHEMA_VERSION
        assert "sweep_points" in inspect(s.engine).get_table_names()
        assert s.save_sweep_point(fake_platform, _point(fake_platform.id).to_dict())
        assert not s.save_sweep_point(fake_platform, _point(fake_platform.id).to_dict())  # kept as it is
        assert s.save_sweep_point(fake_platform, _point(fake_platform.id, "k2").to_dict())
        rows = s.sweep_points(fake_platform.id, "conv2d")
    assert [r["key"] for r in rows] == ["k1", "k2"]
    back = SweepPoint.from_dict(rows[0])
    assert back.variant == Variant("default", "NCHW", 1) and back.ci_low_s is None  # NaN stored as null
    assert back.flops == 10.0 and back.params == {"batch": 1}
