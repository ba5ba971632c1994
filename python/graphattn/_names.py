# SPDX-License-Identifier: Apache-2.0
"""Names accepted for dtypes, KV cache dtypes, layouts and attention types, and argument type
checks.

Every rejection is a TypeError or ValueError naming the argument, the value and what is
allowed.
"""

import math
import numbers

from . import _lib

# graphattn_dtype_t
FLOAT16 = 0
BFLOAT16 = 1
FLOAT32 = 2  # the cache writes, merge_attn_states and the legacy decode (paged_attention_v1/v2)
# graphattn_kv_dtype_t
KV_AUTO = 0
KV_FP8_E4M3 = 1
KV_FP8_E5M2 = 2
# graphattn_kv_layout_t
NHD = 0
HND = 1
# graphattn_attn_type_t
ATTN_DECODER = 0
ATTN_ENCODER = 1
ATTN_ENCODER_ONLY = 2
ATTN_ENCODER_DECODER = 3



def _library_names(function):
    """value -> name of one C enum, from the library's name enumerator (graphattn.h), which
    holds the C++ API's one table of them (include/graphattn/spec.hpp)."""
    names, value = {}, 0
    while True:
        name = getattr(_lib.lib, function)(value)
        if name is None:
            return names
        names[value] = name.decode()
        value += 1


DTYPE_NAMES = _library_names("graphattn_dtype_name")        # "float16", "bfloat16"
KV_DTYPE_NAMES = _library_names("graphattn_kv_dtype_name")  # "auto", "fp8_e4m3", "fp8_e5m2"
LAYOUT_NAMES = _library_names("graphattn_kv_layout_name")   # "NHD", "HND"
# vLLM's AttentionType values: "decoder", "encoder", "encoder_only", "encoder_decoder"
ATTN_TYPE_NAMES = _library_names("graphattn_attn_type_name")
# AttentionBackend.set_mixed_branches' modes: "off", "serial-prefill-first", "decode-first",
# "prefill-first", "decode-first-high", "prefill-first-high"
MIXED_BRANCHES_NAMES = _library_names("graphattn_mixed_branches_name")

_DTYPES = {"float16": FLOAT16, "fp16": FLOAT16, "half": FLOAT16,
           "bfloat16": BFLOAT16, "bf16": BFLOAT16}
# vLLM's cache dtype names (KV_DTYPE_NAMES; vLLM's "fp8" is e4m3 on CUDA) and the float8 type
# names.
_KV_DTYPES = dict({name: code for code, name in KV_DTYPE_NAMES.items()},
                  fp8=KV_FP8_E4M3, float8_e4m3fn=KV_FP8_E4M3, float8_e5m2=KV_FP8_E5M2,
                  e4m3=KV_FP8_E4M3, e5m2=KV_FP8_E5M2)


def _name_of(value):
    """'float16' for "float16", torch.float16 ("torch.float16") or numpy.dtype('float16')."""
    text = str(value).strip().lower()
    return text[len("torch."):] if text.startswith("torch.") else text


def parse_dtype(value, arg="dtype"):
    """graphattn_dtype_t for a name ("float16", "fp16", "half", "bfloat16", "bf16") or a
    torch/numpy dtype."""
    code = _DTYPES.get(_name_of(value))
    if code is None:
        raise ValueError("%s %r is not supported; supported: float16 (fp16, half), "
                         "bfloat16 (bf16), or the torch dtypes of those" % (arg, value))
    return code


def parse_kv_dtype(value, model_dtype, arg="kv_cache_dtype"):
    """graphattn_kv_dtype_t for vLLM's cache dtype names ("auto", "fp8", "fp8_e4m3",
    "fp8_e5m2"); the model's own 16-bit dtype also means "auto"."""
    name = _name_of(value)
    code = _KV_DTYPES.get(name)
    if code is not None:
        return code
    if _DTYPES.get(name) == model_dtype:
        return KV_AUTO
    raise ValueError("%s %r is not supported; supported: auto (the model's dtype %s), fp8 "
                     "(= fp8_e4m3), fp8_e4m3, fp8_e5m2" % (arg, value, DTYPE_NAMES[model_dtype]))


def parse_q_dtype(value, arg="q_dtype"):
    """graphattn_kv_dtype_t of a query dtype: "auto" (the layer's 16-bit dtype) or e4m3
    ("fp8_e4m3", "fp8", torch.float8_e4m3fn)."""
    name = _name_of(value)
    if name == "auto":
        return KV_AUTO
    if _KV_DTYPES.get(name) == KV_FP8_E4M3:
        return KV_FP8_E4M3
    raise ValueError("%s %r is not supported; supported: auto (the layer's dtype), fp8_e4m3 "
                     "(torch.float8_e4m3fn)" % (arg, value))


def parse_layout(value, arg="layout"):
    text = str(value).strip().upper()
    for code, name in LAYOUT_NAMES.items():
        if text == name:
            return code
    raise ValueError("%s %r is not supported; supported: 'NHD' ([2, num_blocks, block_size, "
                     "num_kv_heads, head_size]) or 'HND' ([2, num_blocks, num_kv_heads, "
                     "block_size, head_size])" % (arg, value))


def parse_attn_type(value, arg="attn_type"):
    """graphattn_attn_type_t for vLLM's AttentionType values ("decoder", "encoder",
    "encoder_only", "encoder_decoder"; any case)."""
    if isinstance(value, str):
        for code, name in ATTN_TYPE_NAMES.items():
            if value.strip().lower() == name:
                return code
    raise ValueError("%s %r is not supported; supported: %s (vLLM's AttentionType)"
                     % (arg, value, ", ".join(repr(n) for n in ATTN_TYPE_NAMES.values())))


def int_arg(name, value, minimum=None, maximum=None):
    """An int argument (bool and float are refused), optionally range-checked."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("%s must be an int, got %r (%s)" % (name, value, type(value).__name__))
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError("%s %d is out of range; allowed: >= %d" % (name, value, minimum))
    if maximum is not None and value > maximum:
        raise ValueError("%s %d is out of range; allowed: <= %d" % (name, value, maximum))
    return value


def float_arg(name, value, minimum=None):
    """A finite float argument (ints accepted, bool refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be a number, got %r (%s)" % (name, value, type(value).__name__))
    value = float(value)
    if not math.isfinite(value):
        raise ValueError("%s %r is not allowed; allowed: a finite number" % (name, value))
    if minimum is not None and value < minimum:
        raise ValueError("%s %r is out of range; allowed: >= %r" % (name, value, minimum))
    return value


def bool_arg(name, value):
    if not isinstance(value, (bool, int)) or value not in (0, 1):
        raise TypeError("%s must be a bool, got %r" % (name, value))
    return bool(value)
