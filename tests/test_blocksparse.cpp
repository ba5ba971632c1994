// SPDX-License-Identifier: Apache-2.0
// Block-sparse attention on the host: the reference's block mask against hand-computed patterns,
// vLLM's head sliding step, the pattern's launch data and checks, the spec axis, and NVRTC
// builds of block-sparse decode and prefill kernels.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "graphattn/backend.hpp"
#include "graphattn/blocksparse.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "runtime/blocksparse.hpp"
#include "testing/reference.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;

namespace {

// Key blocks that query block qb of head h sees, as a 0/1 string over num_blocks blocks.
std::string row_of(const std::vector<unsigned char>& mask, int h, int qb, int num_blocks) {
  std::string s;
  for (int kb = 0; kb < num_blocks; ++kb)
    s += mask[(static_cast<size_t>(h) * num_blocks + qb) * num_blocks + kb] ? '1' : '0';
  return s;
}

test::RefBlockSparse pattern(int local, int vs, int step, int offset = 0) {
  test::RefBlockSparse b;
  b.block_size = 64;
  b.local_blocks = local;
  b.vert_stride = vs;
  b.head_sliding_step = step;
  b.active_head_offset = offset;
  return b;
}

AttentionLayerConfig sparse_layer() {
  AttentionLayerConfig c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_size = 128;
  c.block_size = 16;
  c.max_model_len = 4096;
  c.max_num_seqs = 8;
  c.arch = 90;
  c.blocksparse.block_size = 64;
  c.blocksparse.local_blocks = 2;
  c.blocksparse.vert_stride = 4;
  c.blocksparse.head_sliding_step = 1;
  return c;
}

}  // namespace

TEST_CASE("blocksparse mask: homo head (step 0): every head sees blocks 3, 7 and its local ones") {
  const auto m = test::blocksparse_block_mask(pattern(1, 4, 0), 2, 1, 8);
  for (int h = 0; h < 2; ++h) {
    CHECK(row_of(m, h, 7, 8) == "00010001");
    CHECK(row_of(m, h, 5, 8) == "00010100");  // own block 5; 7 is in the future
    CHECK(row_of(m, h, 0, 8) == "10000000");
  }
  const auto m2 = test::blocksparse_block_mask(pattern(2, 4, 0), 1, 1, 8);
  CHECK(row_of(m2, 0, 7, 8) == "00010011");
  CHECK(row_of(m2, 0, 4, 8) == "00011000");
}

TEST_CASE("blocksparse mask: sliding on query heads shifts each head's strided blocks") {
  // (kb + h + 1) % 4 == 0: head 0 blocks 3, 7; head 1: 2, 6; head 2: 1, 5; head 3: 0, 4.
  const auto m = test::blocksparse_block_mask(pattern(1, 4, 1), 4, 2, 8);
  CHECK(row_of(m, 0, 7, 8) == "00010001");
  CHECK(row_of(m, 1, 7, 8) == "00100011");
  CHECK(row_of(m, 2, 7, 8) == "01000101");
  CHECK(row_of(m, 3, 7, 8) == "10001001");
  // Step 2 over vert_stride 8: shifts 1, 3, 5, 7 -> blocks 7, 5, 3, 1.
  const auto m8 = test::blocksparse_block_mask(pattern(1, 8, 2), 4, 4, 9);
  CHECK(row_of(m8, 0, 8, 9) == "000000011");
  CHECK(row_of(m8, 1, 8, 9) == "000001001");
  CHECK(row_of(m8, 2, 8, 9) == "000100001");
  CHECK(row_of(m8, 3, 8, 9) == "010000001");
}

TEST_CASE("blocksparse mask: sliding on KV heads gives a GQA group one pattern") {
  // Step -1, 4 heads over 2 KV heads: heads 0, 1 (KV head 0) shift 1 -> 3, 7; heads 2, 3 shift 2.
  const auto m = test::blocksparse_block_mask(pattern(1, 4, -1), 4, 2, 8);
  CHECK(row_of(m, 0, 7, 8) == "00010001");
  CHECK(row_of(m, 1, 7, 8) == "00010001");
  CHECK(row_of(m, 2, 7, 8) == "00100011");
  CHECK(row_of(m, 3, 7, 8) == "00100011");
}

TEST_CASE("blocksparse mask: the tensor-parallel offset enters with the heads' global indices") {
  // Rank 1 of 4 heads per rank: local head 0 is global head 4, shift 5 over vert_stride 8 -> 3.
  const auto r0 = test::blocksparse_block_mask(pattern(1, 8, 1, 0), 4, 2, 10);
  const auto r1 = test::blocksparse_block_mask(pattern(1, 8, 1, 4), 4, 2, 10);
  CHECK(row_of(r0, 0, 9, 10) == "0000000101");
  CHECK(row_of(r1, 0, 9, 10) == "0001000001");
  CHECK(row_of(r1, 3, 9, 10) == "1000000011");  // global 7: shift 8 -> blocks 0, 8
  // KV-head slide: rank 1's first KV head is global KV head 2 (offset 4 / group 2): shift 3 -> 5.
  const auto k1 = test::blocksparse_block_mask(pattern(1, 8, -1, 4), 4, 2, 10);
  CHECK(row_of(k1, 0, 9, 10) == "0000010001");
  CHECK(row_of(k1, 1, 9, 10) == "0000010001");
  CHECK(row_of(k1, 2, 9, 10) == "0000100001");  // global KV head 3: shift 4 -> 4
}

TEST_CASE("blocksparse: vLLM's head sliding step and the pattern from its arguments") {
  CHECK(blocksparse_head_sliding_step(32, 8, 8, false, false) == 1);
  CHECK(blocksparse_head_sliding_step(4, 4, 16, false, false) == 4);
  CHECK(blocksparse_head_sliding_step(32, 8, 8, true, false) == 0);
  CHECK(blocksparse_head_sliding_step(32, 8, 8, true, true) == 0);  // homo_head wins
  CHECK(blocksparse_head_sliding_step(32, 8, 8, false, true) == -1);
  CHECK(blocksparse_head_sliding_step(8, 2, 16, false, true) == -8);
  CHECK_THROWS_WITH_AS(blocksparse_head_sliding_step(0, 1, 8, false, false),
                       doctest::Contains("total_num_heads 0"), Error);
  CHECK_THROWS_WITH_AS(blocksparse_head_sliding_step(8, 3, 8, false, false),
                       doctest::Contains("total_num_kv_heads 3"), Error);
  CHECK_THROWS_WITH_AS(blocksparse_head_sliding_step(8, 2, 0, false, false),
                       doctest::Contains("vert_stride 0"), Error);

  const BlockSparseParams p = blocksparse_from_vllm(4, 8, 64, -2, 3, 16);
  CHECK(p.block_size == 64);
  CHECK(p.local_blocks == 4);
  CHECK(p.vert_stride == 8);
  CHECK(p.head_sliding_step == -2);
  CHECK(p.active_head_offset == 48);
  CHECK(p.sparse());
  CHECK_FALSE(blocksparse_from_vllm(4, 1, 64, 1, 0, 16).sparse());  // vLLM's dense decode
  CHECK_THROWS_WITH_AS(blocksparse_from_vllm(4, 8, 64, 1, -1, 16), doctest::Contains("tp_rank -1"),
                       Error);

  // The kernels' launch data: the KV heads' offset is tp_rank * num_kv_heads.
  const GaBlockSparse b = detail::block_sparse_launch_data(p, 16, 4);
  CHECK(b.block == 64);
  CHECK(b.local_blocks == 4);
  CHECK(b.vert_stride == 8);
  CHECK(b.head_sliding_step == -2);
  CHECK(b.head_offset == 48);
  CHECK(b.kv_head_offset == 12);
  const GaBlockSparse dense = detail::block_sparse_launch_data(BlockSparseParams{}, 16, 4);
  CHECK(dense.block == 0);
  CHECK(dense.vert_stride == 0);
}

TEST_CASE("blocksparse: every check of the layer configuration names the value") {
  CHECK(attention_config_problem(sparse_layer()).empty());
  CHECK(spec_for(sparse_layer(), KernelKind::kDecode).block_sparse);
  CHECK(spec_for(sparse_layer(), KernelKind::kPrefill).block_sparse);
  CHECK_FALSE(spec_for(sparse_layer(), KernelKind::kCacheWrite).block_sparse);
  CHECK_FALSE(spec_for(sparse_layer(), KernelKind::kKvScale).block_sparse);
  {
    AttentionLayerConfig c = sparse_layer();
    c.blocksparse.vert_stride = 1;  // dense, as vLLM runs it
    CHECK(attention_config_problem(c).empty());
    CHECK_FALSE(spec_for(c, KernelKind::kDecode).block_sparse);
    c.blocksparse = BlockSparseParams{};
    CHECK(attention_config_problem(c).empty());
    CHECK_FALSE(spec_for(c, KernelKind::kPrefill).block_sparse);
  }
  struct Bad {
    void (*set)(AttentionLayerConfig&);
    const char* says;
  };
  const Bad bad[] = {
      {[](AttentionLayerConfig& c) { c.blocksparse.block_size = 40; }, "block_size 40"},
      {[](AttentionLayerConfig& c) { c.blocksparse.block_size = -64; }, "block_size -64"},
      {[](AttentionLayerConfig& c) {
         c.block_size = 128;
         c.blocksparse.block_size = 64;
       },
       "block size 128"},
      {[](AttentionLayerConfig& c) { c.blocksparse.local_blocks = 0; }, "local_blocks 0"},
      {[](AttentionLayerConfig& c) { c.blocksparse.vert_stride = 0; }, "vert_stride 0"},
      {[](AttentionLayerConfig& c) { c.blocksparse.head_sliding_step = 1 << 25; },
       "head_sliding_step 33554432"},
      {[](AttentionLayerConfig& c) { c.blocksparse.active_head_offset = 4; },
       "active_head_offset 4"},
      {[](AttentionLayerConfig& c) { c.blocksparse.active_head_offset = -8; },
       "active_head_offset -8"},
      {[](AttentionLayerConfig& c) { c.attn_type = AttentionType::kEncoder; }, "encoder"},
      {[](AttentionLayerConfig& c) { c.attn_type = AttentionType::kEncoderDecoder; },
       "encoder_decoder"},
  };
  for (const Bad& b : bad) {
    AttentionLayerConfig c = sparse_layer();
    b.set(c);
    const std::string problem = attention_config_problem(c);
    INFO(problem);
    CHECK(problem.find(b.says) != std::string::npos);
    CHECK(select_decode_kernel(c) == DecodeKernel::kNone);
  }
  AttentionLayerConfig ok = sparse_layer();
  ok.blocksparse.active_head_offset = 16;  // tp_rank 2
  ok.blocksparse.head_sliding_step = -3;
  CHECK(attention_config_problem(ok).empty());
  CHECK(ok != sparse_layer());  // the pattern takes part in ==
}

TEST_CASE("blocksparse: the _bsp spec axis parses, round-trips and refuses other kernels") {
  for (const char* text : {"decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_bsp",
                           "decode_h64_b32_fp16_kve4m3_g1_swa1_cap1_hnd_sm80_alibi_sink_mt_bsp_chk",
                           "prefill_h128_b16_bf16_kvauto_g8_swa0_cap0_nhd_sm90_bsp"}) {
    const AttentionSpec s = AttentionSpec::parse(text);
    CHECK(s.block_sparse);
    CHECK(s.to_string() == text);
  }
  // Today's strings keep parsing, without the axis.
  CHECK_FALSE(
      AttentionSpec::parse("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_chk").block_sparse);
  for (const char* text : {"prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_nc_bsp",
                           "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90_bsp"}) {
    CHECK_THROWS_WITH_AS(AttentionSpec::parse(text), doctest::Contains("block-sparse ("), Error);
  }
  // Block-sparse prefill runs the wgmma kernel on sm_90 (16-bit KV, head % 64 == 0), else the
  // mma.sync kernel.
  const KernelSource src =
      render_kernel(AttentionSpec::parse("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_bsp"));
  CHECK(src.source.find("#define GA_BLOCK_SPARSE 1") != std::string::npos);
  CHECK(src.source.find("pw_bsp_tile_needed") != std::string::npos);
  const KernelSource other =
      render_kernel(AttentionSpec::parse("prefill_h128_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm90_bsp"));
  CHECK(other.source.find("pf_bsp_tile_needed") != std::string::npos);
}

TEST_CASE("blocksparse: NVRTC builds block-sparse decode and prefill kernels") {
  for (const char* text : {
           "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_bsp",
           "decode_h128_b16_fp16_kve4m3_g8_swa0_cap0_nhd_sm90_bsp",
           "decode_h64_b32_bf16_kvauto_g1_swa1_cap1_hnd_sm80_alibi_sink_bsp",
           "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_mt_bsp",
           "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_bsp",
           "prefill_h128_b16_fp16_kve4m3_g1_swa1_cap1_nhd_sm89_alibi_sink_bsp",
           "prefill_h256_b64_bf16_kvauto_g8_swa0_cap0_hnd_sm90_bsp_chk",
       }) {
    test::check_cubin_builds(render_kernel(AttentionSpec::parse(text)));
  }
}
