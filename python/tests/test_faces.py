# SPDX-License-Identifier: Apache-2.0
"""The faces against their one declaration: graphattn.h's prototypes, structs and enums against
what python/graphattn/_lib.py and _names.py declare, and the layer configuration's field list
(include/graphattn/layer_config_fields.h) against graphattn.h's struct, the ctypes struct and
AttentionBackend's keyword arguments. A function, struct field or enum value added to or changed
in one face and not the other fails here (docs/faces.md walks through adding one)."""

import ctypes
import inspect
import os
import re

import pytest

from graphattn import _lib, _names, backend

# The source tree whose graphattn.h the package must match: GRAPHATTN_SOURCE_ROOT (set by
# scripts/python_wheel_test.sh, whose tests run from a copy beside an installed wheel), else the
# tree this file is in.
ROOT = os.environ.get("GRAPHATTN_SOURCE_ROOT") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "include", "graphattn", "graphattn.h")
FIELDS = os.path.join(ROOT, "include", "graphattn", "layer_config_fields.h")

pytestmark = pytest.mark.skipif(not os.path.isfile(HEADER),
                                reason="needs the source tree (include/graphattn/graphattn.h)")

# graphattn.h's structs and the ctypes classes that declare them.
STRUCTS = {
    "graphattn_layer_config_t": _lib.LayerConfig,
    "graphattn_cache_options_t": _lib.CacheOptions,
    "graphattn_cache_stats_t": _lib.CacheStats,
    "graphattn_precompile_result_t": _lib.PrecompileResult,
    "graphattn_cache_entry_t": _lib.CacheEntry,
    "graphattn_metadata_t": _lib.Metadata,
    "graphattn_bounds_violation_t": _lib.BoundsViolation,
    "graphattn_decode_prefill_split_t": _lib.DecodePrefillSplit,
}
SCALARS = {
    "int": ctypes.c_int, "unsigned": ctypes.c_uint, "float": ctypes.c_float,
    "double": ctypes.c_double, "size_t": ctypes.c_size_t, "int32_t": ctypes.c_int32,
    "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64, "char": ctypes.c_char,
}
HANDLES = {"graphattn_backend_t", "graphattn_cache_t"}
# Function-pointer typedefs of graphattn.h: ctypes passes them as addresses (a CFUNCTYPE or None).
CALLBACKS = {"graphattn_log_handler_t"}


def _source(path):
    with open(path) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


class Header:
    """graphattn.h's enums (name -> {constant: value}), structs (name -> [(type, name, n)],
    n the array length or None) and prototypes (name -> (return type, [arg types]))."""

    def __init__(self, path):
        text = _source(path)
        self.enums, self.constants = {}, {}
        for body, name in re.findall(r"typedef enum \w+ \{(.*?)\}\s*(\w+);", text, re.S):
            values = {}
            for item in body.split(","):
                const, _, value = item.strip().partition("=")
                if const.strip():
                    values[const.strip()] = int(value.strip(), 0)
            self.enums[name] = values
            self.constants.update(values)
        self.structs = {}
        for body, name in re.findall(r"typedef struct \w+ \{(.*?)\}\s*(\w+);", text, re.S):
            fields = []
            for decl in filter(None, (d.strip() for d in body.split(";"))):
                m = re.match(r"^(.*?[\s*])(\w+(?:\[\d+\])?(?:\s*,\s*\w+)*)$", decl, re.S)
                assert m, "cannot read the field %r of %s" % (decl, name)
                ctype = " ".join(m.group(1).split())
                for item in m.group(2).split(","):
                    am = re.match(r"\s*(\w+)(?:\[(\d+)\])?", item)
                    fields.append((ctype, am.group(1),
                                   int(am.group(2)) if am.group(2) else None))
            self.structs[name] = fields
        self.functions = {}
        for ret, name, args in re.findall(
                r"GRAPHATTN_API\s+([\w\s\*]+?)\s*\b(graphattn_\w+)\s*\(([^)]*)\)\s*"
                r"GRAPHATTN_NOEXCEPT", text, re.S):
            types = []
            for arg in args.split(","):
                arg = " ".join(arg.split())
                if arg in ("", "void"):
                    continue
                types.append(re.sub(r"\s*\b\w+$", "", arg) if not arg.endswith("*") else arg)
            self.functions[name] = (" ".join(ret.split()), types)

    def ctype(self, c_type):
        """The ctypes type that passes c_type (a C type spelled as in the header)."""
        t = re.sub(r"\s+", "", re.sub(r"\bconst\b", "", c_type))
        if t == "char*":
            return ctypes.c_char_p
        if t == "void":
            return None
        if t in ("void*", "DLTensor*") or t in HANDLES:
            return ctypes.c_void_p
        if t.endswith("*"):
            inner = t[:-1].strip()
            if inner in STRUCTS:
                return ctypes.POINTER(STRUCTS[inner])
            return ctypes.POINTER(self.ctype(inner))
        if t in self.enums:
            return ctypes.c_int
        if t in SCALARS:
            return SCALARS[t]
        if t in CALLBACKS:
            return ctypes.c_void_p
        raise AssertionError("test_faces does not know the C type %r" % c_type)


@pytest.fixture(scope="module")
def header():
    return Header(HEADER)


def _same_type(a, b):
    """ctypes types that pass alike (ctypes caches pointer types, and its fixed-width names are
    aliases of the C ones: c_int64 is c_long on LP64)."""
    if a is b:
        return True
    if hasattr(a, "_length_") and hasattr(b, "_length_"):  # arrays
        return a._length_ == b._length_ and _same_type(a._type_, b._type_)
    # A pointer to numbers may be passed as an address (c_void_p); struct pointers may not.
    if b is ctypes.c_void_p and hasattr(a, "contents"):
        return not issubclass(a._type_, ctypes.Structure)
    return False


def _name(t):
    return getattr(t, "__name__", repr(t))


def test_every_prototype_matches_ctypes(header):
    protos = _lib.prototypes()
    assert sorted(set(header.functions) - set(protos)) == [], \
        "graphattn.h declares functions _lib.prototypes() lacks"
    assert sorted(set(protos) - set(header.functions)) == [], \
        "_lib.prototypes() declares functions graphattn.h lacks"
    for name, (ret, args) in sorted(header.functions.items()):
        py_ret, py_args = protos[name]
        want_ret = header.ctype(ret)
        assert (want_ret is None and py_ret is None) or _same_type(want_ret, py_ret), \
            "%s returns %s in graphattn.h, %s in _lib.py" % (name, ret, _name(py_ret))
        assert len(args) == len(py_args), \
            "%s takes %d arguments in graphattn.h (%s), %d in _lib.py" % (
                name, len(args), ", ".join(args), len(py_args))
        for i, (c_arg, py_arg) in enumerate(zip(args, py_args)):
            assert _same_type(header.ctype(c_arg), py_arg), \
                "%s argument %d is %s in graphattn.h, %s in _lib.py" % (
                    name, i, c_arg, _name(py_arg))


def test_every_struct_matches_ctypes(header):
    assert sorted(header.structs) == sorted(STRUCTS), \
        "graphattn.h's structs and test_faces.STRUCTS (the ctypes classes) differ"
    for name, fields in header.structs.items():
        cls = STRUCTS[name]
        py_fields = [f[:2] for f in cls._fields_]
        assert [f[1] for f in fields] == [n for n, _ in py_fields], \
            "%s's fields differ from %s._fields_" % (name, cls.__name__)
        layout = []
        for (c_type, field, length), (_, py_type) in zip(fields, py_fields):
            want = header.ctype(c_type)
            if length is not None:
                want = want * length  # char key[33]: c_char * 33
            assert _same_type(want, py_type), "%s.%s is %s in graphattn.h, %s in _lib.py" % (
                name, field, c_type, _name(py_type))
            layout.append((field, want))
        c_struct = type("C_" + name, (ctypes.Structure,), {"_fields_": layout})
        assert ctypes.sizeof(c_struct) == ctypes.sizeof(cls), name
        for field, _ in layout:
            assert getattr(c_struct, field).offset == getattr(cls, field).offset, (name, field)


def test_enum_constants_match_names(header):
    """_names' constants are graphattn.h's values, and its name tables (read from the library)
    name exactly the C enums' values."""
    pairs = [("graphattn_dtype_t", {"FLOAT16": "GRAPHATTN_DTYPE_FLOAT16",
                                    "BFLOAT16": "GRAPHATTN_DTYPE_BFLOAT16",
                                    "FLOAT32": "GRAPHATTN_DTYPE_FLOAT32"},
              _names.DTYPE_NAMES),
             ("graphattn_kv_dtype_t", {"KV_AUTO": "GRAPHATTN_KV_DTYPE_AUTO",
                                       "KV_FP8_E4M3": "GRAPHATTN_KV_DTYPE_FP8_E4M3",
                                       "KV_FP8_E5M2": "GRAPHATTN_KV_DTYPE_FP8_E5M2"},
              _names.KV_DTYPE_NAMES),
             ("graphattn_kv_layout_t", {"NHD": "GRAPHATTN_KV_LAYOUT_NHD",
                                        "HND": "GRAPHATTN_KV_LAYOUT_HND"},
              _names.LAYOUT_NAMES),
             ("graphattn_attn_type_t", {"ATTN_DECODER": "GRAPHATTN_ATTN_DECODER",
                                        "ATTN_ENCODER": "GRAPHATTN_ATTN_ENCODER",
                                        "ATTN_ENCODER_ONLY": "GRAPHATTN_ATTN_ENCODER_ONLY",
                                        "ATTN_ENCODER_DECODER": "GRAPHATTN_ATTN_ENCODER_DECODER"},
              _names.ATTN_TYPE_NAMES)]
    for enum, constants, names in pairs:
        values = {v for k, v in header.enums[enum].items() if not k.endswith("_ENUM_MAX")}
        assert set(constants.values()) == {k for k in header.enums[enum]
                                           if not k.endswith("_ENUM_MAX")}, enum
        for py, c in constants.items():
            assert getattr(_names, py) == header.constants[c], (py, c)
        assert set(names) == values, "%s: the library names %s, graphattn.h has %s" % (
            enum, sorted(names), sorted(values))
    assert _names.KV_DTYPE_NAMES == {0: "auto", 1: "fp8_e4m3", 2: "fp8_e5m2"}
    assert _lib.ABI_VERSION == int(re.search(r"#define GRAPHATTN_ABI_VERSION (\d+)",
                                             open(HEADER).read()).group(1))


def _field_rows():
    text = _source(FIELDS).replace("\\\n", " ")
    body = text[text.index("GRAPHATTN_LAYER_CONFIG_FIELDS(X)") + len("GRAPHATTN_LAYER_CONFIG_FIELDS(X)"):]
    rows = [[c.strip() for c in r.split(",")] for r in re.findall(r"\bX\(([^()]*)\)", body)]
    assert rows and all(len(r) == 7 for r in rows), rows
    return [dict(zip(("type", "member", "default", "c_type", "c_name", "py_ctype", "py_kwarg"), r))
            for r in rows]


def test_layer_config_fields_match_every_face(header):
    rows = _field_rows()
    c_fields = header.structs["graphattn_layer_config_t"]
    assert c_fields[0][:2] == ("size_t", "struct_size")
    assert [(" ".join(t.split()), n) for t, n, _ in c_fields[1:]] == \
        [(r["c_type"], r["c_name"]) for r in rows], \
        "graphattn_layer_config_t and GRAPHATTN_LAYER_CONFIG_FIELDS list other fields"
    assert [(n, t) for n, t in _lib.LayerConfig._fields_[1:]] == \
        [(r["c_name"], getattr(ctypes, r["py_ctype"])) for r in rows], \
        "_lib.LayerConfig._fields_ and GRAPHATTN_LAYER_CONFIG_FIELDS list other fields"
    kwargs = [p for p in inspect.signature(backend.AttentionBackend.__init__).parameters
              if p != "self"]
    assert sorted(kwargs) == sorted({r["py_kwarg"] for r in rows}), \
        "AttentionBackend's keyword arguments and GRAPHATTN_LAYER_CONFIG_FIELDS's py_kwarg differ"


def test_python_defaults_are_the_libraries(header):
    """AttentionBackend's keyword defaults give the C struct graphattn_layer_config_init fills
    (the C++ defaults), field by field."""
    params = inspect.signature(backend.AttentionBackend.__init__).parameters
    given = {"num_heads": 8, "num_kv_heads": 8, "head_size": 128, "max_model_len": 0,
             "max_num_seqs": 0}
    kwargs = {name: (given[name] if p.default is inspect.Parameter.empty else p.default)
              for name, p in params.items() if name != "self"}
    kwargs["alibi"] = kwargs.pop("alibi_slopes")
    got = backend._layer_config(**kwargs)
    want = _lib.LayerConfig()
    _lib.lib.graphattn_layer_config_init(ctypes.byref(want))
    for row in _field_rows():
        if row["py_kwarg"] in given:
            continue
        assert getattr(got, row["c_name"]) == getattr(want, row["c_name"]), row["c_name"]
