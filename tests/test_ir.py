"""The IR's .kir files and verifier: round trips, canonical bytes, and the errors users see."""
import numpy as np
import pytest

from kiln.errors import KilnError
from kiln.ir import Graph, Node, QuantParams, Tensor, dumps, loads
from kiln.ir.fb import Kir as FbKir
from kiln.ir.serialize import FILE_IDENTIFIER, SCHEMA_VERSION
from kiln.ir.verify import VerifyError, verify


def small_graph() -> Graph:
    g = Graph("small")
    g.add_tensor(Tensor("x", (1, 4, 4, 3), "int8", "NHWC", QuantParams((0.5,), (-3,))))
    w = np.arange(2 * 3 * 3 * 3, dtype=np.int8).reshape(2, 3, 3, 3)
    g.add_tensor(Tensor("w", w.shape, "int8", "OHWI", QuantParams((0.01, 0.02), (0, 0), 0), w))
    g.add_tensor(Tensor("b", (2,), "int32", quant=QuantParams((0.005, 0.01), (0, 0), 0), data=np.array([7, -9], np.int32)))
    g.add_tensor(Tensor("y", (1, 2, 2, 2), "int8", "NHWC", QuantParams((0.25,), (5,))))
    g.nodes.append(Node("conv", "conv2d", ["x", "w", "b"], ["y"],
                        {"strides": [1, 1], "pads": [0, 0, 0, 0], "act_min": 0.0, "act_max": float("inf"), "note": "é */"},
                        source="model.py: y = self.conv(x)", source_name="features.3.conv"))
    g.inputs, g.outputs = ["x"], ["y"]
    g.meta["origin"] = "test"
    return g


def test_round_trip_keeps_everything():
    g = small_graph()
    back = loads(dumps(g))
    assert back.name == g.name and back.inputs == g.inputs and back.outputs == g.outputs and back.meta == g.meta
    assert back.nodes == g.nodes
    for name, t in g.tensors.items():
        u = back.tensors[name]
        assert (u.shape, u.dtype, u.layout, u.quant) == (t.shape, t.dtype, t.layout, t.quant)
        assert (u.data is None) == (t.data is None)
        if t.data is not None:
            assert u.data.dtype == t.data.dtype and np.array_equal(u.data, t.data)


def test_bytes_are_canonical():
    g = small_graph()
    shuffled = small_graph()
    shuffled.tensors = dict(reversed(list(shuffled.tensors.items())))
    shuffled.nodes[0].attrs = dict(reversed(list(shuffled.nodes[0].attrs.items())))
    assert dumps(g) == dumps(shuffled) == dumps(loads(dumps(g)))


def test_file_identifier_version_and_level_are_written():
    buf = dumps(small_graph(), "lowered")
    assert buf[8:12] == FILE_IDENTIFIER and SCHEMA_VERSION == 2
    root = FbKir.Kir.GetRootAs(buf, 4)
    assert (root.SchemaVersion(), root.Level()) == (2, 4) and loads(buf, level="lowered") is not None


@pytest.mark.parametrize("cut", [1, 20, 100])
def test_truncated_file_is_a_clear_error(cut):
    buf = dumps(small_graph())
    with pytest.raises(KilnError, match="truncated"):
        loads(buf[:-cut], "x.kir")


def test_foreign_file_is_a_clear_error():
    with pytest.raises(KilnError, match="not a .kir file"):
        loads(b"\x1c\x00\x00\x00\x00\x00\x00\x00TFL3" + b"\x00" * 20, "model.tflite")
    with pytest.raises(KilnError, match="too short"):
        loads(b"KIR", "tiny.kir")


@pytest.mark.parametrize("version", [1, SCHEMA_VERSION + 1])
def test_other_schema_versions_are_refused(version):
    import flatbuffers

    b = flatbuffers.Builder(64)
    FbKir.Start(b)
    FbKir.AddSchemaVersion(b, version)  # version 1 files had a Graph root whose first field was the version
    b.FinishSizePrefixed(FbKir.End(b), FILE_IDENTIFIER)
    with pytest.raises(KilnError, match=f"other.kir: .kir schema version {version}, this Kiln reads version {SCHEMA_VERSION}"):
        loads(bytes(b.Output()), "other.kir")


def test_copy_never_shares_mutable_structure():
    g = small_graph()
    c = g.copy()
    c.nodes[0].attrs["strides"].append(9)
    c.nodes[0].inputs[0] = "z"
    c.tensors["x"].attrs["offset"] = 4
    assert g.nodes[0].attrs["strides"] == [1, 1] and g.nodes[0].inputs[0] == "x" and "offset" not in g.tensors["x"].attrs
    with pytest.raises(ValueError):
        c.tensors["w"].data[0, 0, 0, 0] = 1  # constants are read-only


def test_verifier_accepts_valid_graph():
    verify(small_graph())


@pytest.mark.parametrize(
    "breakage, message",
    [
        (lambda g: g.tensors["y"].__setattr__("shape", (1, 3, 3, 2)), "op gives"),
        (lambda g: g.tensors["x"].__setattr__("quant", None), "int8 without quantization"),
        (lambda g: g.nodes.__setitem__(0, g.nodes[0].copy(inputs=["q", "w", "b"])), "used before it is defined"),
        (lambda g: g.nodes.__setitem__(0, g.nodes[0].copy(op="frobnicate")), "op not allowed"),
        (lambda g: g.tensors["w"].__setattr__("quant", QuantParams((0.1,), (0,), 0)), "scales"),
        (lambda g: g.outputs.append("nowhere"), "never defined"),
    ],
)
def test_verifier_names_the_broken_invariant(breakage, message):
    g = small_graph()
    breakage(g)
    with pytest.raises(VerifyError, match=message):
        verify(g)


def test_verifier_checks_levels():
    with pytest.raises(VerifyError, match="not allowed"):
        verify(small_graph(), levels=("source",))


@pytest.mark.parametrize("length", [0, 1, 3, 7, 8, 9, 13, 1000, 65541])
def test_the_frame_around_a_payload_is_the_table_flatbuffers_builds(length):
    """`dump_chunks` frames the graph's bytes without copying them; the bytes equal the table built around them."""
    import flatbuffers

    from kiln.ir.serialize import _checksum, _frame

    payload = np.random.default_rng(length).integers(0, 256, length, dtype=np.uint8).tobytes()
    for level in range(6):
        b = flatbuffers.Builder(length + 128)
        checksum = b.CreateByteVector(_checksum(SCHEMA_VERSION, level, payload))
        nested = b.CreateByteVector(payload)
        FbKir.Start(b)
        FbKir.AddSchemaVersion(b, SCHEMA_VERSION)
        FbKir.AddLevel(b, level)
        FbKir.AddChecksum(b, checksum)
        FbKir.AddPayload(b, nested)
        b.FinishSizePrefixed(FbKir.End(b), FILE_IDENTIFIER)
        head, tail = _frame(length, _checksum(SCHEMA_VERSION, level, payload), level)
        assert head + payload + tail == bytes(b.Output())


def test_loaded_constants_are_views_of_the_file_not_copies():
    buf = dumps(small_graph())
    g = loads(buf)
    assert np.shares_memory(g.tensors["w"].data, np.frombuffer(buf, np.uint8)) and not g.tensors["w"].data.flags.writeable


def test_a_failing_stream_of_chunks_leaves_the_old_file(tmp_path):
    from kiln.atomic import write_atomic

    def chunks():
        yield b"half of "
        raise KilnError("broken")

    target = tmp_path / "model.c"
    target.write_bytes(b"old")
    with pytest.raises(KilnError):
        write_atomic(target, chunks())
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["model.c"]
    write_atomic(target, [b"new ", memoryview(b"bytes")])
    assert target.read_bytes() == b"new bytes"


@pytest.mark.parametrize("kernel, table_dtype, ok", [("kiln_add_table_s8", "int32", True), ("kiln_add_s8", "int32", False),
                                                     ("kiln_add_table_s8", "int16", False)])
def test_an_add_takes_a_third_input_only_as_the_table_kernels_int32_table(kernel, table_dtype, ok):
    g = Graph("add")
    for name in ("a", "b", "y"):
        g.add_tensor(Tensor(name, (1, 2, 2, 3), "int8", "NHWC", QuantParams((0.5,), (0,))))
    g.add_tensor(Tensor("t", (512,), table_dtype, data=np.zeros(512, table_dtype)))
    g.nodes.append(Node("add", "add", ["a", "b", "t"], ["y"], {"kernel": kernel}))
    g.inputs, g.outputs = ["a", "b"], ["y"]
    if ok:
        verify(g)
    else:
        with pytest.raises(VerifyError, match="only kiln_add_table_s8's int32 table"):
            verify(g)
