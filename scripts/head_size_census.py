#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Head sizes of every model type that the installed transformers package knows: each config
class built with its defaults (which mirror the architecture's reference checkpoint), the head
size taken from head_dim or hidden_size / num_attention_heads, for the config and its text,
vision, audio, encoder and decoder sub-configs. Prints the count per head size and the model
types below 32 (docs/small-heads.md). Run with the python_vllm venv's interpreter (vLLM pins
its transformers):  python scripts/head_size_census.py"""
import collections
import logging
import warnings

import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()
logging.disable(logging.WARNING)


def head_sizes(config):
    out = []
    for tag in ("", "text_config", "vision_config", "audio_config", "encoder", "decoder"):
        c = getattr(config, tag, None) if tag else config
        if c is None or not hasattr(c, "to_dict"):
            continue
        h = getattr(c, "head_dim", None)
        hidden = (getattr(c, "hidden_size", None) or getattr(c, "d_model", None)
                  or getattr(c, "n_embd", None))
        heads = (getattr(c, "num_attention_heads", None) or getattr(c, "n_head", None)
                 or getattr(c, "encoder_attention_heads", None))
        if isinstance(h, int) and h > 0:
            out.append((tag or "-", h))
        elif isinstance(hidden, int) and isinstance(heads, int) and heads > 0 \
                and hidden % heads == 0:
            out.append((tag or "-", hidden // heads))
    return out


def main():
    found, failed = {}, 0
    for model_type in CONFIG_MAPPING_NAMES:
        try:
            found_here = head_sizes(transformers.AutoConfig.for_model(model_type))
        except Exception:  # config classes that need arguments
            failed += 1
            continue
        if found_here:
            found[model_type] = found_here
    sizes = [h for v in found.values() for _, h in v]
    print("transformers %s: %d model types, %d with a head size (%d head sizes), %d configs not "
          "constructible with defaults" % (transformers.__version__, len(CONFIG_MAPPING_NAMES),
                                           len(found), len(sizes), failed))
    print("head size: count")
    for h, n in sorted(collections.Counter(sizes).items()):
        print("  %5d: %d" % (h, n))
    print("model types with a head size below 32:")
    for model_type, v in sorted(found.items()):
        if any(h < 32 for _, h in v):
            print("  %s %s" % (model_type, v))


if __name__ == "__main__":
    main()
