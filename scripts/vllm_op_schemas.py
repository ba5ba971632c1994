# SPDX-License-Identifier: Apache-2.0
"""Writes the op schemas that a vLLM kernel library (.so) registers, one per line, read out of
its string table (vLLM's m.def("name(Tensor! out, ...) -> ()") literals), for
python/tests/gpu_vllm_run.py to define where the library itself is not carried.

    python3 scripts/vllm_op_schemas.py vllm/_C_stable_libtorch.abi3.so OUT.txt
"""
import re
import sys

SCHEMA = re.compile(rb"[a-z_0-9]+(?:\.[a-z_0-9]+)?\((?:Tensor|int|float|bool|SymInt|str|"
                    rb"ScalarType|Scalar|\))[^\x00]*?\) -> [^\x00]*")


def main(library, out):
    with open(library, "rb") as f:
        data = f.read()
    found = sorted({" ".join(m.group(0).decode("ascii", "replace").split())
                    for m in SCHEMA.finditer(data)})
    with open(out, "w") as f:
        f.write("\n".join(found) + "\n")
    print("vllm_op_schemas: %d op schemas in %s" % (len(found), library))


if __name__ == "__main__":
    main(*sys.argv[1:])
