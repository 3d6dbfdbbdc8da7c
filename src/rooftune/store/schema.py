"""Tables of the store (the current schema; :mod:`rooftune.store.migrations` builds it step by step)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class SchemaInfo(Base):
    """Key/value rows about the database itself; ``schema_version`` is the one that matters."""

    __tablename__ = "schema_info"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class PlatformRow(Base):
    """One fingerprinted platform; everything measured refers to one."""

    __tablename__ = "platforms"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    cpu_model: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[float] = mapped_column(Float)
    fingerprint: Mapped[dict[str, Any]] = mapped_column(JSON)


class CeilingsRow(Base):
    """A measured set of ceilings (peak FLOP/s, bandwidths, dispatch overhead) of a platform."""

    __tablename__ = "ceilings"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    platform_id: Mapped[str] = mapped_column(ForeignKey("platforms.id"), index=True)
    created_at: Mapped[float] = mapped_column(Float)
    quick: Mapped[bool] = mapped_column(Boolean)
    threads: Mapped[str] = mapped_column(String(256))
    rooftune_version: Mapped[str] = mapped_column(String(32))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)


class MeasurementRow(Base):
    """One harness Measurement (raw samples kept), attached to the ceilings run that took it, if any."""

    __tablename__ = "measurements"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    platform_id: Mapped[str] = mapped_column(ForeignKey("platforms.id"), index=True)
    ceilings_id: Mapped[int | None] = mapped_column(
        ForeignKey("ceilings.id", ondelete="CASCADE"), index=True, nullable=True
    )
    label: Mapped[str] = mapped_column(String(256), index=True)
    median_s: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float] = mapped_column(Float)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)


class AnalysisRow(Base):
    """One roofline analysis of a model (``rooftune analyze``) on a platform; ``data`` is its JSON."""

    __tablename__ = "analyses"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    platform_id: Mapped[str] = mapped_column(ForeignKey("platforms.id"), index=True)
    created_at: Mapped[float] = mapped_column(Float)
    model: Mapped[str] = mapped_column(String(512), index=True)
    batch: Mapped[int] = mapped_column(Integer)
    threads: Mapped[int] = mapped_column(Integer)
    rooftune_version: Mapped[str] = mapped_column(String(32))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)


class TrialRow(Base):
    """One evaluated runtime configuration of a tuning study; ``result`` holds its figures or why
    it failed. A study is resumed from its rows."""

    __tablename__ = "trials"
    #: One row per configuration of a study (schema 10): nodes of a fleet running one study store
    #: each configuration once, whichever finishes first.
    __table_args__ = (Index("uq_trial", "study_key", "config_key", unique=True),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    platform_id: Mapped[str] = mapped_column(ForeignKey("platforms.id"), index=True)
    study_key: Mapped[str] = mapped_column(String(64), index=True)
    config_key: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    result: Mapped[dict[str, Any]] = mapped_column(JSON)


class ProfileRow(Base):
    """One convolution primitive (or layout/precision transform, ``transform:NAME``) on one
    ConvSpec at one thread count on one platform: its time, or why it has none. A campaign
    resumes by skipping the (platform, spec, primitive, threads) it finds."""

    __tablename__ = "profiles"
    __table_args__ = (UniqueConstraint("platform_id", "spec_key", "primitive", "threads", name="uq_profile"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    platform_id: Mapped[str] = mapped_column(ForeignKey("platforms.id"), index=True)
    spec_key: Mapped[str] = mapped_column(String(32), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    primitive: Mapped[str] = mapped_column(String(64), index=True)
    threads: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    median_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    iqr_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    repetitions: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str] = mapped_column(Text, default="")
    warnings: Mapped[list[Any]] = mapped_column(JSON)
    sources: Mapped[list[Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)
    #: The median of each pass of the campaign over this row (``median_s`` is the fastest of them);
    #: NULL in rows stored before passes existed (schema 5), which count as one pass.
    pass_medians: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    #: The machine-speed probe's reading around each pass (:mod:`rooftune.bench.canary`), in the
    #: order of ``pass_medians``; NULL in rows stored before the probe existed (schema 6).
    pass_canary: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    #: The fastest single sample (seconds per call) of any pass: interference only slows a kernel,
    #: and on a shared host it repeats better than a pass's median (BENCHMARKS.md); NULL in rows
    #: stored before it was kept (schema 7) and in rows not timed.
    fastest_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class FleetRunRow(Base):
    """A campaign or study run on a fleet (schema 10): what ``rooftune fleet status`` lists as in
    flight until ``finished_at`` is set. The driver refreshes ``heartbeat_at`` as work completes,
    so a run whose driver died shows as stale rather than running forever."""

    __tablename__ = "fleet_runs"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(256))
    cluster: Mapped[str] = mapped_column(String(256))
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    planned: Mapped[int] = mapped_column(Integer, default=0)
    done: Mapped[int] = mapped_column(Integer, default=0)
    #: Node id -> platform id of the nodes the run was given.
    nodes: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))


class SweepPointRow(Base):
    """One point of a kernel-family sweep (``rooftune sweep``): a family's parameters in one pass,
    precision and variant on one platform; ``data`` holds its figures or why it failed. A sweep
    resumes by skipping the (platform, key) it finds."""

    __tablename__ = "sweep_points"
    __table_args__ = (UniqueConstraint("platform_id", "point_key", name="uq_sweep_point"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    platform_id: Mapped[str] = mapped_column(ForeignKey("platforms.id"), index=True)
    point_key: Mapped[str] = mapped_column(String(32), index=True)
    family: Mapped[str] = mapped_column(String(32), index=True)
    pass_name: Mapped[str] = mapped_column(String(8))
    precision: Mapped[str] = mapped_column(String(8))
    variant: Mapped[str] = mapped_column(String(128))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
