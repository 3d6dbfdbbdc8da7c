"""Every primitive against F.conv2d (fp64) on the shipped check specs, the reasons of the
unsupported ones, a deliberately wrong primitive caught, ConvSpec and transforms."""

from __future__ import annotations

import pytest
import torch

from rooftune.errors import InvalidArgument
from rooftune.primitives import (
    PRIMITIVES,
    TRANSFORMS,
    ConvSpec,
    Kernel,
    Primitive,
    all_primitives,
    get_primitive,
    transform_between,
)
from rooftune.primitives.check import CHECK_SPECS, TOLERANCES, selftest, verify


@pytest.fixture(scope="module")
def verdicts() -> list:
    torch.set_num_threads(2)
    return selftest()


def test_every_primitive_verifies_where_it_applies(verdicts: list) -> None:
    failed = [f"{v.primitive} on {v.spec.describe()}: {v.reason}" for v in verdicts if v.status == "failed"]
    assert not failed, "\n".join(failed)
    for p in all_primitives():
        mine = [v for v in verdicts if v.primitive == p.name]
        assert len(mine) == len(CHECK_SPECS)
        if p.available() is None:
            assert any(v.ok for v in mine), f"{p.name} verified on no spec"
        for v in mine:
            assert v.status in ("ok", "unsupported") and (v.ok or v.reason)


def test_the_grid_covers_stride_padding_dilation_groups_batch_odd_sizes_and_int8() -> None:
    specs = CHECK_SPECS
    assert any(s.stride != (1, 1) for s in specs) and any(s.dilation != (1, 1) for s in specs)
    assert any(s.depthwise for s in specs) and any(1 < s.groups < s.C for s in specs)
    assert any(s.N > 1 for s in specs) and any(s.H % 2 and s.W % 2 for s in specs)
    assert any(s.R != s.S for s in specs) and {s.dtype for s in specs} == {"fp32", "int8"}


def test_applicability_reasons(verdicts: list) -> None:
    five = ConvSpec(1, 3, 23, 23, 8, 5, 5, padding=2)
    assert "5x5 kernel not supported" in str(get_primitive("winograd-f2x2").supports(five))
    assert get_primitive("fft").supports(five) is True
    assert "stride" in str(get_primitive("fft").supports(ConvSpec(1, 3, 23, 23, 8, 5, 5, stride=2, padding=2)))
    # deeplabv3_resnet50's 1x1 2048 -> 512 at 65x65: 17 GiB of transformed filters, refused up front
    huge = str(get_primitive("fft").supports(ConvSpec(1, 2048, 65, 65, 512, 1, 1)))
    assert "frequency-domain filters would take 16.8 GiB (limit 2 GiB)" in huge
    assert get_primitive("fft").supports(ConvSpec(1, 512, 28, 28, 512, 3, 3, padding=1)) is True  # vgg16's widest
    grouped = ConvSpec(1, 8, 10, 10, 8, 3, 3, padding=1, groups=2)
    assert "grouped" in str(get_primitive("gemm-1x1-nhwc").supports(grouped))
    assert "runs int8" in str(get_primitive("int8-fbgemm").supports(grouped))
    fast = {v.primitive for v in verdicts if v.ok and v.spec.dtype == "fp32"}
    assert {"pytorch-default", "onednn-nchw", "onednn-nhwc", "im2col-gemm", "winograd-f2x2", "winograd-f4x4", "fft",
            "aten-im2col-gemm"} <= fast
    assert {v.primitive for v in verdicts if v.ok and v.spec.dtype == "int8"} & {"int8-fbgemm", "int8-onednn", "int8-x86"}


def test_errors_stay_within_the_named_tolerances(verdicts: list) -> None:
    for v in verdicts:
        if v.ok:
            assert v.max_rel <= v.tolerance
    # the fast algorithms are not exact, and their bounds say why
    wino = [v.max_rel for v in verdicts if v.ok and v.primitive == "winograd-f4x4"]
    assert wino and max(wino) > 1e-7 and "Winograd" in TOLERANCES["winograd-f4x4"][1]


class Transposed(Primitive):
    """A wrong primitive: the filters' spatial axes swapped."""

    name = "wrong-transposed"
    library = "test"

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        w = weight.transpose(2, 3).contiguous()
        return Kernel(spec, lambda x: torch.nn.functional.conv2d(x, w, bias, spec.stride, spec.padding,
                                                                 spec.dilation, spec.groups))


class Raises(Transposed):
    name = "wrong-raises"

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        raise RuntimeError("unsupported by this library\nsecond line")


def test_a_wrong_or_raising_primitive_fails_verification() -> None:
    spec = ConvSpec(1, 8, 12, 12, 16, 3, 3, padding=1)
    v = verify(Transposed(), spec)
    assert v.status == "failed" and "max error" in v.reason and v.max_rel > 0.1
    r = verify(Raises(), spec)
    assert r.status == "failed" and r.reason == "RuntimeError: unsupported by this library"


def test_conv_spec_validation_and_identity() -> None:
    s = ConvSpec(2, 16, 14, 14, 32, 3, 3, stride=2, padding=1, groups=2)
    assert (s.P, s.Q) == (7, 7) and s.output_shape == (2, 32, 7, 7) and s.weight_shape == (32, 8, 3, 3)
    assert s.flops == 2 * 2 * 32 * 7 * 7 * 8 * 9
    assert ConvSpec.from_dict(s.to_dict()) == s and ConvSpec.from_dict(s.to_dict()).key() == s.key()
    assert s.key() != ConvSpec(2, 16, 14, 14, 32, 3, 3, stride=2, padding=1, groups=2, dtype="int8").key()
    for bad, fragment in (
        (dict(N=-1), "invalid N -1"), (dict(R=9, padding=0), "larger than the padded input"),
        (dict(groups=4), "must divide"), (dict(padding=-1), "padding"), (dict(dtype="fp16"), "dtype"),
    ):
        args = dict(N=1, C=6, H=7, W=7, K=6, R=3, S=3) | bad
        with pytest.raises(InvalidArgument, match=fragment):
            ConvSpec(**args)
    with pytest.raises(InvalidArgument, match="unknown|allowed"):
        ConvSpec.from_dict({**s.to_dict(), "bogus": 1})
    for not_a_mapping in ([], "N=1", None):
        with pytest.raises(InvalidArgument, match="invalid ConvSpec .*: allowed a mapping of its fields"):
            ConvSpec.from_dict(not_a_mapping)
    with pytest.raises(InvalidArgument, match="primitive"):
        get_primitive("no-such")


def test_transforms_convert_and_chain() -> None:
    x = torch.randn(2, 8, 5, 7)
    nhwc = TRANSFORMS["nchw-to-nhwc"].prepare(x.shape)(x)
    assert nhwc.is_contiguous(memory_format=torch.channels_last) and torch.equal(nhwc, x)
    back = TRANSFORMS["nhwc-to-nchw"].prepare(x.shape)(nhwc)
    assert back.is_contiguous() and torch.equal(back, x)
    q = TRANSFORMS["fp32-to-int8"].prepare(x.shape)(x)
    assert q.dtype == torch.quint8 and TRANSFORMS["int8-to-fp32"].prepare(x.shape)(q).dtype == torch.float32
    assert [t.name for t in transform_between(("NHWC", "fp32"), ("NCHW", "int8"))] == ["nhwc-to-nchw", "fp32-to-int8"]
    assert [t.name for t in transform_between(("NCHW", "fp32"), ("NHWC", "fp32"))] == ["nchw-to-nhwc"]
    assert transform_between(("NCHW", "fp32"), ("NCHW", "fp32")) == []


def test_registry_names_match() -> None:
    for name in PRIMITIVES:
        p = get_primitive(name)
        assert p.name == name and p.library and p.in_layout in ("NCHW", "NHWC")


def test_aten_native_switches_onednn_off_only_for_its_call(monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    def flags(*args: object, **kwargs: object) -> None:
        raise AssertionError("torch.backends.mkldnn.flags() also sets allow_tf32")

    monkeypatch.setattr(torch.backends.mkldnn, "flags", flags)

    spec = ConvSpec(N=1, C=4, H=9, W=9, K=8, R=3, S=3, padding=(1, 1))
    w = torch.randn(8, 4, 3, 3)
    kernel = get_primitive("aten-im2col-gemm").prepare(spec, w, None)
    x = torch.randn(1, 4, 9, 9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch 2.15 warns (once a process) when allow_tf32 is set
        y = kernel.run(x)
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)
    assert torch.backends.mkldnn.enabled
