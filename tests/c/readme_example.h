// SPDX-License-Identifier: Apache-2.0
/* README.md's C example (tests/c/readme_example.c), used by graphattn-c-gpu-tests. */
#ifndef GRAPHATTN_TESTS_C_README_EXAMPLE_H_
#define GRAPHATTN_TESTS_C_README_EXAMPLE_H_

#include <graphattn/graphattn.h>

graphattn_backend_t attention_create(const graphattn_layer_config_t* config,
                                     graphattn_cache_t cache, size_t* workspace_bytes);
int attention_step(graphattn_backend_t attn, const DLTensor* query, const DLTensor* key,
                   const DLTensor* value, const DLTensor* kv_cache, const DLTensor* output,
                   const graphattn_metadata_t* md, void* workspace, size_t workspace_bytes,
                   void* stream);

#endif /* GRAPHATTN_TESTS_C_README_EXAMPLE_H_ */
