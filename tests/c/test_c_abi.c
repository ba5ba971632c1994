// SPDX-License-Identifier: Apache-2.0
/* CPU tests of the C ABI (include/graphattn/graphattn.h), compiled as C: every status path that
 * needs no GPU, the DLTensor checks (with host tensors, as the Python package's CPU tests feed
 * them), the kernel cache through NVRTC (no GPU needed), capture sizes and the batch split.
 * On a machine with a GPU the GPU-only calls are checked for success instead of failure. */
#define _XOPEN_SOURCE 700

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graphattn/graphattn.h"
#include "tests/c/c_check.h"

#ifndef GRAPHATTN_EXPECTED_VERSION
#error "the build passes the project version as GRAPHATTN_EXPECTED_VERSION"
#endif

#define INVALID GRAPHATTN_ERROR_INVALID_ARGUMENT

_Static_assert(sizeof(graphattn_dtype_t) == sizeof(int) &&
                   sizeof(graphattn_kv_dtype_t) == sizeof(int) &&
                   sizeof(graphattn_kv_layout_t) == sizeof(int),
               "the ABI's enums are passed as int");

static int gpu = 0; /* set in main: some calls succeed only where a GPU is */

/* ---- Library ---------------------------------------------------------------------------- */

static void test_library(void) {
  CHECK(graphattn_abi_version() == GRAPHATTN_ABI_VERSION);
  CHECK(strcmp(graphattn_version(), GRAPHATTN_EXPECTED_VERSION) == 0);
  /* The name enumerators: every value of each C enum has a name, and the one past has none. */
  CHECK(strcmp(graphattn_kv_dtype_name(GRAPHATTN_KV_DTYPE_AUTO), "auto") == 0);
  CHECK(strcmp(graphattn_kv_dtype_name(GRAPHATTN_KV_DTYPE_FP8_E5M2), "fp8_e5m2") == 0);
  CHECK(graphattn_kv_dtype_name(GRAPHATTN_KV_DTYPE_FP8_E5M2 + 1) == NULL);
  CHECK(graphattn_kv_dtype_name(-1) == NULL);
  CHECK(strcmp(graphattn_dtype_name(GRAPHATTN_DTYPE_BFLOAT16), "bfloat16") == 0);
  CHECK(strcmp(graphattn_dtype_name(GRAPHATTN_DTYPE_FLOAT32), "float32") == 0);
  CHECK(graphattn_dtype_name(GRAPHATTN_DTYPE_FLOAT32 + 1) == NULL);
  CHECK(strcmp(graphattn_kv_layout_name(GRAPHATTN_KV_LAYOUT_HND), "HND") == 0);
  CHECK(graphattn_kv_layout_name(GRAPHATTN_KV_LAYOUT_HND + 1) == NULL);
  CHECK(strcmp(graphattn_attn_type_name(GRAPHATTN_ATTN_ENCODER_DECODER), "encoder_decoder") == 0);
  CHECK(graphattn_attn_type_name(GRAPHATTN_ATTN_ENCODER_DECODER + 1) == NULL);
  CHECK(strcmp(graphattn_status_string(GRAPHATTN_OK), "GRAPHATTN_OK") == 0);
  CHECK(strcmp(graphattn_status_string(GRAPHATTN_ERROR_COMPILE), "GRAPHATTN_ERROR_COMPILE") == 0);
  CHECK(strcmp(graphattn_status_string(GRAPHATTN_ERROR_BUFFER_TOO_SMALL),
               "GRAPHATTN_ERROR_BUFFER_TOO_SMALL") == 0);
  CHECK(strcmp(graphattn_status_string((graphattn_status_t)42), "GRAPHATTN_STATUS_UNKNOWN") == 0);

  int available = -1;
  CHECK(graphattn_gpu_available(&available) == GRAPHATTN_OK);
  CHECK(available == gpu);
  int count = -1;
  CHECK_OK(graphattn_device_count(&count));
  CHECK(available ? count >= 1 : count == 0);
  CHECK_FAILS(graphattn_use_device(count), available ? INVALID : GRAPHATTN_ERROR,
              available ? "is out of range" : "no GPU");
  CHECK_FAILS(graphattn_use_device(-1), available ? INVALID : GRAPHATTN_ERROR,
              available ? "device -1 is out of range" : "no GPU");
  CHECK_FAILS(graphattn_device_count(NULL), INVALID, "count is NULL");
  if (!available) {
    CHECK(graphattn_last_error()[0] != '\0'); /* says what is missing */
    CHECK_FAILS(graphattn_ensure_context(0), GRAPHATTN_ERROR, "no GPU");
    int arch = 0;
    CHECK(graphattn_current_device_arch(&arch) == GRAPHATTN_ERROR);
    CHECK(graphattn_last_error()[0] != '\0');
  } else {
    CHECK_OK(graphattn_use_device(count - 1));
    CHECK_OK(graphattn_ensure_context(0)); /* keeps the current context */
    CHECK_OK(graphattn_use_device(0));
    int arch = 0;
    CHECK_OK(graphattn_current_device_arch(&arch));
    CHECK(arch >= 70);
  }
  CHECK_FAILS(graphattn_gpu_available(NULL), INVALID, "available is NULL");
  CHECK_FAILS(graphattn_current_device_arch(NULL), INVALID, "arch is NULL");
}

/* ---- Last error: cleared by success, one per thread ------------------------------------- */

static void* other_thread(void* arg) {
  (void)arg;
  /* A new thread has no error, whatever the main thread's last call did. */
  if (graphattn_last_error()[0] != '\0') return "fresh thread saw another thread's error";
  if (graphattn_backend_workspace_bytes(NULL, NULL) != INVALID) return "wrong status";
  if (!strstr(graphattn_last_error(), "backend is NULL")) return "wrong message in thread";
  return NULL;
}

static void test_last_error(void) {
  size_t needed = 0;
  CHECK_FAILS(graphattn_cache_dir(NULL, NULL, 0, &needed), INVALID, "cache is NULL");
  pthread_t t;
  void* result = "not run";
  CHECK(pthread_create(&t, NULL, other_thread, NULL) == 0);
  CHECK(pthread_join(t, &result) == 0);
  if (result) fprintf(stderr, "other thread: %s\n", (const char*)result);
  CHECK(result == NULL);
  /* The other thread's failure left this thread's message alone. */
  CHECK(strcmp(graphattn_last_error(), "cache is NULL") == 0);
  /* A success clears it. */
  int padded = 0;
  const int sizes[] = {1, 2, 4};
  CHECK_FAILS(graphattn_padded_capture_size(sizes, 3, 3, NULL), INVALID, "padded is NULL");
  CHECK(graphattn_padded_capture_size(sizes, 3, 3, &padded) == GRAPHATTN_OK);
  CHECK(strcmp(graphattn_last_error(), "") == 0);
  CHECK(padded == 4);
}

/* ---- NULL handles and pointers ---------------------------------------------------------- */

static void test_null_arguments(void) {
  char buf[64];
  size_t n = 0;
  int i = 0;
  graphattn_cache_stats_t stats;
  stats.struct_size = sizeof stats;
  graphattn_layer_config_t cfg;
  graphattn_layer_config_init(&cfg);
  CHECK_FAILS(graphattn_layer_config_check(NULL), INVALID, "config is NULL");
  CHECK_FAILS(graphattn_backend_create(NULL, NULL), INVALID, "backend is NULL");
  graphattn_backend_t b = (graphattn_backend_t)1;
  CHECK_FAILS(graphattn_backend_create(NULL, &b), INVALID, "config is NULL");
  CHECK(b == NULL); /* cleared on failure */
  CHECK_FAILS(graphattn_backend_config(NULL, &cfg), INVALID, "backend is NULL");
  CHECK_FAILS(graphattn_backend_spec(NULL, 0, buf, sizeof buf, &n, &i), INVALID, "backend is NULL");
  CHECK_FAILS(graphattn_backend_prepare(NULL, NULL), INVALID, "backend is NULL");
  CHECK_FAILS(graphattn_backend_workspace_bytes(NULL, &n), INVALID, "backend is NULL");
  CHECK_FAILS(graphattn_backend_forward(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL),
              INVALID, "backend is NULL");
  CHECK_FAILS(graphattn_cache_create(NULL, NULL), INVALID, "cache is NULL");
  CHECK_FAILS(graphattn_cache_default(NULL), INVALID, "cache is NULL");
  CHECK_FAILS(graphattn_cache_stats(NULL, &stats), INVALID, "cache is NULL");
  CHECK_FAILS(graphattn_cache_dir(NULL, buf, sizeof buf, &n), INVALID, "cache is NULL");
  CHECK_FAILS(graphattn_cache_list(NULL, NULL, 0, &n), INVALID, "cache is NULL");
  CHECK_FAILS(graphattn_cache_precompile(NULL, NULL, 0, 1, NULL), INVALID, "cache is NULL");
  CHECK_FAILS(
      graphattn_write_kv_cache(NULL, NULL, NULL, NULL, GRAPHATTN_KV_DTYPE_AUTO, 1, 1, NULL, NULL),
      INVALID, "key is NULL");
  CHECK_FAILS(graphattn_can_run_in_cudagraph(NULL, 1, &i), INVALID, "query_start_loc is NULL");
  const int32_t qsl[] = {0, 1};
  CHECK_FAILS(graphattn_can_run_in_cudagraph(qsl, 1, NULL), INVALID, "result is NULL");
  CHECK_FAILS(graphattn_split_decodes_and_prefills(qsl, 1, 1, NULL), INVALID, "split is NULL");
  CHECK_FAILS(graphattn_default_capture_sizes(8, NULL, 0, NULL), INVALID, "count is NULL");
  CHECK_FAILS(graphattn_default_capture_sizes(8, NULL, 4, &n), INVALID, "NULL with capacity 4");
  CHECK_FAILS(graphattn_padded_capture_size(NULL, 3, 1, &i), INVALID, "sorted_sizes is NULL");
  /* Destroying NULL is a no-op; the init functions ignore NULL. */
  graphattn_backend_destroy(NULL);
  graphattn_cache_destroy(NULL);
  graphattn_layer_config_init(NULL);
  graphattn_cache_options_init(NULL);
  graphattn_metadata_init(NULL);
}

/* ---- Layer configuration ---------------------------------------------------------------- */

static graphattn_layer_config_t llama_config(void) {
  graphattn_layer_config_t c;
  graphattn_layer_config_init(&c);
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_size = 128;
  c.max_model_len = 4096;
  c.max_num_seqs = 256;
  c.arch = 90;
  return c;
}

/* The attention type: appended with struct_size, so a caller built before it keeps working. */
static void test_attn_type(void) {
  graphattn_layer_config_t c = llama_config();
  CHECK(c.attn_type == GRAPHATTN_ATTN_DECODER);
  c.attn_type = GRAPHATTN_ATTN_ENCODER_DECODER;
  CHECK_OK(graphattn_layer_config_check(&c));
  c.window = 64; /* non-causal types take no window */
  CHECK_FAILS(graphattn_layer_config_check(&c), GRAPHATTN_ERROR, "encoder_decoder");
  c.struct_size = offsetof(graphattn_layer_config_t, attn_type); /* an older caller: decoder */
  CHECK_OK(graphattn_layer_config_check(&c));
  /* Below the first version's size (up to check_bounds): refused. */
  c.struct_size = offsetof(graphattn_layer_config_t, check_bounds) + sizeof(int) - 1;
  CHECK_FAILS(graphattn_layer_config_check(&c), INVALID, "struct_size");
  /* No GPU needed for the argument checks of the dense functions (NULL tensors are refused). */
  CHECK_FAILS(
      graphattn_encoder_attention(NULL, NULL, NULL, NULL, NULL, 1, 0.1f, NULL, NULL, NULL, NULL),
      INVALID, "query");
  CHECK_FAILS(graphattn_multi_head_attention(NULL, NULL, NULL, NULL, 0.1f, NULL, NULL), INVALID,
              "q");
}

/* Multi-token decode: decode_query_len, appended after v_scale_device. */
static void test_decode_query_len(void) {
  graphattn_layer_config_t c = llama_config();
  CHECK(c.decode_query_len == 1);
  /* Out of range: the C++ check names the value and the allowed range. */
  c.decode_query_len = 0;
  CHECK_FAILS(graphattn_layer_config_check(&c), GRAPHATTN_ERROR,
              "decode_query_len 0 is not supported; supported: 1..16");
  c.decode_query_len = 17;
  CHECK_FAILS(graphattn_layer_config_check(&c), GRAPHATTN_ERROR,
              "decode_query_len 17 is not supported; supported: 1..16");
  graphattn_backend_t b = (graphattn_backend_t)1;
  CHECK_FAILS(graphattn_backend_create(&c, &b), GRAPHATTN_ERROR, "decode_query_len 17");
  CHECK(b == NULL);
  /* A caller whose struct ends before the field is not read there: it gets 1. */
  c.struct_size = offsetof(graphattn_layer_config_t, decode_query_len);
  CHECK_OK(graphattn_layer_config_check(&c));
  CHECK_OK(graphattn_backend_create(&c, &b));
  graphattn_layer_config_t got;
  graphattn_layer_config_init(&got);
  CHECK_OK(graphattn_backend_config(b, &got));
  CHECK(got.decode_query_len == 1);
  graphattn_backend_destroy(b);

  /* 4 (3 draft tokens): the decode kernel is the multi-token one, the others unchanged. */
  c = llama_config();
  c.decode_query_len = 4;
  CHECK_OK(graphattn_layer_config_check(&c));
  c.decode_query_len = 16; /* the largest */
  CHECK_OK(graphattn_layer_config_check(&c));
  c.decode_query_len = 4;
  CHECK_OK(graphattn_backend_create(&c, &b));
  graphattn_layer_config_init(&got);
  CHECK_OK(graphattn_backend_config(b, &got));
  CHECK(got.decode_query_len == 4);
  char buf[128];
  CHECK_OK(graphattn_backend_spec(b, 0, buf, sizeof buf, NULL, NULL));
  CHECK(strcmp(buf, "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90") == 0);
  CHECK_OK(graphattn_backend_spec(b, 1, buf, sizeof buf, NULL, NULL));
  CHECK(strcmp(buf, "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_mt") == 0);
  CHECK_OK(graphattn_backend_spec(b, 2, buf, sizeof buf, NULL, NULL));
  CHECK(strcmp(buf, "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90") == 0);
  /* A caller whose struct ends before the field: nothing is written at or past it. */
  const size_t before = offsetof(graphattn_layer_config_t, decode_query_len);
  memset(&got, 0x5a, sizeof got);
  got.struct_size = before;
  CHECK_OK(graphattn_backend_config(b, &got));
  CHECK(got.num_heads == 32 && got.v_scale_device == NULL);
  {
    const unsigned char* tail = (const unsigned char*)&got + before;
    int untouched = 1;
    for (size_t i = 0; i < sizeof got - before; ++i) untouched = untouched && tail[i] == 0x5a;
    CHECK(untouched);
  }
  graphattn_backend_destroy(b);
}

static void test_layer_config(void) {
  graphattn_layer_config_t c;
  graphattn_layer_config_init(&c);
  CHECK(c.struct_size == sizeof c);
  CHECK(c.block_size == 16 && c.dtype == GRAPHATTN_DTYPE_BFLOAT16);
  CHECK(c.kv_dtype == GRAPHATTN_KV_DTYPE_AUTO && c.layout == GRAPHATTN_KV_LAYOUT_NHD);
  CHECK(c.k_scale == 1.0f && c.v_scale == 1.0f && c.scale == 0.0f && c.arch == 0);
  CHECK(c.num_heads == 0 && c.max_model_len == 0 && c.overlap_previous_kernel == 0);
  /* Counts are the caller's to set. */
  CHECK_FAILS(graphattn_layer_config_check(&c), GRAPHATTN_ERROR, "num_heads 0");

  c = llama_config();
  CHECK_OK(graphattn_layer_config_check(&c));
  c.arch = 0; /* the current device: taken as supported here */
  CHECK_OK(graphattn_layer_config_check(&c));

  /* One bad int field at a time: the check names the value. Enum values out of range and bad
   * struct sizes are caught at the ABI (INVALID_ARGUMENT), the rest by the C++ checks. */
  static const struct {
    size_t offset;
    int value;
    graphattn_status_t status;
    const char* needle;
  } bad[] = {
      {offsetof(graphattn_layer_config_t, head_size), 100, GRAPHATTN_ERROR, "head size 100"},
      {offsetof(graphattn_layer_config_t, num_heads), 30, GRAPHATTN_ERROR,
       "num_heads 30 and num_kv_heads 8"},
      {offsetof(graphattn_layer_config_t, block_size), 24, GRAPHATTN_ERROR, "block size 24"},
      {offsetof(graphattn_layer_config_t, window), -1, GRAPHATTN_ERROR, "window -1"},
      {offsetof(graphattn_layer_config_t, max_num_seqs), 0, GRAPHATTN_ERROR, "max_num_seqs 0"},
      {offsetof(graphattn_layer_config_t, max_model_len), -5, GRAPHATTN_ERROR, "max_model_len -5"},
      {offsetof(graphattn_layer_config_t, arch), 75, GRAPHATTN_ERROR, "sm_75"},
      {offsetof(graphattn_layer_config_t, kv_dtype), 7, INVALID, "config->kv_dtype 7"},
      {offsetof(graphattn_layer_config_t, dtype), 5, INVALID, "config->dtype 5"},
      {offsetof(graphattn_layer_config_t, layout), -1, INVALID, "config->layout -1"},
      {offsetof(graphattn_layer_config_t, attn_type), 4, INVALID, "config->attn_type 4"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    c = llama_config();
    const int value = bad[i].value; /* the enums are int-sized, as the ABI passes them */
    memcpy((char*)&c + bad[i].offset, &value, sizeof value);
    CHECK_FAILS(graphattn_layer_config_check(&c), bad[i].status, bad[i].needle);
  }
  c = llama_config();
  c.soft_cap = -1.0f;
  CHECK_FAILS(graphattn_layer_config_check(&c), GRAPHATTN_ERROR, "soft_cap -1");
  c = llama_config();
  c.kv_dtype = GRAPHATTN_KV_DTYPE_FP8_E4M3;
  c.k_scale = 0.0f;
  CHECK_FAILS(graphattn_layer_config_check(&c), GRAPHATTN_ERROR, "k_scale 0");
  c = llama_config();
  c.struct_size = 0;
  CHECK_FAILS(graphattn_layer_config_check(&c), INVALID, "config->struct_size 0");
  /* The first version's size is accepted (later fields take their defaults). */
  c = llama_config();
  c.struct_size = offsetof(graphattn_layer_config_t, check_bounds) + sizeof(int);
  CHECK_OK(graphattn_layer_config_check(&c));

  /* backend_create validates the same way and leaves no handle. */
  graphattn_backend_t b = (graphattn_backend_t)1;
  c = llama_config();
  c.head_size = 100;
  CHECK_FAILS(graphattn_backend_create(&c, &b), GRAPHATTN_ERROR, "head size 100");
  CHECK(b == NULL);
  c = llama_config();
  c.arch = 0; /* needs the device */
  if (!gpu) {
    CHECK_FAILS(graphattn_backend_create(&c, &b), GRAPHATTN_ERROR, "no GPU");
    CHECK(b == NULL);
  } else {
    CHECK_OK(graphattn_backend_create(&c, &b));
    graphattn_layer_config_t got;
    graphattn_layer_config_init(&got);
    CHECK_OK(graphattn_backend_config(b, &got));
    CHECK(got.arch >= 70);
    graphattn_backend_destroy(b);
  }
}

/* ---- Backend without a GPU: specs, buffers, errors before prepare ------------------------ */

static const char* const kSpecs[3] = {
    "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
    "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
    "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
};

/* The mixed-batch mode: GRAPHATTN_MIXED_BRANCHES' names, set and read per backend. */
static void test_mixed_branches(void) {
  static const char* const modes[] = {
      "off",           "serial-prefill-first", "decode-first",
      "prefill-first", "decode-first-high",    "prefill-first-high"};
  const char* env = getenv("GRAPHATTN_MIXED_BRANCHES");
  char saved[64] = "";
  if (env) snprintf(saved, sizeof saved, "%s", env);
  unsetenv("GRAPHATTN_MIXED_BRANCHES");
  graphattn_layer_config_t c = llama_config();
  graphattn_backend_t b = NULL;
  CHECK_OK(graphattn_backend_create(&c, &b));
  char buf[64];
  size_t needed = 0;
  CHECK_OK(graphattn_backend_mixed_branches(b, buf, sizeof buf, &needed));
  CHECK(strcmp(buf, "prefill-first") == 0 && needed == strlen("prefill-first") + 1);
  const int n_modes = (int)(sizeof modes / sizeof modes[0]);
  for (int i = 0; i < n_modes; ++i) { /* the enumerator lists the same names in the same order */
    CHECK(graphattn_mixed_branches_name(i) &&
          strcmp(graphattn_mixed_branches_name(i), modes[i]) == 0);
  }
  CHECK(graphattn_mixed_branches_name(n_modes) == NULL &&
        graphattn_mixed_branches_name(-1) == NULL);
  for (int i = 0; i < n_modes; ++i) {
    CHECK_OK(graphattn_backend_set_mixed_branches(b, modes[i]));
    CHECK_OK(graphattn_backend_mixed_branches(b, buf, sizeof buf, NULL));
    CHECK(strcmp(buf, modes[i]) == 0);
  }
  CHECK_FAILS(graphattn_backend_set_mixed_branches(b, "prefill_first"), INVALID,
              "mixed branches mode \"prefill_first\" is not a mode; allowed: off, "
              "serial-prefill-first, decode-first, prefill-first, decode-first-high, "
              "prefill-first-high");
  CHECK_FAILS(graphattn_backend_set_mixed_branches(b, ""), INVALID, "mode \"\" is not a mode");
  CHECK_FAILS(graphattn_backend_set_mixed_branches(b, NULL), INVALID, "mode is NULL");
  CHECK_FAILS(graphattn_backend_set_mixed_branches(NULL, "off"), INVALID, "backend is NULL");
  CHECK_OK(graphattn_backend_mixed_branches(b, buf, sizeof buf, NULL));
  CHECK(strcmp(buf, "prefill-first-high") == 0); /* a refused mode keeps the last */
  CHECK_FAILS(graphattn_backend_mixed_branches(b, buf, 4, &needed),
              GRAPHATTN_ERROR_BUFFER_TOO_SMALL, "");
  CHECK(needed == strlen("prefill-first-high") + 1);
  graphattn_backend_destroy(b);
  /* The variable sets the mode a backend starts with. */
  setenv("GRAPHATTN_MIXED_BRANCHES", "decode-first", 1);
  CHECK_OK(graphattn_backend_create(&c, &b));
  CHECK_OK(graphattn_backend_mixed_branches(b, buf, sizeof buf, NULL));
  CHECK(strcmp(buf, "decode-first") == 0);
  graphattn_backend_destroy(b);
  if (env)
    setenv("GRAPHATTN_MIXED_BRANCHES", saved, 1);
  else
    unsetenv("GRAPHATTN_MIXED_BRANCHES");
}

static void test_backend_specs(void) {
  graphattn_layer_config_t c = llama_config();
  graphattn_backend_t b = NULL;
  CHECK_OK(graphattn_backend_create(&c, &b));
  CHECK(b != NULL);

  graphattn_layer_config_t got;
  graphattn_layer_config_init(&got);
  CHECK_OK(graphattn_backend_config(b, &got));
  CHECK(got.num_heads == 32 && got.num_kv_heads == 8 && got.head_size == 128);
  CHECK(got.arch == 90 && got.max_num_seqs == 256 && got.max_model_len == 4096);
  CHECK(fabsf(got.scale - 1.0f / sqrtf(128.0f)) < 1e-7f); /* resolved */
  got.struct_size = 8;
  CHECK_FAILS(graphattn_backend_config(b, &got), INVALID, "config->struct_size 8");
  /* A caller of the first version (struct ending at check_bounds) gets the fields it has and
   * nothing is written past them. */
  const size_t v1 = offsetof(graphattn_layer_config_t, check_bounds) + sizeof(int);
  memset(&got, 0x5a, sizeof got);
  got.struct_size = v1;
  CHECK_OK(graphattn_backend_config(b, &got));
  CHECK(got.num_heads == 32 && got.check_bounds == 0);
  {
    const unsigned char* tail = (const unsigned char*)&got + v1;
    int untouched = 1;
    for (size_t i = 0; i < sizeof got - v1; ++i) untouched = untouched && tail[i] == 0x5a;
    CHECK(untouched);
  }

  char buf[128];
  size_t needed = 0;
  int count = 0;
  for (int i = 0; i < 3; ++i) {
    CHECK_OK(graphattn_backend_spec(b, i, buf, sizeof buf, &needed, &count));
    CHECK(count == 5);
    CHECK(strcmp(buf, kSpecs[i]) == 0);
    CHECK(needed == strlen(kSpecs[i]) + 1);
  }
  /* The fourth: the mixed graphs' decode, splits chosen on the device (divisor 0, the default);
     the fifth: the same planning two blocks an SM for long decodes (_dsp_long, the default). */
  CHECK_OK(graphattn_backend_spec(b, 3, buf, sizeof buf, NULL, NULL));
  CHECK(strncmp(buf, kSpecs[1], strlen(kSpecs[1])) == 0 &&
        strcmp(buf + strlen(kSpecs[1]), "_dsp") == 0);
  CHECK_OK(graphattn_backend_spec(b, 4, buf, sizeof buf, NULL, NULL));
  CHECK(strncmp(buf, kSpecs[1], strlen(kSpecs[1])) == 0 &&
        strcmp(buf + strlen(kSpecs[1]), "_dsp_long") == 0);
  /* Too small: *needed says how much; NULL with capacity 0 asks. */
  needed = 0;
  CHECK_FAILS(graphattn_backend_spec(b, 1, buf, 10, &needed, NULL),
              GRAPHATTN_ERROR_BUFFER_TOO_SMALL, "needs");
  CHECK(needed == strlen(kSpecs[1]) + 1);
  CHECK(buf[0] == '\0');
  needed = 0;
  CHECK(graphattn_backend_spec(b, 2, NULL, 0, &needed, NULL) == GRAPHATTN_ERROR_BUFFER_TOO_SMALL);
  CHECK(needed == strlen(kSpecs[2]) + 1);
  CHECK_OK(graphattn_backend_spec(b, 2, buf, needed, NULL, NULL)); /* exactly enough */
  CHECK(strcmp(buf, kSpecs[2]) == 0);
  count = 0;
  CHECK_FAILS(graphattn_backend_spec(b, 5, buf, sizeof buf, NULL, &count), INVALID, "index 5");
  CHECK(count == 5);
  CHECK_FAILS(graphattn_backend_spec(b, -1, buf, sizeof buf, NULL, NULL), INVALID, "index -1");

  size_t bytes = 0;
  CHECK_FAILS(graphattn_backend_workspace_bytes(b, &bytes), GRAPHATTN_ERROR,
              "call prepare() first");
  CHECK_FAILS(graphattn_backend_workspace_bytes(b, NULL), INVALID, "bytes is NULL");
  if (!gpu) {
    /* prepare needs the current device's arch */
    CHECK(graphattn_backend_prepare(b, NULL) == GRAPHATTN_ERROR);
    CHECK(graphattn_last_error()[0] != '\0');
  }
  graphattn_bounds_violation_t v;
  CHECK_FAILS(graphattn_backend_take_bounds_violation(b, &v), GRAPHATTN_ERROR,
              "not in checked mode");
  CHECK_FAILS(graphattn_backend_take_bounds_violation(b, NULL), INVALID, "violation is NULL");
  graphattn_backend_destroy(b);

  /* Checked mode: every kernel is the checked twin (spec suffix _chk). */
  CHECK(c.check_bounds == 0);
  c.check_bounds = 1;
  CHECK_OK(graphattn_backend_create(&c, &b));
  graphattn_layer_config_init(&got);
  CHECK_OK(graphattn_backend_config(b, &got));
  CHECK(got.check_bounds == 1);
  for (int i = 0; i < 3; ++i) {
    CHECK_OK(graphattn_backend_spec(b, i, buf, sizeof buf, NULL, NULL));
    CHECK(strncmp(buf, kSpecs[i], strlen(kSpecs[i])) == 0 &&
          strcmp(buf + strlen(kSpecs[i]), "_chk") == 0);
  }
  CHECK_FAILS(graphattn_backend_take_bounds_violation(b, &v), GRAPHATTN_ERROR,
              "call prepare() first");
  graphattn_backend_destroy(b);

  /* ALiBi slopes and sinks (device arrays, not read before a forward): the attention kernels
   * gain the suffixes _alibi and _sink, the cache write stays the shared one. */
  static float slopes_stand_in[32], sinks_stand_in[32];
  c.check_bounds = 0;
  c.alibi_slopes = slopes_stand_in;
  c.sinks = sinks_stand_in;
  CHECK_OK(graphattn_backend_create(&c, &b));
  graphattn_layer_config_init(&got);
  CHECK_OK(graphattn_backend_config(b, &got));
  CHECK(got.alibi_slopes == slopes_stand_in && got.sinks == sinks_stand_in);
  for (int i = 0; i < 3; ++i) {
    CHECK_OK(graphattn_backend_spec(b, i, buf, sizeof buf, NULL, NULL));
    CHECK(strncmp(buf, kSpecs[i], strlen(kSpecs[i])) == 0 &&
          strcmp(buf + strlen(kSpecs[i]), i == 0 ? "" : "_alibi_sink") == 0);
  }
  graphattn_backend_destroy(b);
}

/* ---- DLTensor checks ---------------------------------------------------------------------- */

static DLTensor tensor(void* data, int device_type, uint8_t code, uint8_t bits, int ndim,
                       int64_t* shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = device_type;
  t.device.device_id = 0;
  t.ndim = ndim;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  t.strides = NULL;
  t.byte_offset = 0;
  return t;
}

/* Device pointers that are never dereferenced: every call below fails before a launch. */
#define FAKE_DEVICE_PTR ((void*)(uintptr_t)0x7f0000000000ull)

static void test_tensor_checks(void) {
  graphattn_layer_config_t c = llama_config();
  graphattn_backend_t b = NULL;
  CHECK_OK(graphattn_backend_create(&c, &b));

  static uint16_t host[4 * 32 * 128];
  int64_t qshape[3] = {4, 32, 128}, kshape[3] = {4, 8, 128}, cshape[5] = {2, 10, 16, 8, 128};
  int64_t qsl_shape[1] = {5}, seq_shape[1] = {4}, bt_shape[2] = {4, 8}, slot_shape[1] = {4};
  DLTensor q = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 3, qshape);
  DLTensor k = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 3, kshape);
  DLTensor v = k;
  DLTensor cache = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 5, cshape);
  DLTensor out = q;
  DLTensor qsl = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLInt, 32, 1, qsl_shape);
  DLTensor seq = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLInt, 32, 1, seq_shape);
  DLTensor bt = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLInt, 32, 2, bt_shape);
  DLTensor slots = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLInt, 64, 1, slot_shape);
  graphattn_metadata_t md;
  graphattn_metadata_init(&md);
  CHECK(md.struct_size == sizeof md && md.query_start_loc == NULL && md.num_reqs == 0);
  md.query_start_loc = &qsl;
  md.seq_lens = &seq;
  md.block_table = &bt;
  md.slot_mapping = &slots;
  md.num_reqs = 4;
  md.num_decodes = 4;
  md.num_decode_tokens = 4;
  md.num_actual_tokens = 4;
  md.max_query_len = 1;
  md.max_seq_len = 100;

  /* Well-formed CUDA tensors reach the C++ forward, which wants prepare() first. */
  CHECK_FAILS(graphattn_backend_forward(b, &q, &k, &v, &cache, &out, &md, NULL, 0, NULL),
              GRAPHATTN_ERROR, "call prepare() before the first forward");
  CHECK_FAILS(graphattn_backend_forward(b, &q, NULL, NULL, &cache, &out, &md, NULL, 0, NULL),
              GRAPHATTN_ERROR, "call prepare()");

  /* A host tensor: the device error names the tensor and the device. */
  DLTensor bad = tensor(host, kDLCPU, kDLBfloat, 16, 3, qshape);
  CHECK_FAILS(graphattn_backend_forward(b, &bad, &k, &v, &cache, &out, &md, NULL, 0, NULL), INVALID,
              "query is on device type 1 (CPU); graphattn needs CUDA device memory");
  /* A host tensor of a bad dtype: the dtype error comes first (NumPy callers see it). */
  bad = tensor(host, kDLCPU, kDLFloat, 64, 3, qshape);
  CHECK_FAILS(graphattn_backend_forward(b, &bad, &k, &v, &cache, &out, &md, NULL, 0, NULL), INVALID,
              "query has dtype float64");
  CHECK(strstr(graphattn_last_error(), "supported: float16, bfloat16, float32, int32, int64"));
  CHECK(!strstr(graphattn_last_error(), "device"));
  bad = tensor(host, kDLCPU, kDLBfloat, 16, 3, qshape);
  bad.dtype.lanes = 2;
  CHECK_FAILS(graphattn_backend_forward(b, &bad, &k, &v, &cache, &out, &md, NULL, 0, NULL), INVALID,
              "query has dtype bfloat16 x2 lanes");
  /* ndim before dtype, sizes after it. */
  int64_t shape7[7] = {1, 1, 1, 1, 1, 1, 1};
  bad = tensor(host, kDLCPU, kDLFloat, 64, 7, shape7);
  CHECK_FAILS(graphattn_backend_forward(b, &bad, &k, &v, &cache, &out, &md, NULL, 0, NULL), INVALID,
              "query has ndim 7; supported: 0..6");
  int64_t negative[3] = {4, -1, 128};
  bad = tensor(host, kDLCPU, kDLBfloat, 16, 3, negative);
  CHECK_FAILS(graphattn_backend_forward(b, &q, &k, &v, &cache, &bad, &md, NULL, 0, NULL), INVALID,
              "output has size -1 in dimension 1");
  CHECK_FAILS(graphattn_backend_forward(b, NULL, &k, &v, &cache, &out, &md, NULL, 0, NULL), INVALID,
              "query is NULL");
  CHECK_FAILS(graphattn_backend_forward(b, &q, &k, &v, NULL, &out, &md, NULL, 0, NULL), INVALID,
              "kv_cache is NULL");
  {
    /* An encoder-only layer has no cache: NULL kv_cache, seq_lens, block_table and slot_mapping
     * pass the conversion and reach the C++ forward (prepare() is next). */
    graphattn_layer_config_t e = llama_config();
    e.attn_type = GRAPHATTN_ATTN_ENCODER_ONLY;
    graphattn_backend_t enc = NULL;
    CHECK_OK(graphattn_backend_create(&e, &enc));
    graphattn_metadata_t none = md;
    none.seq_lens = none.block_table = none.slot_mapping = NULL;
    CHECK_FAILS(graphattn_backend_forward(enc, &q, &k, &v, NULL, &out, &none, NULL, 0, NULL),
                GRAPHATTN_ERROR, "call prepare()");
    /* A decoder layer still needs them. */
    CHECK_FAILS(graphattn_backend_forward(b, &q, &k, &v, &cache, &out, &none, NULL, 0, NULL),
                INVALID, "seq_lens is NULL");
    graphattn_backend_destroy(enc);
  }
  {
    /* A layer of e4m3 queries (q_dtype fp8_e4m3) takes them as float8_e4m3fn (code 10) or uint8:
     * they reach the C++ forward (prepare() is next); another 8-bit type is refused by name. */
    graphattn_layer_config_t e = llama_config();
    e.kv_dtype = GRAPHATTN_KV_DTYPE_FP8_E4M3;
    e.q_dtype = GRAPHATTN_KV_DTYPE_FP8_E4M3;
    graphattn_backend_t q8b = NULL;
    CHECK_OK(graphattn_backend_create(&e, &q8b));
    enum { kFloat8E4M3FN = 10, kFloat8E5M2 = 12 }; /* DLPack 1.x codes (older headers lack them) */
    DLTensor q8 = tensor(FAKE_DEVICE_PTR, kDLCUDA, kFloat8E4M3FN, 8, 3, qshape);
    DLTensor c8 = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLUInt, 8, 5, cshape);
    CHECK_FAILS(graphattn_backend_forward(q8b, &q8, &k, &v, &c8, &out, &md, NULL, 0, NULL),
                GRAPHATTN_ERROR, "call prepare()");
    q8.dtype.code = kDLUInt;
    CHECK_FAILS(graphattn_backend_forward(q8b, &q8, &k, &v, &c8, &out, &md, NULL, 0, NULL),
                GRAPHATTN_ERROR, "call prepare()");
    q8.dtype.code = kFloat8E5M2;
    CHECK_FAILS(graphattn_backend_forward(q8b, &q8, &k, &v, &c8, &out, &md, NULL, 0, NULL), INVALID,
                "query has dtype float8_e5m2 but the layer's q_dtype is fp8_e4m3");
    /* A 16-bit layer still refuses an fp8 query. */
    q8.dtype.code = kFloat8E4M3FN;
    CHECK_FAILS(graphattn_backend_forward(b, &q8, &k, &v, &cache, &out, &md, NULL, 0, NULL),
                INVALID, "query has dtype float8_e4m3fn");
    graphattn_backend_destroy(q8b);
  }
  CHECK_FAILS(graphattn_backend_forward(b, &q, &k, NULL, &cache, &out, &md, NULL, 0, NULL), INVALID,
              "value is NULL but key is not");
  DLTensor scalar = k;
  scalar.ndim = 0;
  CHECK_FAILS(graphattn_backend_forward(b, &q, &scalar, &v, &cache, &out, &md, NULL, 0, NULL),
              INVALID, "key is 0-d");
  CHECK_FAILS(graphattn_backend_forward(b, &q, &k, &v, &cache, &out, NULL, NULL, 0, NULL), INVALID,
              "metadata is NULL");
  /* uint8 is an fp8 KV cache only, with an fp8 kv dtype in force. */
  bad = cache;
  bad.dtype.code = kDLUInt;
  bad.dtype.bits = 8;
  CHECK_FAILS(graphattn_backend_forward(b, &q, &k, &v, &bad, &out, &md, NULL, 0, NULL), INVALID,
              "kv_cache has dtype uint8 but the KV cache dtype is auto");
  bad = q;
  bad.dtype.code = kDLUInt;
  bad.dtype.bits = 8;
  CHECK_FAILS(graphattn_backend_forward(b, &bad, &k, &v, &cache, &out, &md, NULL, 0, NULL), INVALID,
              "query has dtype uint8");
  /* Metadata tensors are checked too, by name, before the forward runs. */
  graphattn_metadata_t md2 = md;
  DLTensor host_qsl = tensor(host, kDLCPU, kDLInt, 32, 1, qsl_shape);
  md2.query_start_loc = &host_qsl;
  CHECK_FAILS(graphattn_backend_forward(b, &q, &k, &v, &cache, &out, &md2, NULL, 0, NULL), INVALID,
              "query_start_loc is on device type 1 (CPU)");
  md2 = md;
  md2.slot_mapping = NULL; /* needed with key and value ... */
  CHECK_FAILS(graphattn_backend_forward(b, &q, &k, &v, &cache, &out, &md2, NULL, 0, NULL), INVALID,
              "slot_mapping is NULL");
  /* ... but not without them */
  CHECK_FAILS(graphattn_backend_forward(b, &q, NULL, NULL, &cache, &out, &md2, NULL, 0, NULL),
              GRAPHATTN_ERROR, "call prepare()");
  md2 = md;
  md2.struct_size = 0;
  CHECK_FAILS(graphattn_backend_forward(b, &q, &k, &v, &cache, &out, &md2, NULL, 0, NULL), INVALID,
              "metadata->struct_size 0");
  /* The first version of the struct (up to max_seq_len, no device_split) is still taken. */
  CHECK(md.device_split == 0);
  md2 = md;
  md2.struct_size = offsetof(graphattn_metadata_t, device_split);
  CHECK_FAILS(graphattn_backend_forward(b, &q, &k, &v, &cache, &out, &md2, NULL, 0, NULL),
              GRAPHATTN_ERROR, "call prepare()");
  md2.struct_size = offsetof(graphattn_metadata_t, max_seq_len);
  CHECK_FAILS(graphattn_backend_forward(b, &q, &k, &v, &cache, &out, &md2, NULL, 0, NULL), INVALID,
              "is smaller than");
  /* Managed memory is CUDA memory. */
  DLTensor managed = q;
  managed.device.device_type = kDLCUDAManaged;
  CHECK_FAILS(graphattn_backend_forward(b, &managed, &k, &v, &cache, &out, &md, NULL, 0, NULL),
              GRAPHATTN_ERROR, "call prepare()");
  DLTensor pinned = q;
  pinned.device.device_type = kDLCUDAHost;
  CHECK_FAILS(graphattn_backend_forward(b, &pinned, &k, &v, &cache, &out, &md, NULL, 0, NULL),
              INVALID, "query is on device type 3 (CUDA host (pinned))");

  /* The cache write alone. */
  DLTensor host_key = tensor(host, kDLCPU, kDLBfloat, 16, 3, kshape);
  CHECK_FAILS(graphattn_write_kv_cache(&host_key, &v, &cache, &slots, GRAPHATTN_KV_DTYPE_AUTO, 1, 1,
                                       NULL, NULL),
              INVALID, "key is on device type 1 (CPU)");
  CHECK_FAILS(
      graphattn_write_kv_cache(&k, &v, &cache, &slots, (graphattn_kv_dtype_t)9, 1, 1, NULL, NULL),
      INVALID, "kv_dtype 9 is out of range");
  bad = tensor(host, kDLCPU, kDLInt, 64, 7, shape7);
  CHECK_FAILS(
      graphattn_write_kv_cache(&k, &v, &cache, &bad, GRAPHATTN_KV_DTYPE_AUTO, 1, 1, NULL, NULL),
      INVALID, "slot_mapping has ndim 7");
  bad = tensor(host, kDLCPU, kDLBfloat, 16, 3, negative);
  CHECK_FAILS(
      graphattn_write_kv_cache(&k, &bad, &cache, &slots, GRAPHATTN_KV_DTYPE_AUTO, 1, 1, NULL, NULL),
      INVALID, "value has size -1 in dimension 1");
  /* The legacy PagedAttention caches: a flash cache is not one; uint8 caches read as the kv
   * dtype given. The C++ checks name the cache before any device use. */
  {
    int64_t key_shape[5] = {10, 8, 16, 16, 8}, value_shape[4] = {10, 8, 128, 16};
    DLTensor key_cache = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 5, key_shape);
    DLTensor value_cache = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 4, value_shape);
    CHECK_FAILS(graphattn_write_to_paged_cache(&k, &v, &cache, &value_cache, &slots,
                                               GRAPHATTN_KV_DTYPE_AUTO, 1, 1, NULL, NULL),
                GRAPHATTN_ERROR, "key_cache");
    CHECK_FAILS(graphattn_write_to_paged_cache(&k, &v, &key_cache, &value_cache, &slots,
                                               (graphattn_kv_dtype_t)5, 1, 1, NULL, NULL),
                INVALID, "kv_dtype 5 is out of range");
    key_cache.dtype.code = kDLUInt;
    key_cache.dtype.bits = 8;
    CHECK_FAILS(graphattn_write_to_paged_cache(&k, &v, &key_cache, &value_cache, &slots,
                                               GRAPHATTN_KV_DTYPE_FP8_E4M3, 1, 1, NULL, NULL),
                GRAPHATTN_ERROR, "value_cache dtype bf16 differs from key_cache dtype fp8_e4m3");
    /* vLLM 0.33's interleaved_v: blocks of whole kx = 16 fp8 elements, refused before any
     * device use. */
    int64_t key8_shape[5] = {10, 8, 8, 8, 16}, value8_shape[4] = {10, 8, 128, 8};
    DLTensor key8 = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLUInt, 8, 5, key8_shape);
    DLTensor value8 = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLUInt, 8, 4, value8_shape);
    CHECK_FAILS(graphattn_reshape_and_cache(&k, &v, &key8, &value8, &slots,
                                            GRAPHATTN_KV_DTYPE_FP8_E4M3, 1, 1, 1, NULL, NULL),
                GRAPHATTN_ERROR,
                "block size 8 is not supported by the interleaved V cache of 1-byte elements");
  }
  /* forward_prefix over the legacy caches: the C++ checks name every bad argument before any
   * device use (key and value may be NULL: they are not read). */
  {
    int64_t key_shape[5] = {10, 8, 16, 16, 8}, value_shape[4] = {10, 8, 128, 16};
    int64_t key8_shape[5] = {10, 8, 16, 8, 8}, value8_shape[4] = {10, 8, 128, 8};
    int64_t k16_shape[3] = {4, 16, 128};
    DLTensor kc = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 5, key_shape);
    DLTensor vc = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 4, value_shape);
    DLTensor kc8 = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 5, key8_shape);
    DLTensor vc8 = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 4, value8_shape);
    DLTensor k16 = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 3, k16_shape);
    DLTensor qsl64 = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLInt, 64, 1, qsl_shape);
    CHECK_FAILS(
        graphattn_forward_prefix(NULL, &k, &v, GRAPHATTN_KV_DTYPE_AUTO, &kc, &vc, &bt, &qsl, &seq,
                                 4, NULL, 0, 1, 1, NULL, NULL, 0, 0, NULL, 1, &out, NULL, NULL),
        INVALID, "query is NULL");
    CHECK_FAILS(
        graphattn_forward_prefix(&q, &k, &v, (graphattn_kv_dtype_t)7, &kc, &vc, &bt, &qsl, &seq, 4,
                                 NULL, 0, 1, 1, NULL, NULL, 0, 0, NULL, 1, &out, NULL, NULL),
        INVALID, "kv_dtype 7 is out of range");
    CHECK_FAILS(graphattn_forward_prefix(&q, NULL, NULL, GRAPHATTN_KV_DTYPE_AUTO, &kc8, &vc8, &bt,
                                         &qsl, &seq, 4, NULL, 0, 1, 1, NULL, NULL, 0, 0, NULL, 1,
                                         &out, NULL, NULL),
                GRAPHATTN_ERROR, "(vLLM's default block size 8 included)");
    CHECK_FAILS(
        graphattn_forward_prefix(&q, &k16, NULL, GRAPHATTN_KV_DTYPE_AUTO, &kc, &vc, &bt, &qsl, &seq,
                                 4, NULL, 0, 1, 1, NULL, NULL, 0, 0, NULL, 1, &out, NULL, NULL),
        GRAPHATTN_ERROR, "key bf16[4, 16, 128]");
    CHECK_FAILS(
        graphattn_forward_prefix(&q, NULL, NULL, GRAPHATTN_KV_DTYPE_AUTO, &kc, &vc, &bt, &qsl, &seq,
                                 4, NULL, -1, 1, 1, NULL, NULL, 0, 0, NULL, 1, &out, NULL, NULL),
        GRAPHATTN_ERROR, "sliding_window -1 is not supported");
    CHECK_FAILS(
        graphattn_forward_prefix(&q, &k, &v, GRAPHATTN_KV_DTYPE_AUTO, &kc, &vc, &bt, &qsl64, &seq,
                                 4, NULL, 0, 1, 1, NULL, NULL, 0, 0, NULL, 1, &out, NULL, NULL),
        GRAPHATTN_ERROR, "query_start_loc must be int32");
    CHECK_FAILS(
        graphattn_forward_prefix(&q, &k, &v, GRAPHATTN_KV_DTYPE_FP8_E5M2, &kc, &vc, &bt, &qsl, &seq,
                                 4, NULL, 0, 1, 1, NULL, NULL, 0, 0, NULL, 1, &out, NULL, NULL),
        GRAPHATTN_ERROR, "does not hold kv_cache_dtype 'fp8_e5m2'");
    kc.dtype.code = vc.dtype.code = kDLUInt;
    kc.dtype.bits = vc.dtype.bits = 8;
    CHECK_FAILS(
        graphattn_forward_prefix(&q, &k, &v, GRAPHATTN_KV_DTYPE_AUTO, &kc, &vc, &bt, &qsl, &seq, 4,
                                 NULL, 0, 1, 1, NULL, NULL, 0, 0, NULL, 1, &out, NULL, NULL),
        INVALID, "the KV cache dtype is auto");
  }
  /* paged_attention_v1 / v2 over the legacy caches: kv_dtype decides how a uint8 cache reads; every
   * C++ check runs before any device use. */
  {
    int64_t key_shape[5] = {10, 2, 16, 16, 8}, value_shape[4] = {10, 2, 128, 16};
    int64_t q_shape[3] = {3, 8, 128}, bt_shape[2] = {3, 5}, seq_shape[1] = {3};
    int64_t sums_shape[3] = {3, 8, 2}, tmp_shape[4] = {3, 8, 2, 128};
    DLTensor key_cache = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 5, key_shape);
    DLTensor value_cache = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 4, value_shape);
    DLTensor q = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 3, q_shape);
    DLTensor bt = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLInt, 32, 2, bt_shape);
    DLTensor seq = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLInt, 32, 1, seq_shape);
    DLTensor sums = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLFloat, 32, 3, sums_shape);
    DLTensor tmp = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 4, tmp_shape);
    CHECK_FAILS(graphattn_paged_attention_v1(&q, &q, &key_cache, &value_cache, 2, 0.1f, &bt, &seq,
                                             16, 1000, NULL, (graphattn_kv_dtype_t)3, 1, 1, NULL,
                                             NULL, 0, 0, 0, 0, 0, NULL, NULL),
                INVALID,
                "kv_dtype 3 is out of range; allowed: 0 (auto), 1 (fp8_e4m3), 2 (fp8_e5m2)");
    /* fp8 scales in device memory: one-element float32 device tensors, checked first. */
    CHECK_FAILS(graphattn_paged_attention_v1(&q, &q, &key_cache, &value_cache, 2, 0.1f, &bt, &seq,
                                             16, 1000, NULL, GRAPHATTN_KV_DTYPE_AUTO, 1, 1, &seq,
                                             NULL, 0, 0, 0, 0, 0, NULL, NULL),
                INVALID, "k_scale_device int32[3]");
    CHECK_FAILS(graphattn_forward_prefix(&q, NULL, NULL, GRAPHATTN_KV_DTYPE_AUTO, &key_cache,
                                         &value_cache, &bt, &seq, &seq, 4, NULL, 0, 1, 1, NULL, &bt,
                                         0, 0, NULL, 1, &q, NULL, NULL),
                INVALID, "v_scale_device int32[3, 5]");
    CHECK_FAILS(graphattn_paged_attention_v1(&q, &q, &key_cache, &value_cache, 2, 0.1f, &bt, &seq,
                                             16, 1000, NULL, GRAPHATTN_KV_DTYPE_AUTO, 1, 1, NULL,
                                             NULL, 0, 0, 8, 64, 0, NULL, NULL),
                GRAPHATTN_ERROR, "local_blocks 0 is not supported");
    CHECK_FAILS(
        graphattn_paged_attention_v2(&q, &sums, &sums, &tmp, &q, &key_cache, &value_cache, 4, 0.1f,
                                     &bt, &seq, 16, 1000, NULL, GRAPHATTN_KV_DTYPE_AUTO, 1, 1, NULL,
                                     NULL, 0, 0, 0, 0, 0, NULL, NULL),
        GRAPHATTN_ERROR, "num_kv_heads 4 differs from the caches' 2");
    sums_shape[2] = 1;
    CHECK_FAILS(
        graphattn_paged_attention_v2(&q, &sums, &sums, &tmp, &q, &key_cache, &value_cache, 2, 0.1f,
                                     &bt, &seq, 16, 1000, NULL, GRAPHATTN_KV_DTYPE_AUTO, 1, 1, NULL,
                                     NULL, 0, 0, 0, 0, 0, NULL, NULL),
        GRAPHATTN_ERROR, "exp_sums fp32[3, 8, 1]");
    /* uint8 caches: read as fp8 when kv_dtype says so; auto cannot read them. */
    key_shape[2] = 8;
    key_shape[4] = 16;
    key_cache.dtype.code = value_cache.dtype.code = kDLUInt;
    key_cache.dtype.bits = value_cache.dtype.bits = 8;
    CHECK_FAILS(graphattn_paged_attention_v1(&q, &q, &key_cache, &value_cache, 2, 0.1f, &bt, &seq,
                                             16, 1000, NULL, GRAPHATTN_KV_DTYPE_AUTO, 1, 1, NULL,
                                             NULL, 0, 0, 0, 0, 0, NULL, NULL),
                INVALID, "key_cache has dtype uint8 but the KV cache dtype is auto");
    CHECK_FAILS(graphattn_paged_attention_v1(&q, &q, &key_cache, &value_cache, 2, 0.1f, &bt, &seq,
                                             16, 1000, NULL, GRAPHATTN_KV_DTYPE_FP8_E5M2, -1, 1,
                                             NULL, NULL, 0, 0, 0, 0, 0, NULL, NULL),
                GRAPHATTN_ERROR, "fp8 KV cache needs positive k_scale and v_scale, got -1");
    int use_v1 = -1;
    CHECK_OK(graphattn_use_paged_attention_v1(4096, 64, 32, &use_v1));
    CHECK(use_v1 == 1);
    CHECK_OK(graphattn_use_paged_attention_v1(4096, 8, 32, &use_v1));
    CHECK(use_v1 == 0);
    CHECK_FAILS(graphattn_use_paged_attention_v1(4096, 8, 32, NULL), INVALID, "use_v1 is NULL");
    CHECK_FAILS(graphattn_use_paged_attention_v1(-1, 8, 32, &use_v1), GRAPHATTN_ERROR,
                "max_seq_len -1 must be >= 0");
  }
  /* An fp8 cache as DLPack 1.1's float8_e5m2 (code 12) must match the kv dtype given. */
  DLTensor fp8 = cache;
  fp8.dtype.code = 12;
  fp8.dtype.bits = 8;
  CHECK_FAILS(
      graphattn_write_kv_cache(&k, &v, &fp8, &slots, GRAPHATTN_KV_DTYPE_FP8_E4M3, 1, 1, NULL, NULL),
      INVALID, "kv_cache has dtype float8_e5m2 but the KV cache dtype is e4m3");
  CHECK_FAILS(
      graphattn_write_kv_cache(&k, &v, &fp8, &slots, GRAPHATTN_KV_DTYPE_AUTO, 1, 1, NULL, NULL),
      INVALID, "the KV cache dtype is auto");
  /* Well-formed views reach the C++ checks: a shape mismatch is a GRAPHATTN_ERROR from them. */
  int64_t kshape64[3] = {4, 8, 64};
  DLTensor k64 = tensor(FAKE_DEVICE_PTR, kDLCUDA, kDLBfloat, 16, 3, kshape64);
  CHECK_FAILS(graphattn_write_kv_cache(&k64, &k64, &cache, &slots, GRAPHATTN_KV_DTYPE_AUTO, 1, 1,
                                       NULL, NULL),
              GRAPHATTN_ERROR, "but the KV cache holds 8 heads of size 128");
  /* byte_offset moves the data pointer: a misaligned key is refused by the C++ checks. */
  DLTensor shifted = k;
  shifted.byte_offset = 2;
  CHECK_FAILS(graphattn_write_kv_cache(&shifted, &v, &cache, &slots, GRAPHATTN_KV_DTYPE_AUTO, 1, 1,
                                       NULL, NULL),
              GRAPHATTN_ERROR, "16-byte aligned");
  /* Explicit strides are taken as given: a non-contiguous head dimension is refused. */
  int64_t strides[3] = {2048, 256, 2};
  DLTensor strided = k;
  strided.strides = strides;
  CHECK_FAILS(graphattn_write_kv_cache(&strided, &v, &cache, &slots, GRAPHATTN_KV_DTYPE_AUTO, 1, 1,
                                       NULL, NULL),
              GRAPHATTN_ERROR, "strides [2048, 256, 2]");
  graphattn_backend_destroy(b);
}

/* ---- Kernel cache ------------------------------------------------------------------------- */

static void remove_dir(const char* dir) {
  DIR* d = opendir(dir);
  CHECK(d != NULL);
  struct dirent* e;
  char path[4096];
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    CHECK(unlink(path) == 0);
  }
  closedir(d);
  CHECK(rmdir(dir) == 0);
}

static graphattn_cache_stats_t stats_of(graphattn_cache_t cache) {
  graphattn_cache_stats_t s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  CHECK_OK(graphattn_cache_stats(cache, &s));
  return s;
}

static void test_cache(void) {
  char dir[] = "/tmp/graphattn-c-abi-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  graphattn_cache_options_t o;
  graphattn_cache_options_init(&o);
  CHECK(o.struct_size == sizeof o && o.dir == NULL && o.use_disk == 1 && o.max_bytes == 0);
  CHECK(o.lock_timeout_ms == 60000 && o.dump_source == 0 && o.shared_dir == 0);
  o.dir = dir;
  graphattn_cache_t cache = NULL;
  CHECK_OK(graphattn_cache_create(&o, &cache));
  CHECK(cache != NULL);

  char buf[4096];
  size_t needed = 0;
  CHECK_OK(graphattn_cache_dir(cache, buf, sizeof buf, &needed));
  CHECK(strcmp(buf, dir) == 0 && needed == strlen(dir) + 1);
  CHECK_FAILS(graphattn_cache_dir(cache, buf, 4, &needed), GRAPHATTN_ERROR_BUFFER_TOO_SMALL,
              "the cache directory needs");
  CHECK(needed == strlen(dir) + 1);

  graphattn_cache_stats_t s = stats_of(cache);
  CHECK(s.memory_hits == 0 && s.misses == 0 && s.compiles == 0 && s.compile_ms == 0);

  /* Compiles with NVRTC (no GPU needed), then finds it in memory. */
  const char* spec = kSpecs[0];
  graphattn_precompile_result_t r[3];
  memset(r, 0xab, sizeof r);
  CHECK_OK(graphattn_cache_precompile(cache, &spec, 1, 1, r));
  CHECK(r[0].ok == 1 && r[0].origin == GRAPHATTN_ORIGIN_COMPILED && r[0].ms > 0);
  printf("c_abi: compiled %s in %.1f ms\n", spec, r[0].ms);
  CHECK(r[0].error[0] == '\0');
  CHECK_OK(graphattn_cache_precompile(cache, &spec, 1, 0, r));
  CHECK(r[0].ok == 1 && r[0].origin == GRAPHATTN_ORIGIN_MEMORY);
  CHECK_OK(graphattn_cache_precompile(cache, &spec, 1, 0, NULL)); /* results may be NULL */
  s = stats_of(cache);
  CHECK(s.misses == 1 && s.compiles == 1 && s.memory_hits == 2 && s.disk_hits == 0);
  CHECK(s.compile_failures == 0 && s.repairs == 0 && s.compile_ms > 0 && s.write_failures == 0);
  CHECK_OK(graphattn_cache_precompile(cache, NULL, 0, 0, NULL)); /* nothing to do */

  /* Strings the parser rejects fail alone, with its message; the rest still run. */
  const char* mixed[3] = {"cache_write_h100_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90", spec,
                          "nonsense"};
  CHECK_FAILS(
      graphattn_cache_precompile(cache, mixed, 3, 2, r), GRAPHATTN_ERROR,
      "2 of 3 specs failed; the first, cache_write_h100_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90:");
  CHECK(strstr(graphattn_last_error(), "head size 100"));
  CHECK(r[0].ok == 0 && strstr(r[0].error, "head size 100"));
  CHECK(r[1].ok == 1 && r[1].origin == GRAPHATTN_ORIGIN_MEMORY && r[1].error[0] == '\0');
  CHECK(r[2].ok == 0 && strstr(r[2].error, "malformed spec string 'nonsense'"));
  const char* with_null[2] = {spec, NULL};
  CHECK_FAILS(graphattn_cache_precompile(cache, with_null, 2, 0, r), INVALID, "specs[1] is NULL");
  CHECK_FAILS(graphattn_cache_precompile(cache, NULL, 2, 0, r), INVALID, "specs is NULL");

  /* A struct_size that ends after memory_hits gets only memory_hits. */
  graphattn_cache_stats_t partial;
  memset(&partial, 0x5a, sizeof partial);
  partial.struct_size = offsetof(graphattn_cache_stats_t, disk_hits);
  CHECK_OK(graphattn_cache_stats(cache, &partial));
  CHECK(partial.memory_hits == 3);
  CHECK(partial.disk_hits == 0x5a5a5a5a5a5a5a5aull);
  partial.struct_size = sizeof(size_t);
  CHECK_FAILS(graphattn_cache_stats(cache, &partial), INVALID, "stats->struct_size");
  CHECK_FAILS(graphattn_cache_stats(cache, NULL), INVALID, "stats is NULL");

  /* The listing: the compiled entry, and a foreign file that is not an entry. */
  char junk_path[4200];
  snprintf(junk_path, sizeof junk_path, "%s/0123456789abcdef0123456789abcdef.gakc", dir);
  FILE* junk = fopen(junk_path, "wb");
  CHECK(junk != NULL);
  fputs("not a cache entry at all", junk);
  fclose(junk);
  size_t count = 0;
  CHECK_FAILS(graphattn_cache_list(cache, NULL, 0, &count), GRAPHATTN_ERROR_BUFFER_TOO_SMALL,
              "there are 2 cache entries but room for 0");
  CHECK(count == 2);
  graphattn_cache_entry_t entries[4];
  memset(entries, 0, sizeof entries);
  CHECK_FAILS(graphattn_cache_list(cache, entries, 1, &count), GRAPHATTN_ERROR_BUFFER_TOO_SMALL,
              "room for 1");
  CHECK(count == 2 && entries[0].key[0] != '\0' && entries[1].key[0] == '\0');
  CHECK_OK(graphattn_cache_list(cache, entries, 4, &count));
  CHECK(count == 2);
  CHECK(strcmp(entries[0].key, entries[1].key) < 0); /* sorted by file name */
  int good = strcmp(entries[0].key, "0123456789abcdef0123456789abcdef") == 0 ? 1 : 0;
  const graphattn_cache_entry_t* e = &entries[good];
  CHECK(strlen(e->key) == 32 && strspn(e->key, "0123456789abcdef") == 32);
  CHECK(strcmp(e->spec, spec) == 0 && e->arch == 90 && e->ok == 1);
  CHECK(strcmp(e->status, "ok") == 0);
  CHECK(e->file_bytes > 100 && e->last_used_ms > 0 && e->compiled_at_ms > 0);
  const graphattn_cache_entry_t* j = &entries[1 - good];
  CHECK(strcmp(j->key, "0123456789abcdef0123456789abcdef") == 0);
  CHECK(j->ok == 0 && strcmp(j->status, "bad magic") == 0 && j->spec[0] == '\0');
  CHECK(j->arch == 0 && j->compiled_at_ms == 0 && j->file_bytes == 24);
  CHECK(unlink(junk_path) == 0);
  CHECK_FAILS(graphattn_cache_list(cache, NULL, 3, &count), INVALID, "NULL with capacity 3");

  /* A second cache on the same directory finds the entry on disk. */
  graphattn_cache_t second = NULL;
  CHECK_OK(graphattn_cache_create(&o, &second));
  CHECK_OK(graphattn_cache_precompile(second, &spec, 1, 1, r));
  CHECK(r[0].ok == 1 && r[0].origin == GRAPHATTN_ORIGIN_DISK);
  s = stats_of(second);
  CHECK(s.disk_hits == 1 && s.misses == 0 && s.compiles == 0);
  graphattn_cache_destroy(second);
  graphattn_cache_destroy(cache);

  /* Memory only: no directory, no entries. */
  o.use_disk = 0;
  CHECK_OK(graphattn_cache_create(&o, &cache));
  needed = 0;
  CHECK_OK(graphattn_cache_dir(cache, buf, sizeof buf, &needed));
  CHECK(buf[0] == '\0' && needed == 1);
  count = 7;
  CHECK_OK(graphattn_cache_list(cache, NULL, 0, &count));
  CHECK(count == 0);
  graphattn_cache_destroy(cache);

  o.use_disk = 1;
  o.lock_timeout_ms = -1;
  cache = (graphattn_cache_t)1;
  CHECK_FAILS(graphattn_cache_create(&o, &cache), INVALID, "options->lock_timeout_ms -1");
  CHECK(cache == NULL);
  o.lock_timeout_ms = 1000;
  o.struct_size = 4;
  CHECK_FAILS(graphattn_cache_create(&o, &cache), INVALID, "options->struct_size 4");

  /* The process-wide cache: always the same handle, never destroyed. */
  graphattn_cache_t d1 = NULL, d2 = NULL;
  CHECK_OK(graphattn_cache_default(&d1));
  graphattn_cache_destroy(d1);
  CHECK_OK(graphattn_cache_default(&d2));
  CHECK(d1 != NULL && d1 == d2);
  stats_of(d2);
  remove_dir(dir);
}

/* ---- Capture sizes and the batch split ---------------------------------------------------- */

static void test_capture_and_split(void) {
  int sizes[64];
  size_t count = 0;
  CHECK_FAILS(graphattn_default_capture_sizes(256, NULL, 0, &count),
              GRAPHATTN_ERROR_BUFFER_TOO_SMALL, "there are 51 capture sizes but room for 0");
  CHECK(count == 51);
  memset(sizes, 0, sizeof sizes);
  CHECK(graphattn_default_capture_sizes(256, sizes, 10, &count) ==
        GRAPHATTN_ERROR_BUFFER_TOO_SMALL);
  CHECK(count == 51 && sizes[9] == 56 && sizes[10] == 0); /* the first 10 written */
  CHECK_OK(graphattn_default_capture_sizes(256, sizes, 64, &count));
  CHECK(count == 51);
  CHECK(sizes[0] == 1 && sizes[1] == 2 && sizes[2] == 4 && sizes[3] == 8 && sizes[33] == 248);
  CHECK(sizes[34] == 256 && sizes[35] == 272 && sizes[50] == 512);
  CHECK_OK(graphattn_default_capture_sizes(4, sizes, 64, &count));
  CHECK(count == 4 && sizes[3] == 8); /* max = 2 * 4 */
  CHECK_FAILS(graphattn_default_capture_sizes(0, sizes, 64, &count), GRAPHATTN_ERROR,
              "max_num_seqs must be >= 1, got 0");

  /* Speculative decoding: sizes of whole requests of 4 tokens; the support level and the
   * uniform-batch test for that decode query length. */
  CHECK_OK(graphattn_uniform_decode_capture_sizes(8, 4, sizes, 64, &count));
  CHECK(count == 9 && sizes[0] == 4 && sizes[1] == 8 && sizes[2] == 16 && sizes[8] == 64);
  CHECK_OK(graphattn_uniform_decode_capture_sizes(256, 1, sizes, 64, &count));
  CHECK(count == 51 && sizes[50] == 512);
  CHECK_FAILS(graphattn_uniform_decode_capture_sizes(8, 17, sizes, 64, &count), GRAPHATTN_ERROR,
              "decode_query_len 17 is not supported; supported: 1..16");
  graphattn_cudagraph_support_t support = GRAPHATTN_CUDAGRAPH_NEVER;
  CHECK_OK(graphattn_cudagraph_support_for(4, &support));
  CHECK(support == GRAPHATTN_CUDAGRAPH_UNIFORM_BATCH);
  CHECK_OK(graphattn_cudagraph_support_for(1, &support));
  CHECK(support == graphattn_cudagraph_support());
  CHECK_FAILS(graphattn_cudagraph_support_for(0, &support), GRAPHATTN_ERROR,
              "decode_query_len 0 is not supported");
  CHECK_FAILS(graphattn_cudagraph_support_for(4, NULL), GRAPHATTN_ERROR_INVALID_ARGUMENT,
              "support is NULL");
  {
    const int32_t uniform[] = {0, 4, 8, 12}, ragged[] = {0, 4, 6, 10};
    int ok = -1;
    CHECK_OK(graphattn_can_run_uniform_decode(uniform, 3, 4, &ok));
    CHECK(ok == 1);
    CHECK_OK(graphattn_can_run_uniform_decode(ragged, 3, 4, &ok));
    CHECK(ok == 0);
    CHECK_OK(graphattn_can_run_in_cudagraph(uniform, 3, &ok)); /* 4 tokens: not single-token */
    CHECK(ok == 0);
  }

  CHECK_OK(graphattn_default_capture_sizes(256, sizes, 64, &count));
  int padded = -1;
  CHECK_OK(graphattn_padded_capture_size(sizes, count, 3, &padded));
  CHECK(padded == 4);
  CHECK_OK(graphattn_padded_capture_size(sizes, count, 1, &padded));
  CHECK(padded == 1);
  CHECK_OK(graphattn_padded_capture_size(sizes, count, 250, &padded));
  CHECK(padded == 256);
  CHECK_OK(graphattn_padded_capture_size(sizes, count, 513, &padded));
  CHECK(padded == 0); /* above them all: eager */
  CHECK_OK(graphattn_padded_capture_size(NULL, 0, 5, &padded));
  CHECK(padded == 0);

  CHECK(graphattn_cudagraph_support() == GRAPHATTN_CUDAGRAPH_UNIFORM_SINGLE_TOKEN_DECODE);
  const int32_t decodes[] = {0, 1, 2, 3};
  const int32_t mixed[] = {0, 1, 2, 3, 13, 20};
  int can = -1;
  CHECK_OK(graphattn_can_run_in_cudagraph(decodes, 3, &can));
  CHECK(can == 1);
  CHECK_OK(graphattn_can_run_in_cudagraph(mixed, 5, &can));
  CHECK(can == 0);
  CHECK_OK(graphattn_can_run_in_cudagraph(mixed, 0, &can)); /* an empty batch */
  CHECK(can == 1);

  graphattn_decode_prefill_split_t split;
  CHECK_OK(graphattn_split_decodes_and_prefills(mixed, 5, 1, &split));
  CHECK(split.num_decodes == 3 && split.num_prefills == 2);
  CHECK(split.num_decode_tokens == 3 && split.num_prefill_tokens == 17);
  CHECK_OK(graphattn_split_decodes_and_prefills(decodes, 3, 1, &split));
  CHECK(split.num_decodes == 3 && split.num_prefills == 0 && split.num_decode_tokens == 3);
  /* A larger threshold makes the 4-token request a decode; offsets need not start at 0. */
  const int32_t offset[] = {10, 11, 15, 30};
  CHECK_OK(graphattn_split_decodes_and_prefills(offset, 3, 8, &split));
  CHECK(split.num_decodes == 2 && split.num_prefills == 1);
  CHECK(split.num_decode_tokens == 5 && split.num_prefill_tokens == 15);
  const int32_t out_of_order[] = {0, 1, 11, 12};
  CHECK_FAILS(graphattn_split_decodes_and_prefills(out_of_order, 3, 1, &split), GRAPHATTN_ERROR,
              "request 2 (query length 1) follows prefill request 1");
  const int32_t decreasing[] = {0, 5, 3};
  CHECK_FAILS(graphattn_split_decodes_and_prefills(decreasing, 2, 1, &split), GRAPHATTN_ERROR,
              "query length must be >= 0");
  CHECK_FAILS(graphattn_split_decodes_and_prefills(decodes, -1, 1, &split), INVALID, "num_reqs -1");
}

int main(void) {
  /* An error from another test must not leak into this check: query first. */
  CHECK(graphattn_gpu_available(&gpu) == GRAPHATTN_OK);
  printf("c_abi: graphattn %s, ABI %d, GPU %s\n", graphattn_version(), graphattn_abi_version(),
         gpu ? "present" : "absent");
  test_library();
  test_last_error();
  test_null_arguments();
  test_layer_config();
  test_attn_type();
  test_decode_query_len();
  test_backend_specs();
  test_mixed_branches();
  test_tensor_checks();
  test_cache();
  test_capture_and_split();
  printf("c_abi: all tests passed\n");
  return 0;
}
