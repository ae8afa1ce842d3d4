"""kiln.lower.specialize and the fast arithmetic it licenses, against the big-integer model.

- The fast requantization (kiln_simd.h): on the KILN_RQ_FAST domain its
  formula equals arm_nn_requantize plus the zero point for every input, and
  no intermediate leaves int32; the C of the host build computes the formula.
- `requant_facts` claims FAST exactly up to its bounds.
- The table add: over all 65536 operand pairs, kiln_add_table_s8's formula on
  `add_table`'s table gives the reference's add and sub.
"""
from __future__ import annotations

import struct
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_harness import STUBS, model_requantize
from kiln import host
from kiln.lower.specialize import (KILN_RQ_FAST, KILN_RQ_FULL, KILN_RQ_UNIFORM, add_table, depthwise_scratch, depthwise_strip, gemm_scratch,
                                   mul_facts, requant_facts, uniform_fact)
from kiln.numerics.fixedpoint import clamp, requantize, wrap_int32
from kiln.numerics.params import add_params

HARNESS = Path(__file__).parent / "c" / "requant_cases.c"
ACC = 2**30


def fast_requantize(t: int, mult: int, rnd: int, shift: int) -> tuple[int, int]:
    """The kernels' formula on Python ints: (result, the SMMLAR value, which must fit int32)."""
    u = rnd + (t * mult + 2**31) // 2**32
    return (u - (t < 0)) >> shift, u


def constants(mult: int, shift: int, zp: int) -> tuple[int, int]:
    """kiln_rq2_channel: the right shift and the rounding term with the zero point in it."""
    e = -shift
    return e, 2 ** (e - 1) + zp * 2**e


@settings(max_examples=4000, deadline=None, derandomize=True, database=None)
@given(acc=st.one_of(st.sampled_from([-ACC + 1, -1, 0, 1, ACC - 1]), st.integers(-ACC + 1, ACC - 1)),
       mult=st.one_of(st.sampled_from([1, 2**30, 2**31 - 1]), st.integers(1, 2**31 - 1)),
       shift=st.integers(-23, -1), zp=st.integers(-128, 127))
def test_fast_requantization_is_arm_nn_requantize(acc, mult, shift, zp):
    e, rnd = constants(mult, shift, zp)
    got, u = fast_requantize(2 * acc, mult, rnd, e)
    assert got == model_requantize(acc, mult, shift) + zp
    assert -(2**31) <= u < 2**31


def test_fast_requantization_on_ties():
    """Accumulators whose doubling high multiply or rounding divide lands exactly on a half, both signs."""
    for e in range(1, 24):
        for mult in (2**30, 3 * 2**29, 2**31 - 1):
            for acc in range(-2 ** (e + 2), 2 ** (e + 2), max(1, 2 ** (e - 3))):
                e_, rnd = constants(mult, -e, -7)
                assert fast_requantize(2 * acc, mult, rnd, e_)[0] == model_requantize(acc, mult, -e) - 7


@pytest.fixture(scope="module")
def requant_c(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("rq") / "requant_cases"
    cmd = ["gcc", *host.STRICT_FLAGS, *host.SANITIZE_FLAGS, "-O1", f"-I{STUBS}", str(HARNESS), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


def test_c_fast_requantization_matches_formula(requant_c):
    """kiln_rq2_apply, and kiln_rq2_sat8 (the same from the kernel's shift and zero point, saturated)."""
    rng = np.random.default_rng(7)
    cases = []
    for _ in range(20000):
        acc = int(rng.choice([rng.integers(-ACC + 1, ACC), rng.integers(-5000, 5000)]))
        mult = int(rng.choice([rng.integers(2**30, 2**31), 2**30]))
        zp = int(rng.integers(-128, 128))
        e, rnd = constants(mult, -int(rng.integers(1, 24)), zp)
        cases.append((2 * acc, mult, rnd, e, zp))
    payload = b"".join(struct.pack("<5i", *c) for c in cases)
    proc = subprocess.run([str(requant_c)], input=payload, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    got = struct.unpack(f"<{2 * len(cases)}i", proc.stdout)
    want = [fast_requantize(*c[:4])[0] for c in cases]
    assert list(got[0::2]) == want
    assert list(got[1::2]) == [min(127, max(-128, v)) for v in want]


def test_uniform_fact_needs_one_multiplier_and_shift():
    assert uniform_fact(np.array([2**30] * 3), np.array([-5] * 3)) == KILN_RQ_UNIFORM
    assert uniform_fact(np.array([2**30]), np.array([-5])) == KILN_RQ_UNIFORM
    assert uniform_fact(np.array([2**30, 2**30 + 1]), np.array([-5, -5])) == 0
    assert uniform_fact(np.array([2**30, 2**30]), np.array([-5, -6])) == 0


def test_requant_facts_hold_exactly_to_their_bounds():
    w = np.full((2, 3, 3, 4), -127, np.int8)  # per channel sum |w| = 36 * 127
    edge = ACC - 1 - 128 * 36 * 127
    mult, shift = np.array([2**30, 2**30]), np.array([-5, -5])
    assert requant_facts(np.array([edge, -edge]), w, 0, mult, shift, -128, 127) == KILN_RQ_FAST | KILN_RQ_FULL
    assert requant_facts(np.array([edge + 1, 0]), w, 0, mult, shift, -128, 127) == KILN_RQ_FULL
    assert requant_facts(np.array([0, 0]), w, 0, mult, shift, -128, 100) == KILN_RQ_FAST
    for bad_shift in (0, 1, -24):
        assert not requant_facts(np.array([0, 0]), w, 0, mult, np.array([-5, bad_shift]), -128, 127) & KILN_RQ_FAST
    assert not requant_facts(np.array([0, 0]), w, 0, np.array([2**30, 0]), shift, -128, 127) & KILN_RQ_FAST
    depthwise = np.full((1, 3, 3, 2), 127, np.int8)  # channels along the last axis
    assert requant_facts(np.array([ACC - 1 - 128 * 9 * 127] * 2), depthwise, 3, mult, shift, -128, 127) & KILN_RQ_FAST


def test_mul_facts_hold_exactly_to_their_bounds():
    """KILN_RQ_FAST for shifts -23..-1 with a positive multiplier and the offsets and zero point of int8
    parameters (|x + offset| <= 255: the kernel's int16 lanes and results stay in range); FULL as for layers."""
    assert mul_facts(2**30, -23, 128, -127, 127, -128, 127) == KILN_RQ_FAST | KILN_RQ_FULL
    assert mul_facts(2**30, -1, -127, 128, -128, -128, 126) == KILN_RQ_FAST
    for mult, shift in ((2**30, -24), (2**30, 0), (2**30, 3), (0, -5)):
        assert mul_facts(mult, shift, 0, 0, 0, -128, 127) == KILN_RQ_FULL
    for a_off, b_off, zp in ((129, 0, 0), (0, -128, 0), (0, 0, 128), (0, 0, -129)):
        assert mul_facts(2**30, -5, a_off, b_off, zp, -128, 127) == KILN_RQ_FULL


ADD_CASES = [((0.02, 5), (0.03, -7), (0.05, 3)), ((0.011, -128), (0.011, -128), (0.02, -128)),
             ((0.5, 0), (0.01, 100), (0.3, -20)), ((0.004, 17), (0.09, -3), (0.1, 0))]


@pytest.mark.parametrize("qa,qb,qy", ADD_CASES)
def test_table_add_is_the_reference_add_and_sub(qa, qb, qy):
    p = add_params(qa, qb, qy)
    a, b = (v.ravel() for v in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128)))
    for subtract in (False, True):
        t = add_table(p, subtract)
        assert t is not None
        sa = requantize(wrap_int32((a + p.a_offset) << p.left_shift), p.a_mult, p.a_shift)
        sb = requantize(wrap_int32((b + p.b_offset) << p.left_shift), p.b_mult, p.b_shift)
        want = clamp(requantize(sa - sb if subtract else sa + sb, p.out_mult, p.out_shift) + p.out_zp, -128, 127)
        s = t.table[a + 128].astype(np.int64) + t.table[256 + b + 128]
        got = [fast_requantize(int(v), t.mult, t.round, t.shift)[0] for v in s]
        assert np.array_equal(np.clip(got, -128, 127), want)


def test_table_add_refuses_what_does_not_fit():
    p = add_params((0.02, 5), (0.03, -7), (0.05, 3))
    for change in ({"out_shift": 0}, {"out_shift": -23}, {"out_mult": 0}, {"a_shift": 10}):  # the last: terms near 2^31
        assert add_table(replace(p, **change), False) is None, change


def test_scratch_sizes_stay_under_the_limit():
    geo = dict(out_w=50, stride_w=1, k_w=3, dil_w=1, k_h=3, dil_h=1, out_h=48, stride_h=1)
    whole = depthwise_scratch(geo, 2**30)
    assert whole == 4 * (2 * 9 + 24) + 3 + 8 * 52 * 50  # every padded row the windows reach
    assert depthwise_scratch(geo, 4000) <= 4000 and depthwise_scratch(geo, 4000) > 8 * 52 * 3
    assert depthwise_scratch(geo, 8 * 52 * 3) == 0  # not even one window's rows
    assert gemm_scratch(27, 8, 10**6) == 16 * 8 + 9 * 28 + 3 and gemm_scratch(27, 8, 300) == 0


def test_depthwise_strip_is_sized_to_what_it_saves():
    """The lower stage's depthwise strip holds whole output rows' windows until the rows it shares with the
    next strip are at most an eighth of those it widens (16 rows for 3x3 with stride 1, 9 with stride 2),
    not a whole map; never more bytes than the layer's input and output maps; none for a channel multiplier
    that is a multiple of 4 (its path without scratch is the faster) or when one window does not fit."""
    geo = dict(n=1, in_h=48, in_w=48, in_c=8, out_h=48, out_w=48, ch_mult=1, k_h=3, k_w=3, stride_h=1, stride_w=1,
               dil_h=1, dil_w=1, pad_top=1, pad_left=1)
    block, row = 4 * (2 * 9 + 24) + 3, 8 * 50
    assert depthwise_strip(geo, 2**30) == block + 16 * row < depthwise_scratch(geo, 2**30)
    assert depthwise_strip(dict(geo, stride_h=2, out_h=24), 2**30) == block + 9 * row
    assert depthwise_strip(geo, block + 7 * row + 5) == block + 7 * row  # under kernels.scratch_limit
    maps = 48 * 48 * 2  # one channel: the input and output maps hold 4,608 bytes, a 16-row strip 6,571
    assert depthwise_strip(dict(geo, in_c=1), 2**30) == block + (maps - block) // row * row <= maps
    assert depthwise_strip(dict(geo, in_c=1, in_h=4, in_w=48, out_h=4), 2**30) == 0  # 384 bytes of maps
    assert depthwise_strip(dict(geo, in_c=1, ch_mult=8), 2**30) == 0
