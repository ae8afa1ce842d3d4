"""The LZ4 block decoder in runtime/: round trips against python-lz4, and malformed or truncated
blocks are rejected without a byte read or written outside the buffers (AddressSanitizer)."""
from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import lz4.block
import numpy as np
import pytest

from kiln import host

HARNESS = Path(__file__).parent / "c" / "lz4_cases.c"


@pytest.fixture(scope="module")
def decoder(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("lz4") / "lz4_cases"
    cmd = ["gcc", *host.STRICT_FLAGS, *host.SANITIZE_FLAGS, "-O1", f"-I{host.RUNTIME}",
           str(host.RUNTIME / "kiln_lz4.c"), str(HARNESS), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


def decode_all(exe: Path, cases: list[tuple[bytes, int]]) -> list[bytes | None]:
    """Run the C decoder on (block, capacity) cases; None where it reported an error."""
    payload = b"".join(struct.pack("<II", len(src), cap) + src for src, cap in cases)
    proc = subprocess.run([str(exe)], input=payload, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    out, pos = [], 0
    for _, cap in cases:
        (result,) = struct.unpack_from("<i", proc.stdout, pos)
        pos += 4
        assert -1 <= result <= cap
        out.append(None if result < 0 else proc.stdout[pos:pos + result])
        pos += max(result, 0)
    assert pos == len(proc.stdout)
    return out


def python_decode(src: bytes, cap: int) -> bytes | None:
    try:
        return lz4.block.decompress(src, uncompressed_size=cap)
    except lz4.block.LZ4BlockError:
        return None


def spec_decode(src: bytes, cap: int) -> bytes | None:
    """The block format read literally (no end-of-block restrictions), as an independent model."""
    out, ip = bytearray(), 0

    def length(nibble: int) -> int | None:
        nonlocal ip
        total, more = nibble, nibble == 15
        while more:
            if ip >= len(src):
                return None
            total += src[ip]
            more = src[ip] == 255
            ip += 1
        return total

    while ip < len(src):
        token = src[ip]
        ip += 1
        lit = length(token >> 4)
        if lit is None or ip + lit > len(src) or len(out) + lit > cap:
            return None
        out += src[ip:ip + lit]
        ip += lit
        if ip == len(src):
            return bytes(out)
        if ip + 2 > len(src):
            return None
        offset = src[ip] | src[ip + 1] << 8
        ip += 2
        match = length(token & 15)
        if match is None or offset == 0 or offset > len(out) or len(out) + match + 4 > cap:
            return None
        for _ in range(match + 4):
            out.append(out[-offset])
    return None


def samples(rng: np.random.Generator) -> list[bytes]:
    """Incompressible, repetitive, sparse and weight-like data of sizes around the format's thresholds."""
    out = [b"", b"a", bytes(15), bytes(19), bytes(300), b"ab" * 40000]
    for size in (4, 13, 16, 64, 255, 270, 1000, 4096, 70000):
        out.append(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        out.append(np.repeat(rng.integers(0, 4, -(-size // 7), dtype=np.uint8), 7)[:size].tobytes())
        out.append(np.clip(rng.normal(0, 12, size), -128, 127).astype(np.int8).tobytes())
        out.append(np.where(rng.random(size) < 0.9, 0, rng.integers(-128, 128, size)).astype(np.int8).tobytes())
    return out


def test_round_trip_against_python_lz4(decoder):
    data = samples(np.random.default_rng(0))
    blocks = [lz4.block.compress(d, store_size=False) for d in data]
    blocks += [lz4.block.compress(d, mode="high_compression", compression=12, store_size=False) for d in data]
    data = data + data
    got = decode_all(decoder, [(b, len(d)) for b, d in zip(blocks, data)] + [(b, len(d) + 100) for b, d in zip(blocks, data)])
    assert got == data + data
    short = [(b, len(d) - 1) for b, d in zip(blocks, data) if d]
    assert decode_all(decoder, short) == [None] * len(short)


def test_truncated_blocks_are_rejected(decoder):
    rng = np.random.default_rng(1)
    cases = []
    for d in samples(rng)[:20] + [b"hello world hello world hello"]:
        block = lz4.block.compress(d, store_size=False)
        cases += [(block[:k], len(d)) for k in range(len(block))]
    got = decode_all(decoder, cases)
    for (src, cap), result in zip(cases, got):
        assert result == spec_decode(src, cap), src.hex()
        assert python_decode(src, cap) in (None, result), src.hex()
    assert sum(r is None for r in got) > 0.9 * len(got)


def test_malformed_blocks_are_rejected(decoder):
    crafted = [
        bytes([0x10, ord("a"), 0x00, 0x00, 0x00]),  # match offset 0
        bytes([0x10, ord("a"), 0x02, 0x00, 0x00]),  # offset reaches before the output
        bytes([0x50, 1, 2]),  # 5 literals announced, 2 present
        bytes([0xF0, 0xFF, 0xFF]),  # literal length bytes run off the end
        bytes([0xF0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]),  # a literal length far beyond the input
        bytes([0x1F, ord("a"), 0x01, 0x00, 0xFF, 0xFF, 0xFF, 0x10, 0x00]),  # a match longer than the capacity
        bytes([0x10, ord("a"), 0x01, 0x00]),  # ends with a match, not with literals
        bytes([0x10, ord("a"), 0x01]),  # half an offset
        b"",  # no token at all
    ]
    assert decode_all(decoder, [(c, 64) for c in crafted]) == [None] * len(crafted)
    assert decode_all(decoder, [(bytes([0x00]), 0), (bytes([0x10, 7]), 0)]) == [b"", None]


def test_corrupted_blocks_never_escape_their_buffers(decoder):
    """Random byte flips and garbage: the decoder agrees with the format, accepts whatever python-lz4
    accepts, and ASan sees no access outside its buffers."""
    rng = np.random.default_rng(2)
    cases = []
    for d in samples(rng)[6:30]:
        block = bytearray(lz4.block.compress(d, store_size=False))
        for _ in range(30):
            bad = bytearray(block)
            for pos in rng.integers(0, len(bad), size=int(rng.integers(1, 4))):
                bad[pos] = int(rng.integers(0, 256))
            cases.append((bytes(bad), len(d) + int(rng.integers(-2, 3))))
    cases += [(rng.integers(0, 256, int(n), dtype=np.uint8).tobytes(), int(c))
              for n, c in zip(rng.integers(1, 400, 300), rng.integers(0, 2000, 300))]
    cases = [(src, max(cap, 0)) for src, cap in cases]
    got = decode_all(decoder, cases)
    for (src, cap), result in zip(cases, got):
        assert result == spec_decode(src, cap), src.hex()
        assert python_decode(src, cap) in (None, result), src.hex()
    assert sum(r is not None for r in got) > 0  # some corruptions still decode: the comparison has teeth
