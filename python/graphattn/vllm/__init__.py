# SPDX-License-Identifier: Apache-2.0
"""graphattn as a vLLM attention backend (vLLM's v1 interfaces, out-of-tree plugin).

    pip install graphattn            # its `vllm.general_plugins` entry point registers it
    vllm serve MODEL --attention-backend GRAPHATTN      # or LLM(..., attention_backend="GRAPHATTN")
                                                        # (CUSTOM on vLLM 0.26)

The entry point ``graphattn = graphattn.vllm:register_plugin`` runs in every vLLM process
(vLLM's plugin loader) and registers ``GraphattnBackend`` as the attention backend enum member
``GRAPHATTN`` (and as ``CUSTOM``, vLLM's slot for an out-of-tree backend, unless another
plugin took it). Supported vLLM: 0.33.x (``VLLM_VERSION``, what CI tests) and 0.26.x
(``VLLM_TORCH_2_11_VERSION``, the newest release for PyTorch 2.11); with another version the
plugin logs why it does not register, and ``register()`` raises that message.
"""

from typing import Optional

VLLM_VERSION = "0.33.0"
"""The vLLM release graphattn.vllm is built and tested against (the one pin: CI's venv reads it
from here). Any 0.33.x is accepted."""

VLLM_TORCH_2_11_VERSION = "0.26.0"
"""The newest vLLM release pinned to PyTorch 2.11 (vLLM 0.27-0.33 pin 2.13-2.14): the one the
GPU run uses on machines whose PyTorch is 2.11 (scripts/vllm_gpu_bundle.sh reads it from here).
Any 0.26.x is accepted; its KV cache comes from GraphattnBackend.get_kv_cache_shape."""

SUPPORTED_SERIES = (VLLM_VERSION.rsplit(".", 1)[0], VLLM_TORCH_2_11_VERSION.rsplit(".", 1)[0])

BACKEND_NAME = "GRAPHATTN"
BACKEND_PATH = "graphattn.vllm.backend.GraphattnBackend"

__all__ = ["VLLM_VERSION", "VLLM_TORCH_2_11_VERSION", "SUPPORTED_SERIES", "BACKEND_NAME", "BACKEND_PATH", "VersionMismatch", "check_version",
           "backend_name", "register", "register_plugin"]


class VersionMismatch(RuntimeError):
    """The installed vLLM is not the release graphattn.vllm supports."""


def _series(version: str) -> str:
    return ".".join(version.split("+", 1)[0].split(".")[:2])


def check_version(installed: Optional[str] = None) -> str:
    """The installed vLLM version; VersionMismatch (naming both versions) unless its
    major.minor is VLLM_VERSION's."""
    if installed is None:
        import vllm

        installed = getattr(vllm, "__version__", "unknown")
    if _series(installed) not in SUPPORTED_SERIES:
        raise VersionMismatch(
            "graphattn.vllm supports vLLM %s (tested against %s; %s for PyTorch 2.11); the "
            "installed vLLM is %s. Install vllm==%s, or run without --attention-backend %s."
            % (" and ".join(s + ".x" for s in SUPPORTED_SERIES), VLLM_VERSION,
               VLLM_TORCH_2_11_VERSION, installed, VLLM_VERSION, BACKEND_NAME))
    return installed


def backend_name() -> str:
    """The name vLLM knows graphattn by: GRAPHATTN where vLLM's registry takes new names
    (0.33), else CUSTOM (0.26, whose registry has only the CUSTOM slot)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    return BACKEND_NAME if hasattr(AttentionBackendEnum, "register") else "CUSTOM"


def register() -> None:
    """Registers GraphattnBackend with vLLM's attention backend registry: the enum member
    GRAPHATTN (vLLM 0.33), and CUSTOM when no other backend overrides it (the only name on
    vLLM 0.26). Idempotent. Raises VersionMismatch for an unsupported vLLM, and RuntimeError
    on vLLM 0.26 when another plugin took CUSTOM."""
    check_version()
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    if backend_name() == BACKEND_NAME:
        if BACKEND_NAME not in AttentionBackendEnum.__members__:
            register_backend(BACKEND_NAME, BACKEND_PATH)
    elif (AttentionBackendEnum.CUSTOM.is_overridden()
          and AttentionBackendEnum.CUSTOM.get_path() != BACKEND_PATH):
        raise RuntimeError("vLLM's CUSTOM attention backend is already %s; graphattn needs it "
                           "on this vLLM" % AttentionBackendEnum.CUSTOM.get_path())
    if not AttentionBackendEnum.CUSTOM.is_overridden():
        register_backend(AttentionBackendEnum.CUSTOM, BACKEND_PATH)
    from .. import torch_ops  # noqa: F401  (torch.ops.graphattn.*)


def register_plugin() -> None:
    """The ``vllm.general_plugins`` entry point: register(), except that an unsupported vLLM
    is reported in vLLM's log instead of stopping vLLM (selecting GRAPHATTN then fails with
    vLLM's "Unknown attention backend" message, after this one)."""
    import logging

    try:
        register()
    except VersionMismatch as e:
        logging.getLogger("vllm").error("graphattn plugin not registered: %s", e)
