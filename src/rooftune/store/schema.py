"""Tables of the store (the current schema; :mod:`rooftune.store.migrations` builds it step by step)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, Text
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
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    platform_id: Mapped[str] = mapped_column(ForeignKey("platforms.id"), index=True)
    study_key: Mapped[str] = mapped_column(String(64), index=True)
    config_key: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
