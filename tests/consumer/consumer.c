// SPDX-License-Identifier: Apache-2.0
/* A C program (compiled as C) that uses graphattn's C ABI through libgraphattn.so: found with
 * find_package, add_subdirectory or pkg-config. Needs no GPU. GRAPHATTN_EXPECTED_VERSION is the
 * version the build system found. Exit status 0 when every check passes. */
#include <graphattn/graphattn.h>
#include <stdio.h>
#include <string.h>

#ifndef GRAPHATTN_EXPECTED_VERSION
#error "define GRAPHATTN_EXPECTED_VERSION (the version the package reports)"
#endif

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                                \
    }                                                                          \
  } while (0)

static int run(void) {
  graphattn_layer_config_t config;

  CHECK(graphattn_abi_version() == GRAPHATTN_ABI_VERSION);
  CHECK(strcmp(graphattn_version(), GRAPHATTN_EXPECTED_VERSION) == 0);
  CHECK(strcmp(graphattn_status_string(GRAPHATTN_ERROR_COMPILE), "GRAPHATTN_ERROR_COMPILE") == 0);

  memset(&config, 0xff, sizeof config);
  graphattn_layer_config_init(&config);
  CHECK(config.struct_size == sizeof config);
  CHECK(config.block_size == 16 && config.dtype == GRAPHATTN_DTYPE_BFLOAT16);
  CHECK(config.kv_dtype == GRAPHATTN_KV_DTYPE_AUTO && config.layout == GRAPHATTN_KV_LAYOUT_NHD);
  CHECK(config.k_scale == 1.0f && config.v_scale == 1.0f && config.window == 0);

  config.num_heads = 32; /* llama-3-8b's attention */
  config.num_kv_heads = 8;
  config.head_size = 128;
  config.max_model_len = 8192;
  config.max_num_seqs = 256;
  config.arch = 90;
  CHECK(graphattn_layer_config_check(&config) == GRAPHATTN_OK);

  config.head_size = 100;
  CHECK(graphattn_layer_config_check(&config) == GRAPHATTN_ERROR);
  CHECK(strstr(graphattn_last_error(), "100") != NULL);
  CHECK(graphattn_layer_config_check(NULL) == GRAPHATTN_ERROR_INVALID_ARGUMENT);
  return 0;
}

int main(void) {
  int failed = run();
  printf("consumer (C, graphattn %s): %s\n", graphattn_version(), failed ? "FAILED" : "ok");
  return failed;
}
