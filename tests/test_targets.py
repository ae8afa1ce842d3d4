"""Every firmware target of kiln/target/targets.py: its harness, the zoo bit-exact under its QEMU, boards' limits.

The Cortex-M4 has its own, deeper tests (tests/test_cortex_m.py); here each
other target gets the hand-written harness models (outputs, a loop of known
length against the instruction counter, a stack overflow reported as a
fault), every zoo model that fits its board run on 10 seeded samples and
compared bit for bit with the integer reference executor (the models of a
target share one image, one QEMU run per model), and the models that do not
fit refused with one line naming the region and the overflow.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import copy_repo, scons
from test_cortex_m import FAULT, HAND_C, HAND_MODELS, MUL, NEG, expected_mul, random_int8
from kiln import check, host
from kiln.errors import KilnError
from kiln.ir import load
from kiln.model_table import FirmwareModel, firmware_model, model_sizes
from kiln.quantize.kept import load_samples
from kiln.runio import quantize_inputs
from kiln.stages import STAGES
from kiln.target import cortex_m, elf, qemu, size
from kiln.target.targets import TARGETS

ROOT = Path(__file__).resolve().parent.parent
MODELS = sorted(p.parent.name for p in (ROOT / "models").glob("*/model.toml"))
OTHERS = [t for t in TARGETS if t != "cortex-m4"]  # the Cortex-M4 runs the zoo in tests/test_cortex_m.py


@pytest.fixture(scope="module")
def hand(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("hand_targets")
    (d / "hand.c").write_text(HAND_C)
    return d


@pytest.mark.parametrize("name", OTHERS)
def test_hand_models_counts_and_faults(hand, name):
    """The harness on each board: outputs exact, a 2-instruction loop counted exactly, a stack overflow a fault."""
    t = TARGETS[name]
    image = cortex_m.build_firmware([hand / "hand.c"], HAND_MODELS, hand / name / "hand.elf", target=name)
    assert elf.image_target(image) == t
    rng = np.random.default_rng(11)
    samples = [[x, y] for x, y in zip(random_int8(rng, (16,), 3), random_int8(rng, (16,), 3))]
    run = qemu.run_firmware(image, MUL, samples, model="hand_mul")
    for got, (x, y) in zip(run.outputs, samples):
        assert [g.tobytes() for g in got] == [w.tobytes() for w in expected_mul(x, y)]
    assert 0 < run.stack_bytes < 4096

    spins = [0, 50, 127]
    neg = qemu.run_firmware(image, NEG, [[np.concatenate([[n], np.zeros(39)]).astype(np.int8)] for n in spins], model="hand_neg")
    tick = float(t.instructions_per_tick)
    for n, count in zip(spins[1:], neg.instructions[1:]):
        assert abs(count - neg.instructions[0] - 2000 * n) <= 2 * tick, (name, n, count, neg.instructions[0])

    with pytest.raises(KilnError, match=r"firmware fault \(exit status \d+\): kiln fault: (MemManage|HardFault|StoreAccessFault) "):
        qemu.run_firmware(image, FAULT, [[np.array([3], np.int8)]], model="hand_fault", timeout=30)

    report = size.size_report(image)
    assert (report.target, report.flash_size, report.ram_size) == (name, t.read_only_bytes, t.ram.length)
    assert {n: u["size"] for n, u in report.regions.items()} == {n: r.length for n, r in t.memory.items()}
    assert report.fits and report.stack == t.stack and report.arena == 32 and report.io == 96


def needs(build: Path, name: str, target, scratch: Path) -> size.Budget:
    """A compiled model's budget on `target` (its object compiled for the target into `scratch`)."""
    header = build / f"{name}.h"
    prefix = host.model_prefix(header)
    obj = scratch / f"{target.name}-{name}.o"
    subprocess.run([cortex_m.compiler(target), *cortex_m.CFLAGS, *cortex_m.ccflags(target), f"-I{cortex_m.RUNTIME}",
                    "-c", str(build / f"{name}.c"), "-o", str(obj)], check=True)
    fm = firmware_model(prefix, header.read_text())
    return size.budget(name, target, fm.arena_size, fm.io_bytes, model_sizes(header, obj)[1])


def build_group(d: Path, target: str, builds: dict[str, Path]) -> dict[str, Path]:
    """Images holding every model of `builds`, as few as the board takes: halves are tried when one does not fit."""
    names = sorted(builds)
    sources = [builds[n] / f"{n}.c" for n in names]
    models = [firmware_model(host.model_prefix(builds[n] / f"{n}.h"), (builds[n] / f"{n}.h").read_text()) for n in names]
    try:
        image = cortex_m.build_firmware(sources, models, d / "_".join(names)[:60] / "zoo.elf", target=target)
        return dict.fromkeys(names, image)
    except KilnError as exc:
        if "does not fit" not in str(exc) or len(names) == 1:
            raise
    half = len(names) // 2
    return {**build_group(d, target, {n: builds[n] for n in names[:half]}),
            **build_group(d, target, {n: builds[n] for n in names[half:]})}


@pytest.mark.parametrize("name", OTHERS)
def test_zoo_is_bit_exact_on_every_target(compiled, tmp_path, name):
    """Every zoo model that fits the board: 10 seeded samples, outputs equal the integer reference's bit for bit.

    A model over its budget (kiln.target.size.budget) must be refused by the link with one line naming the region.
    """
    t = TARGETS[name]
    builds = {m: compiled(m) for m in MODELS}
    budgets = {m: needs(b, m, t, tmp_path) for m, b in builds.items()}
    fitting = {m: b for m, b in builds.items() if budgets[m].problem(t) is None}
    for m in sorted(set(builds) - set(fitting)):
        fm = firmware_model(host.model_prefix(builds[m] / f"{m}.h"), (builds[m] / f"{m}.h").read_text())
        with pytest.raises(KilnError) as refused:
            cortex_m.build_firmware([builds[m] / f"{m}.c"], [fm], tmp_path / "refused" / m / f"{m}.elf", target=name)
        assert re.fullmatch(rf".*{m}\.elf: does not fit {name} \(.*\): region (RAM|FLASH) .* overflowed by \d+ bytes.*",
                            str(refused.value)) and "\n" not in str(refused.value)
    assert fitting, f"no zoo model fits {name}"
    images = build_group(tmp_path, name, fitting)
    for m, build in sorted(fitting.items()):
        quantized, planned = load(build / "quantized.kir"), load(build / "planned.kir")
        samples = quantize_inputs(quantized, check.seeded_inputs(quantized, load_samples(build).inputs))
        assert len(samples) == 10
        run = qemu.run_firmware(images[m], planned, samples, model=m, timeout=300)
        want = check.reference_outputs(quantized, samples)
        for i, (got, ref) in enumerate(zip(run.outputs, want)):
            for g, w in zip(got, ref):
                assert g.tobytes() == np.ascontiguousarray(w, g.dtype).tobytes(), f"{m} on {name}: sample {i} differs"
        assert all(n > 0 for n in run.instructions)


def test_the_micro_bit_takes_the_small_models_only(compiled, tmp_path):
    """The M0 board (16 KB RAM, 256 KB flash) fits the small models; kws_dscnn's arena (over 16 KB) and
    ad_autoencoder's 284 KB of weights do not."""
    t = TARGETS["cortex-m0"]
    assert needs(compiled("tiny_cnn"), "tiny_cnn", t, tmp_path).problem(t) is None
    kws = compiled("kws_dscnn")
    arena = int(load(kws / "planned.kir").meta["arena_size"])
    ram = needs(kws, "kws_dscnn", t, tmp_path).problem(t)
    assert re.fullmatch(rf"kws_dscnn does not fit cortex-m0 \(BBC micro:bit \(nRF51822\)\): RAM needs \d+ bytes "
                        rf"\(arena {arena} \+ io \d+ \+ stack 2048\) of 16384, over by \d+", ram)
    flash = needs(compiled("ad_autoencoder"), "ad_autoencoder", t, tmp_path).problem(t)
    assert "flash needs" in flash and "of 262144, over by" in flash


def test_m55_image_keeps_code_in_the_itcm_and_weights_in_the_qspi_flash(compiled, tmp_path):
    """The M55 boots from its 512 KB ITCM, less than half the zoo's weights: an image of several models keeps the
    vector table and the code there, the constants and weights in the QSPI flash (`rodata` in targets.py), and
    runs bit-exact with the weights read from there."""
    t = TARGETS["cortex-m55"]
    names = ["digits_cnn", "tiny_cnn"]
    builds = {m: compiled(m) for m in names}
    models = [firmware_model(host.model_prefix(builds[m] / f"{m}.h"), (builds[m] / f"{m}.h").read_text()) for m in names]
    image = cortex_m.build_firmware([builds[m] / f"{m}.c" for m in names], models, tmp_path / "m55.elf", target=t)

    qspi = (t.rodata.origin, t.rodata.origin + t.rodata.length)
    placed = {s.name: s for s in size.sections(image, t)}
    assert elf.symbols(image)["k_vectors"] == placed[".text"].address == t.flash.origin  # where the core boots
    assert qspi[0] <= placed[".rodata"].address < qspi[1]
    nm = subprocess.run([t.toolchain + "nm", "-S", "--defined-only", str(image)], capture_output=True, text=True,
                        check=True).stdout.splitlines()
    weights = [(int(r[0], 16), int(r[1], 16)) for r in (line.split() for line in nm)
               if len(r) == 4 and re.fullmatch(r"k_const\d+", r[3])]
    assert len(weights) > len(names) and all(qspi[0] <= at and at + n <= qspi[1] for at, n in weights)

    report = size.size_report(image)  # the flash column counts both regions; the ITCM holds code and little else
    assert report.fits and report.weights == sum(n for _, n in weights)
    assert report.regions["RODATA"]["used"] == placed[".rodata"].size >= report.weights
    assert report.flash == report.regions["FLASH"]["used"] + report.regions["RODATA"]["used"]
    assert 0 <= report.regions["FLASH"]["used"] - report.code - report.data < 64  # .ARM.exidx
    for m in names:
        quantized, planned = load(builds[m] / "quantized.kir"), load(builds[m] / "planned.kir")
        samples = quantize_inputs(quantized, check.seeded_inputs(quantized, load_samples(builds[m]).inputs, count=3))
        run = qemu.run_firmware(image, planned, samples, model=m, timeout=120)
        for got, ref in zip(run.outputs, check.reference_outputs(quantized, samples)):
            assert [g.tobytes() for g in got] == [np.ascontiguousarray(w, g.dtype).tobytes() for g, w in zip(got, ref)]


# -- the SCons build -----------------------------------------------------------------------------
def test_scons_targets_check_and_target_change(tmp_path):
    """`scons target=cortex-m0` refuses the model too big for the micro:bit in one line and builds the other;
    switching to another target reruns only the cross compile and link (and copies the stage artifacts), never a
    stage; `kiln check build/TARGET` runs the images under QEMU against the reference."""
    repo = copy_repo(tmp_path / "repo", ("tiny_cnn", "ad_autoencoder_qdq"))
    bad = subprocess.run([sys.executable, "-m", "SCons", "-Q", "target=cortex-m9"], cwd=repo, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown target 'cortex-m9'" in bad.stderr and "cortex-m55" in bad.stderr
    actions, log = scons(repo, "-k", "-j2", "target=cortex-m0", check=False)
    refusals = sorted({line for line in log.splitlines() if "does not fit" in line})
    assert len(refusals) == 2, log  # the model's own image, before linking; the image of both models, at link time
    assert re.fullmatch(r"kiln: error: build/cortex-m0/firmware.elf: does not fit cortex-m0 \(BBC micro:bit \(nRF51822\)\): "
                        r"region FLASH \(nRF51 flash, 262144 bytes\) overflowed by \d+ bytes", refusals[1]), log
    assert re.fullmatch(r"kiln: error: ad_autoencoder_qdq does not fit cortex-m0 \(BBC micro:bit \(nRF51822\)\): flash needs "
                        r"\d+ bytes \(weights and code\) of 262144, over by \d+", refusals[0]), log
    assert not (repo / "build/cortex-m0/ad_autoencoder_qdq/ad_autoencoder_qdq.elf").exists()
    assert (repo / "build/cortex-m0/tiny_cnn/tiny_cnn.elf").is_file()

    actions, log = scons(repo, "-j2", "target=riscv32", "tiny_cnn")
    stage_names = {st.name for st in STAGES}
    assert [a for a in actions if a[0] in stage_names] == [], log  # no stage reads the target
    shared = [f"build/riscv32/tiny_cnn/{a}" for a in ("imported.kir", "planned.kir", "tiny_cnn.c")]
    assert all(f"kiln share {s}" in log for s in shared), log
    assert "riscv64-unknown-elf-gcc -o build/riscv32/tiny_cnn/tiny_cnn.o -c" in log
    assert "riscv64-unknown-elf-gcc -o build/riscv32/tiny_cnn/tiny_cnn.elf" in log

    for target, expect in (("riscv32", {"tiny_cnn": "bit-exact (10/10)"}),
                           ("cortex-m0", {"tiny_cnn": "bit-exact (10/10)", "ad_autoencoder_qdq": "DOES NOT FIT"})):
        proc = subprocess.run([sys.executable, "-m", "kiln", "check", f"build/{target}"], cwd=repo, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        rows = {line.split()[0]: line for line in proc.stdout.splitlines()[1:] if line}
        for model, verdict in expect.items():
            assert verdict in rows[model], proc.stdout


# -- the kernels' paths per target ---------------------------------------------------------------
def path_cases() -> list[tuple[str, object, dict, int]]:
    """Random shapes for the Helium paths and the portable direct loops, beyond the sweeps': depthwise over
    16-channel blocks with a partial block and a partial 4-channel group (17, 20, 37 channels), 3x3 windows
    over widths of 1 to 9 (blocks of 4 pixels and the pixels left), strides 1 and 2 and every padding, any
    window with dilations and depth multipliers; convs whose windows are not whole vectors against 1 to 19
    output channels; fully connected rows of 1 to 70 values."""
    from test_cortex_m_kernels import DEFAULTS, zoo_case
    from test_kernels import conv_case, fc_case
    limit, cases = DEFAULTS["kernels"]["scratch_limit"], []
    for seed in range(10):
        rng = np.random.default_rng([seed, 20])
        c, stride = int(rng.choice([4, 16, 17, 20, 37])), int(rng.integers(1, 2, endpoint=True))
        h, w = (int(v) for v in rng.integers(1, 9, size=2, endpoint=True))
        pads = tuple(int(v) for v in rng.integers(0, 1, size=4, endpoint=True))
        if h + pads[0] + pads[2] >= 3 and w + pads[1] + pads[3] >= 3:
            cases.append((f"path_dw3x3_{seed}", *zoo_case(rng, "depthwise_conv2d", (1, h, w, c), c, (3, 3), (stride, stride), pads), limit))
        cases.append((f"path_dw_{seed}", *conv_case(rng, "int8", "depthwise_conv2d", channels=(1, 3, 17, 20, 37),
                                                    size_range=(1, 9), k_range=(1, 4)), limit))
        cases.append((f"path_conv_{seed}", *conv_case(rng, "int8", "conv2d", channels=(1, 3, 5, 17), out_channels=(1, 5, 6, 13, 19),
                                                      size_range=(1, 9), k_range=(1, 5)), limit))
        cases.append((f"path_fc_{seed}", *fc_case(rng, "int8", most=(4, 70, 13)), limit))
    return cases


M0_CASE_RAM = 12 * 1024  # arena and I/O bytes of a case the micro:bit's 16 KB of RAM holds in a group, with the stack


@pytest.mark.parametrize("name", ["cortex-m55", "cortex-m0", "cortex-m3"])
def test_kernel_sweeps_match_reference(tmp_path, name):
    """The int8 conv, depthwise, 1x1 and fully connected kernels over tests/test_cortex_m_kernels.py's seeded sweeps,
    zoo layer shapes and path_cases(), in one image: the Helium path on the M55, the portable C (no DSP, no
    unaligned access, no hardware divide) on the M0, the portable C's direct loops on the M3; each output bit for
    bit the integer reference's."""
    from test_cortex_m_kernels import DEFAULTS, PLAN, all_cases
    from kiln.codegen import generate
    from kiln.lower import lower
    from kiln.plan import plan
    from kiln.reference.executor import run
    from kiln.reference.int8 import INT8_IMPLS

    built, sources, models = [], [], []
    for case, graph, feeds, limit in all_cases() + path_cases():
        planned = plan(lower(graph, {"profile": "portable", "scratch_limit": limit}), PLAN)
        for fname, text in generate(planned, case, DEFAULTS["codegen"]).items():
            (tmp_path / fname).write_bytes(text)
        model = firmware_model(host.model_prefix(tmp_path / f"{case}.h"), (tmp_path / f"{case}.h").read_text())
        if name == "cortex-m0" and model.arena_size + model.io_bytes > M0_CASE_RAM:
            continue  # a layer whose maps alone exceed the micro:bit's RAM
        sources.append(tmp_path / f"{case}.c")
        models.append(model)
        built.append((case, graph, planned, feeds))
    assert len(built) >= len(all_cases()) // 2, "the micro:bit runs at least half of the cases"
    kernels = {n.attrs["kernel"] for _, _, planned, _ in built for n in planned.nodes}
    assert {"kiln_conv2d_s8", "kiln_conv2d_1x1_s8", "kiln_depthwise_conv2d_s8", "kiln_fully_connected_s8",
            "kiln_fully_connected_few_s8"} <= kernels
    groups = [built[i::4] for i in range(4)] if name == "cortex-m0" else [built]  # the micro:bit's 16 KB of RAM, 256 KB of flash
    for g, group in enumerate(groups):
        names = {case for case, *_ in group}
        image = cortex_m.build_firmware([s for s in sources if s.stem in names],
                                        [m for m, (case, *_) in zip(models, built) if case in names],
                                        tmp_path / f"image{g}" / "kernels.elf", target=name)
        for case, graph, planned, feeds in group:
            got = qemu.run_firmware(image, planned, [[feeds[n] for n in planned.inputs]], model=case)
            want = run(graph, feeds, table=INT8_IMPLS)
            for out, g_ in zip(planned.outputs, got.outputs[0]):
                assert np.array_equal(g_, want[out]), f"{case} on {name}: {g_.ravel()} != {want[out].ravel()}"


UNALIGNED_C = r"""
#include <stdint.h>
#include <string.h>
#include "kiln_runtime.h"

static const kiln_tensor_info_t k_io[1] = {{"v", KILN_INT8, 1, {8}, 8, 1.0f, 0}};

/* Loads the word at v + (v[0] & 3): unaligned unless v[0] is a multiple of 4. */
static kiln_status_t word_invoke(const void *const *inputs, void *const *outputs, void *arena, size_t arena_size,
                                 kiln_layer_hook_t hook, void *user)
{
    const int8_t *v = (const int8_t *)inputs[0];
    uint32_t w = *(volatile const uint32_t *)(const void *)(v + (v[0] & 3));
    (void)arena;
    (void)arena_size;
    (void)hook;
    (void)user;
    memcpy(outputs[0], &w, 4);
    memset((int8_t *)outputs[0] + 4, 0, 4);
    return KILN_OK;
}

const kiln_model_t word_model = {"word", 0u, 16u, 0u, 1, 1, 0, k_io, k_io, word_invoke};
"""


def test_the_m0_board_faults_on_unaligned_words(tmp_path):
    """QEMU's micro:bit traps an unaligned word load as the Cortex-M0 does, so the zoo and the kernel sweeps running
    there bit-exact show that the generated code and the kernels make none."""
    (tmp_path / "word.c").write_text(UNALIGNED_C)
    image = cortex_m.build_firmware([tmp_path / "word.c"], [FirmwareModel("word", 0, 16, 32, 0)], tmp_path / "m0" / "word.elf",
                                    target="cortex-m0")
    assert qemu.run_elf(image, ["word"], bytes(8)).status == 0
    faulted = qemu.run_elf(image, ["word"], bytes([1] + [0] * 7))
    assert faulted.status == 128 + 3 and faulted.fault.startswith("kiln fault: HardFault exception=0x00000003 pc=")

