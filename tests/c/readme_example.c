// SPDX-License-Identifier: Apache-2.0
/* The C example of README.md, compiled into graphattn-c-gpu-tests and run there on every
 * forward case (tests/readme_snippets.cmake checks that README.md shows this text). */
#include "tests/c/readme_example.h"

/* [readme] */
#include <graphattn/graphattn.h>
#include <stdio.h>

/* Once per layer configuration, at engine start: check, compile or load, size the workspace. */
graphattn_backend_t attention_create(const graphattn_layer_config_t* config,
                                     graphattn_cache_t cache, size_t* workspace_bytes) {
  graphattn_backend_t attn = NULL;
  if (graphattn_backend_create(config, &attn) != GRAPHATTN_OK ||
      graphattn_backend_prepare(attn, cache) != GRAPHATTN_OK || /* NULL: the default cache */
      graphattn_backend_workspace_bytes(attn, workspace_bytes) != GRAPHATTN_OK) {
    fprintf(stderr, "graphattn: %s\n", graphattn_last_error());
    graphattn_backend_destroy(attn);
    return NULL;
  }
  return attn; /* the engine allocates *workspace_bytes of device memory, zero-filled, once */
}

/* Every step and layer: the tensors are DLPack views of the engine's device memory
 * (query/output [tokens, heads, head_size], key/value [tokens, kv_heads, head_size],
 * kv_cache [2, blocks, block_size, kv_heads, head_size]); md holds the batch, decodes first.
 * Capturable in a CUDA graph: it compiles, allocates and synchronizes nothing. */
int attention_step(graphattn_backend_t attn, const DLTensor* query, const DLTensor* key,
                   const DLTensor* value, const DLTensor* kv_cache, const DLTensor* output,
                   const graphattn_metadata_t* md, void* workspace, size_t workspace_bytes,
                   void* stream) {
  if (graphattn_backend_forward(attn, query, key, value, kv_cache, output, md, workspace,
                                workspace_bytes, stream) != GRAPHATTN_OK) {
    fprintf(stderr, "graphattn: %s\n", graphattn_last_error());
    return 1;
  }
  return 0;
}
/* [/readme] */
