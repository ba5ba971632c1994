# SPDX-License-Identifier: Apache-2.0
"""graphattn.metadata: vLLM's builder helpers on host lists and arrays. CPU only."""

import pytest

import graphattn
from graphattn import metadata as md


def test_cudagraph_support():
    assert md.cudagraph_support == md.AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    assert md.cudagraph_support.name == "UNIFORM_SINGLE_TOKEN_DECODE"


def test_can_run_in_cudagraph():
    assert md.can_run_in_cudagraph([0, 1, 2, 3])
    assert md.can_run_in_cudagraph((0, 1))
    assert not md.can_run_in_cudagraph([0, 1, 3])
    assert not md.can_run_in_cudagraph([0, 5])


def test_split_decodes_and_prefills():
    s = md.split_decodes_and_prefills([0, 1, 2, 7, 9])
    assert s == (2, 2, 2, 7)
    assert (s.num_decodes, s.num_prefills, s.num_decode_tokens, s.num_prefill_tokens) == (
        2, 2, 2, 7)
    assert md.split_decodes_and_prefills([0, 1, 2]) == (2, 0, 2, 0)
    assert md.split_decodes_and_prefills([0, 4, 8]) == (0, 2, 0, 8)
    assert md.split_decodes_and_prefills([0, 2, 4, 9], decode_threshold=2) == (2, 1, 4, 5)
    with pytest.raises(graphattn.GraphattnError,
                       match=r"request 1 \(query length 1\) follows prefill request 0"):
        md.split_decodes_and_prefills([0, 3, 4])


def test_host_arrays_and_refusals():
    np = pytest.importorskip("numpy")
    assert md.split_decodes_and_prefills(np.array([0, 1, 5], dtype=np.int32)) == (1, 1, 1, 4)
    assert md.can_run_in_cudagraph(np.arange(5, dtype=np.int64))

    class DeviceArray:
        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

    with pytest.raises(ValueError, match="query_start_loc must be on the host"):
        md.can_run_in_cudagraph(DeviceArray())
    with pytest.raises(TypeError, match="query_start_loc must be a sequence of ints"):
        md.can_run_in_cudagraph("0,1")
    with pytest.raises(TypeError, match=r"query_start_loc\[1\] must be an int, got 1.5"):
        md.can_run_in_cudagraph([0, 1.5])
    with pytest.raises(ValueError, match=r"query_start_loc\[1\] 2147483648 is out of range"):
        md.can_run_in_cudagraph([0, 2**31])
    with pytest.raises(ValueError, match="query_start_loc is empty"):
        md.split_decodes_and_prefills([])
    with pytest.raises(ValueError, match="decode_threshold 0 is out of range"):
        md.split_decodes_and_prefills([0, 1], decode_threshold=0)


def vllm_sizes(max_num_seqs):
    top = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
    return [s for s in sizes if s <= top]


@pytest.mark.parametrize("max_num_seqs", [1, 4, 100, 128, 256, 1024])
def test_default_capture_sizes(max_num_seqs):
    assert md.default_capture_sizes(max_num_seqs) == vllm_sizes(max_num_seqs)


def test_padded_capture_size():
    sizes = md.default_capture_sizes(256)
    assert md.padded_capture_size(sizes, 1) == 1
    assert md.padded_capture_size(sizes, 3) == 4
    assert md.padded_capture_size(sizes, 13) == 16
    assert md.padded_capture_size(sizes, 257) == 272
    assert md.padded_capture_size(sizes, 512) == 512
    assert md.padded_capture_size(sizes, 513) is None  # runs eagerly, unpadded
    assert md.padded_capture_size([16, 4, 8], 5) == 8  # any order
    with pytest.raises(ValueError, match="num_tokens -1 is out of range"):
        md.padded_capture_size(sizes, -1)


def test_speculative_decoding_uniform_batches():
    assert md.cudagraph_support_for(4) == md.AttentionCGSupport.UNIFORM_BATCH
    assert md.cudagraph_support_for(1) == md.cudagraph_support
    assert md.can_run_in_cudagraph([0, 4, 8, 12], decode_query_len=4)
    assert not md.can_run_in_cudagraph([0, 4, 6, 10], decode_query_len=4)  # a short request
    assert not md.can_run_in_cudagraph([0, 4, 8, 12])  # single-token graphs
    assert md.default_capture_sizes(8, 4) == [4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert md.default_capture_sizes(64, 1) == vllm_sizes(64)
    for s in md.default_capture_sizes(256, 3):
        assert s % 3 == 0 and s <= 512
    with pytest.raises(graphattn.GraphattnError, match="decode_query_len 17 is not supported"):
        md.default_capture_sizes(8, 17)
    with pytest.raises(graphattn.GraphattnError, match="decode_query_len 0 is not supported"):
        md.cudagraph_support_for(0)


def test_mixed_graphs():
    # Graphs of any batch (launched with AttentionMetadata(device_split=True)): ALWAYS, and any
    # batch whose decodes come first runs in one.
    assert md.cudagraph_support_for(1, mixed_graphs=True) == md.AttentionCGSupport.ALWAYS
    assert md.cudagraph_support_for(4, mixed_graphs=True) == md.AttentionCGSupport.ALWAYS
    assert md.can_run_in_cudagraph([0, 1, 2, 9, 40], mixed_graphs=True)
    assert md.can_run_in_cudagraph([0, 30], mixed_graphs=True)
    assert md.can_run_in_cudagraph([0, 4, 6, 20], decode_query_len=4, mixed_graphs=True)
    assert not md.can_run_in_cudagraph([0, 30, 31], mixed_graphs=True)  # a decode after a prefill
    assert not md.can_run_in_cudagraph([0, 1, 2, 9, 40])  # without: uniform decodes only
    assert graphattn.AttentionMetadata(None, None, None, None, 0, 0, 1, 0).device_split is False


def test_use_cascade_attention_follows_vllms_rule():
    assert md.use_cascade_attention(8192, [1] * 64, 32, 8, False, False, 132)
    assert not md.use_cascade_attention(255, [1] * 64, 32, 8, False, False, 132)
    assert not md.use_cascade_attention(8192, [1] * 7, 32, 8, False, False, 132)
    assert not md.use_cascade_attention(8192, [1] * 64, 32, 8, True, False, 132)  # ALiBi
    assert not md.use_cascade_attention(8192, [1] * 64, 32, 8, False, True, 132)  # window
    assert md.use_cascade_attention(256, [1] * 7 + [40], 8, 2, False, False, 132)
    assert not md.use_cascade_attention(256, [1] * 8, 2, 1, False, False, 132)
    with pytest.raises(graphattn.GraphattnError, match="num_sms 0 must be positive"):
        md.use_cascade_attention(8192, [1] * 64, 32, 8, False, False, 0)
