"""LZ4 compression of constant weights, in the raw block format `runtime/kiln_lz4.c` decodes.

The plan stage calls this to decide which constants are worth compressing
(and to size their scratch region); codegen calls it again to emit the
blocks. Both get the same bytes: the compressor is deterministic.
"""
from __future__ import annotations

import lz4.block
import numpy as np


def compress(data: np.ndarray) -> bytes:
    """One LZ4 block (no size header) of the array's little-endian bytes, at the highest compression level."""
    little = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<"))
    return lz4.block.compress(little.tobytes(), mode="high_compression", compression=12,
                              store_size=False)


def worth_compressing(data: np.ndarray) -> int:
    """The compressed size when it is smaller than the raw bytes, else 0."""
    if data.nbytes == 0:
        return 0
    size = len(compress(data))
    return size if size < data.nbytes else 0
