"""The Cortex-M4 target: firmware under QEMU mps2-an386 agrees with the host program and the reference.

Hand-written model descriptors exercise the harness itself (several inputs
and outputs, float outputs, the per-layer hook, model selection, errors,
faults, hangs and the instruction counter); every model under models/ is then
compiled through the whole chain, cross-compiled and compared bit for bit
with its host program and the integer reference executor.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import copy_repo
from kiln import host
from kiln.check import reference_outputs, seeded_inputs
from kiln.cli import resolve_source
from kiln.errors import KilnError
from kiln.ir import load
from kiln.ir.graph import Graph, Node, Tensor
from kiln.model_table import firmware_model
from kiln.quantize.kept import load_samples
from kiln.runio import quantize_inputs
from kiln.runner import run_stage
from kiln.stages import STAGES
from kiln.target import cortex_m, qemu, size
from kiln.target.macs import graph_macs, node_macs

ROOT = Path(__file__).resolve().parent.parent
MODELS = sorted(p.parent.name for p in (ROOT / "models").glob("*/model.toml"))

# hand_mul: z = clamp(((x * y) >> 2) + 1), s = sum(((x * y) >> 2) * 0.5f) through an int16 arena,
# reporting two layers (indices 0 and 2). hand_neg: saturating negation, no arena; it first spins
# 1000 * (x[0] & 0x7f) iterations of a two-instruction loop, a known instruction count.
# hand_fault fails as its one input byte says: 1 bad address, 2 undefined instruction,
# 3 stack overflow, 4 hang; 5 copies it through a 2 KB stack array, any other value directly.
HAND_C = r"""
#include <stdint.h>
#include <string.h>
#include "kiln_runtime.h"

static const kiln_tensor_info_t k_mul_in[2] = {
    {"x", KILN_INT8, 1, {16}, 16, 1.0f, 0},
    {"y", KILN_INT8, 1, {16}, 16, 1.0f, 0},
};
static const kiln_tensor_info_t k_mul_out[2] = {
    {"z", KILN_INT8, 1, {16}, 16, 1.0f, 0},
    {"s", KILN_FLOAT32, 1, {1}, 4, 1.0f, 0},
};
static const kiln_tensor_info_t k_neg_io[1] = {{"v", KILN_INT8, 1, {40}, 40, 1.0f, 0}};
static const kiln_tensor_info_t k_fault_io[1] = {{"how", KILN_INT8, 1, {1}, 1, 1.0f, 0}};

static kiln_status_t mul_invoke(const void *const *inputs, void *const *outputs, void *arena, size_t arena_size,
                                kiln_layer_hook_t hook, void *user)
{
    const int8_t *x = (const int8_t *)inputs[0];
    const int8_t *y = (const int8_t *)inputs[1];
    int16_t *t = (int16_t *)arena;
    int8_t *z = (int8_t *)outputs[0];
    float sum = 0.0f;
    int i;
    if (arena_size < 32u) {
        return KILN_ERR_ARENA_SIZE;
    }
    if (hook) {
        hook(user, 0, "mul (hand)", 0, NULL, 0);
    }
    for (i = 0; i < 16; ++i) {
        t[i] = (int16_t)((x[i] * y[i]) >> 2);
    }
    if (hook) {
        hook(user, 0, "mul (hand)", 1, t, 32);
        hook(user, 2, "clamp (hand)", 0, NULL, 0);
    }
    for (i = 0; i < 16; ++i) {
        int v = t[i] + 1;
        z[i] = (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v);
    }
    if (hook) {
        hook(user, 2, "clamp (hand)", 1, z, 16);
    }
    for (i = 0; i < 16; ++i) {
        sum += (float)t[i] * 0.5f;
    }
    memcpy(outputs[1], &sum, sizeof sum);
    return KILN_OK;
}

static void spin(uint32_t n)
{
#if defined(__arm__)
    if (n != 0u) {
        __asm__ volatile(".syntax unified\n1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
    }
#elif defined(__riscv)
    if (n != 0u) {
        __asm__ volatile("1: addi %0, %0, -1\n\tbnez %0, 1b" : "+r"(n));
    }
#else
    (void)n;
#endif
}

static kiln_status_t neg_invoke(const void *const *inputs, void *const *outputs, void *arena, size_t arena_size,
                                kiln_layer_hook_t hook, void *user)
{
    const int8_t *v = (const int8_t *)inputs[0];
    int8_t *out = (int8_t *)outputs[0];
    int i;
    (void)arena;
    (void)arena_size;
    if (hook) {
        hook(user, 0, "neg (hand)", 0, NULL, 0);
    }
    spin(1000u * (uint32_t)(v[0] & 0x7f));
    for (i = 0; i < 40; ++i) {
        out[i] = (int8_t)(v[i] == -128 ? 127 : -v[i]);
    }
    if (hook) {
        hook(user, 0, "neg (hand)", 1, out, 40);
    }
    return KILN_OK;
}

static volatile int32_t g_depth = 1 << 20;
static int32_t recurse(volatile int32_t *p, int32_t n)
{
    volatile int32_t local[64];
    local[0] = *p + n;
    return n < g_depth ? recurse(local, n + 1) + local[0] : local[0];
}

static kiln_status_t fault_invoke(const void *const *inputs, void *const *outputs, void *arena, size_t arena_size,
                                  kiln_layer_hook_t hook, void *user)
{
    const int8_t *how = (const int8_t *)inputs[0];
    int8_t *out = (int8_t *)outputs[0];
    (void)arena_size;
    (void)hook;
    (void)user;
    switch (how[0]) {
    case 1:
        out[0] = (int8_t)*(volatile const uint32_t *)0x30000000u;
        break;
#if defined(__arm__)
    case 2:
        __asm__ volatile("udf #0");
        break;
#endif
    case 3:
        out[0] = (int8_t)recurse((volatile int32_t *)arena, 0);
        break;
    case 4:
        for (;;) {
            __asm__ volatile("");
        }
    case 5: {
        volatile int8_t deep[2048];
        deep[0] = how[0];
        deep[sizeof deep - 1] = deep[0];
        out[0] = deep[sizeof deep - 1];
        break;
    }
    default:
        out[0] = how[0];
    }
    return KILN_OK;
}

const kiln_model_t hand_mul_model = {"hand_mul", 32u, 16u, 0u, 2, 2, 2, k_mul_in, k_mul_out, mul_invoke};
const kiln_model_t hand_neg_model = {"hand_neg", 0u, 16u, 0u, 1, 1, 1, k_neg_io, k_neg_io, neg_invoke};
const kiln_model_t hand_fault_model = {"hand_fault", 16u, 16u, 0u, 1, 1, 0, k_fault_io, k_fault_io, fault_invoke};
"""

HAND_MODELS = [cortex_m.FirmwareModel("hand_mul", 32, 16, 64, 2), cortex_m.FirmwareModel("hand_neg", 0, 16, 96, 1),
               cortex_m.FirmwareModel("hand_fault", 16, 16, 32, 0)]


def _graph(name: str, inputs: dict[str, tuple], outputs: dict[str, tuple]) -> Graph:
    tensors = {n: Tensor(n, shape, dtype) for n, (shape, dtype) in {**inputs, **outputs}.items()}
    return Graph(name, tensors=tensors, inputs=list(inputs), outputs=list(outputs))


MUL = _graph("hand_mul", {"x": ((16,), "int8"), "y": ((16,), "int8")}, {"z": ((16,), "int8"), "s": ((1,), "float32")})
NEG = _graph("hand_neg", {"v": ((40,), "int8")}, {"v_out": ((40,), "int8")})
FAULT = _graph("hand_fault", {"how": ((1,), "int8")}, {"how_out": ((1,), "int8")})


def expected_mul(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    t = (x.astype(np.int32) * y.astype(np.int32)) >> 2
    return [np.clip(t + 1, -128, 127).astype(np.int8), np.array([np.float32(t.sum()) * np.float32(0.5)], np.float32)]


def random_int8(rng: np.random.Generator, shape: tuple, count: int) -> list[np.ndarray]:
    return [rng.integers(-128, 128, shape, dtype=np.int8) for _ in range(count)]


@pytest.fixture(scope="module")
def hand_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("hand")
    (d / "hand.c").write_text(HAND_C)
    return d


def hand_image(d: Path, tag: str, models: list[cortex_m.FirmwareModel] = HAND_MODELS, cflags: tuple[str, ...] = (),
               target: str = "cortex-m4") -> Path:
    return cortex_m.build_firmware([d / "hand.c"], models, d / tag / "hand.elf", cflags=list(cflags), target=target)


@pytest.fixture(scope="module")
def hand_elf(hand_dir) -> Path:
    return hand_image(hand_dir, "default")


def test_hand_models_match_host_program_and_numpy(hand_dir, hand_elf):
    rng = np.random.default_rng(7)
    samples = [[x, y] for x, y in zip(random_int8(rng, (16,), 6), random_int8(rng, (16,), 6))]
    exe = host.build_executable([hand_dir / "hand.c"], [m.prefix for m in HAND_MODELS], hand_dir / "hand_host")
    on_host = host.run_executable(exe, MUL, samples, model="hand_mul")
    run = qemu.run_firmware(hand_elf, MUL, samples, model="hand_mul")
    for got, ref, (x, y) in zip(run.outputs, on_host, samples):
        want = expected_mul(x, y)
        for g, h, w in zip(got, ref, want):
            assert g.tobytes() == h.tobytes() == w.tobytes()
    assert len(run.instructions) == len(samples) and all(i > 0 and i % 40 == 0 for i in run.instructions)
    assert 0 < run.stack_bytes < 4096

    neg_samples = [[v] for v in random_int8(rng, (40,), 3)]
    neg = qemu.run_firmware(hand_elf, NEG, neg_samples, model="hand_neg")
    for got, (v,) in zip(neg.outputs, neg_samples):
        assert got[0].tobytes() == np.where(v == -128, 127, -v.astype(np.int16)).astype(np.int8).tobytes()


def test_layers_are_reported_in_order(hand_elf):
    samples = [[np.arange(16, dtype=np.int8), np.full(16, 3, np.int8)]] * 2
    run = qemu.run_firmware(hand_elf, MUL, samples, model="hand_mul", layers=True)
    assert [(lc.sample, lc.index, lc.name) for lc in run.layers] == [
        (0, 0, "mul (hand)"), (0, 2, "clamp (hand)"), (1, 0, "mul (hand)"), (1, 2, "clamp (hand)")]
    for s, total in enumerate(run.instructions):
        assert 0 < sum(lc.instructions for lc in run.layers if lc.sample == s) <= total


@pytest.mark.parametrize("reload", [None, 0xFFF])
def test_instruction_count_matches_a_known_loop(hand_dir, hand_elf, reload):
    """1000 * n iterations of a two-instruction loop: the counts differ by 2000 * n, to two SysTick ticks.

    With a 4096-tick SysTick period the loops span several counter wraps.
    """
    elf = hand_elf if reload is None else hand_image(hand_dir, "reload", cflags=(f"-DKILN_SYSTICK_RELOAD={reload}u",))
    spins = [0, 50, 100, 127]
    samples = [[np.concatenate([[n], np.zeros(39)]).astype(np.int8)] for n in spins]
    run = qemu.run_firmware(elf, NEG, samples, model="hand_neg")
    base = run.instructions[0]
    for n, count in zip(spins[1:], run.instructions[1:]):
        assert abs(count - base - 2000 * n) <= 80


def test_instruction_counts_are_identical_across_runs(hand_elf):
    rng = np.random.default_rng(3)
    samples = [[x, y] for x, y in zip(random_int8(rng, (16,), 4), random_int8(rng, (16,), 4))]
    first = qemu.run_firmware(hand_elf, MUL, samples, model="hand_mul", layers=True)
    second = qemu.run_firmware(hand_elf, MUL, samples, model="hand_mul", layers=True)
    assert first.instructions == second.instructions
    assert [lc.instructions for lc in first.layers] == [lc.instructions for lc in second.layers]


def test_model_table_selection_and_errors(hand_dir, hand_elf):
    assert qemu.list_models(hand_elf) == ["hand_mul", "hand_neg", "hand_fault"]
    sample = [[np.zeros(16, np.int8), np.zeros(16, np.int8)]]
    with pytest.raises(KilnError, match=r"status 1 \(usage error\)"):
        qemu.run_firmware(hand_elf, MUL, sample)
    with pytest.raises(KilnError, match=r"status 1 \(usage error\)"):
        qemu.run_firmware(hand_elf, MUL, sample, model="no_such_model")
    one_output = _graph("hand_mul", {"x": ((16,), "int8"), "y": ((16,), "int8")}, {"z": ((16,), "int8")})
    with pytest.raises(KilnError, match="the image's model has 2 inputs and 2 outputs, graph 'hand_mul' 2 and 1"):
        qemu.run_firmware(hand_elf, one_output, sample, model="hand_mul")
    run = qemu.run_elf(hand_elf, ["hand_mul"], stdin=bytes(20))
    assert run.status == 2 and "short read" in run.stderr
    small = hand_image(hand_dir, "small_arena", [cortex_m.FirmwareModel("hand_mul", 16, 16, 64, 2), *HAND_MODELS[1:]])
    with pytest.raises(KilnError, match="does not fit"):
        qemu.run_firmware(small, MUL, sample, model="hand_mul")


@pytest.mark.parametrize("how, exception, number", [(1, "BusFault", 5), (2, "UsageFault", 6), (3, "MemManage", 4)])
def test_fault_is_a_quick_failure(hand_elf, how, exception, number):
    """A bad address, an undefined instruction and a stack overflow each end the run with a report (not the timeout)."""
    with pytest.raises(KilnError, match=rf"firmware fault \(exit status {128 + number}\): kiln fault: {exception} "):
        qemu.run_firmware(hand_elf, FAULT, [[np.array([how], np.int8)]], model="hand_fault", timeout=30)
    assert qemu.run_firmware(hand_elf, FAULT, [[np.array([9], np.int8)]], model="hand_fault").outputs[0][0][0] == 9


def test_stack_peak_is_measured(hand_elf):
    shallow = qemu.run_firmware(hand_elf, FAULT, [[np.array([9], np.int8)]], model="hand_fault")
    deep = qemu.run_firmware(hand_elf, FAULT, [[np.array([5], np.int8)]], model="hand_fault")
    assert deep.outputs[0][0][0] == 5
    assert shallow.stack_bytes < 1024 and 2048 < deep.stack_bytes < 2048 + 1024


def test_hang_is_bounded_by_the_timeout(hand_elf):
    with pytest.raises(KilnError, match="no exit within 2 s"):
        qemu.run_firmware(hand_elf, FAULT, [[np.array([4], np.int8)]], model="hand_fault", timeout=2)
    assert not running_with(str(hand_elf)), "QEMU left running"


def running_with(argument: str) -> list[str]:
    """Processes whose command line holds `argument`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if argument in cmdline.read_bytes().decode(errors="replace"):
                found.append(cmdline.parent.name)
        except OSError:  # the process ended while we looked
            pass
    return found


def test_size_report_of_hand_image(hand_elf):
    report = size.size_report(hand_elf)
    assert report.arena == 32 and report.io == 96 and report.weights == 0  # the largest of HAND_MODELS
    assert report.stack == 0x8000 and report.ram == report.data + report.bss + report.stack
    assert report.code > 0 and report.flash >= report.code + report.data
    assert set(report.parts) >= {"model", "platform", "libc"}
    assert sum(p["flash"] for p in report.parts.values()) <= report.flash
    assert sum(p["ram"] for p in report.parts.values()) == report.data + report.bss


def test_macs_of_conv_depthwise_and_fully_connected():
    t = {
        "x": Tensor("x", (1, 8, 8, 8), "int8"), "w": Tensor("w", (16, 3, 3, 8), "int8", data=np.zeros((16, 3, 3, 8))),
        "c": Tensor("c", (1, 8, 8, 16), "int8"), "dw": Tensor("dw", (1, 3, 3, 16), "int8", data=np.zeros((1, 3, 3, 16))),
        "d": Tensor("d", (1, 4, 4, 16), "int8"), "f": Tensor("f", (1, 256), "int8"),
        "fw": Tensor("fw", (10, 256), "int8", data=np.zeros((10, 256))), "y": Tensor("y", (1, 10), "int8"),
    }
    nodes = [Node("conv", "conv2d", ["x", "w"], ["c"]), Node("dw", "depthwise_conv2d", ["c", "dw"], ["d"]),
             Node("flat", "reshape", ["d"], ["f"]), Node("fc", "fully_connected", ["f", "fw"], ["y"])]
    g = Graph("m", tensors=t, nodes=nodes, inputs=["x"], outputs=["y"])
    assert [node_macs(g, n) for n in nodes] == [8 * 8 * 16 * 72, 4 * 4 * 16 * 9, 0, 2560]
    assert graph_macs(g) == 73728 + 2304 + 2560


# -- every model under models/, through the whole chain ----------------------------------------
@pytest.mark.parametrize("name", MODELS)
def test_model_matches_host_program_and_reference(name, tmp_path):
    """Bit-exact with the host program and the reference; instruction counts repeat exactly; sizes match the plan."""
    name, model_dir, cfg = resolve_source(ROOT / "models" / name, None)
    for st in STAGES:
        run_stage(st.name, name, model_dir, cfg, tmp_path)
    source, prefix = tmp_path / f"{name}.c", host.model_prefix(tmp_path / f"{name}.h")
    quantized, planned = load(tmp_path / "quantized.kir"), load(tmp_path / "planned.kir")
    exe = host.build_executable([source], [prefix], tmp_path / "host_program")
    elf = cortex_m.build_firmware([source], [firmware_model(prefix, (tmp_path / f"{name}.h").read_text())], tmp_path / "firmware" / f"{name}.elf")

    samples = quantize_inputs(quantized, seeded_inputs(quantized, load_samples(tmp_path).inputs))
    run = qemu.run_firmware(elf, planned, samples)
    on_host = host.run_executable(exe, planned, samples)
    want = reference_outputs(quantized, samples)
    for got, h, w in zip(run.outputs, on_host, want):
        for g, hh, ww in zip(got, h, w):
            assert g.tobytes() == hh.tobytes() == np.ascontiguousarray(ww, g.dtype).tobytes()
    assert all(i > 0 for i in run.instructions)
    # SysTick counts whole ticks (40 instructions on the AN386): the phase at which an invoke starts depends on
    # how the harness's semihosting reads of stdin were split, so a count repeats to within one tick.
    tick = qemu.image_target(elf).instructions_per_tick
    again = qemu.run_firmware(elf, planned, samples[:3]).instructions
    assert all(abs(a - b) <= tick for a, b in zip(again, run.instructions[:3])), (again, run.instructions[:3])

    report = size.size_report(elf)
    assert report.arena == max(1, int(planned.meta["arena_size"]))
    assert report.weights == sum(t.nbytes for t in planned.tensors.values() if t.is_constant)


# -- the SCons build -----------------------------------------------------------------------------
def test_scons_cortex_m4_target(tmp_path):
    """`scons target=cortex-m4` in a project with one model: per-model and combined images that run."""
    model = "tiny_cnn" if "tiny_cnn" in MODELS else MODELS[0]
    copy_repo(tmp_path, (model,))
    scons = [sys.executable, "-m", "SCons", "-Q", "-j2"]
    bad = subprocess.run(scons + ["target=bogus"], cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown target 'bogus'" in bad.stderr
    proc = subprocess.run(scons + ["target=cortex-m4"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    build = tmp_path / "build" / "cortex-m4"
    assert not (tmp_path / "build" / "host" / model / model).exists()  # the stages ran there, no host program was built
    quantized, planned = load(build / model / "quantized.kir"), load(build / model / "planned.kir")
    samples = quantize_inputs(quantized, seeded_inputs(quantized, load_samples(build / model).inputs, count=3))
    want = reference_outputs(quantized, samples)
    assert qemu.list_models(build / "firmware.elf") == [model]
    for elf in (build / model / f"{model}.elf", build / "firmware.elf"):
        assert elf.with_suffix(".map").is_file()
        run = qemu.run_firmware(elf, planned, samples, model=model)
        assert all(g.tobytes() == np.ascontiguousarray(w, g.dtype).tobytes() for gs, ws in zip(run.outputs, want) for g, w in zip(gs, ws))
    again = subprocess.run(scons + ["target=cortex-m4"], cwd=tmp_path, capture_output=True, text=True)
    assert again.returncode == 0 and "arm-none-eabi-gcc" not in again.stdout and "kiln table" not in again.stdout
