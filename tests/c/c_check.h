// SPDX-License-Identifier: Apache-2.0
/* The C tests' checks: on failure they print file:line, the call or condition, and this
 * thread's graphattn_last_error(), and exit 1. */
#ifndef GRAPHATTN_TESTS_C_C_CHECK_H_
#define GRAPHATTN_TESTS_C_C_CHECK_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphattn/graphattn.h"

/* Fails the test at file:line with this thread's last error. */
#define CHECK(cond)                                                                               \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: \"%s\"\n", __FILE__, __LINE__, #cond, \
              graphattn_last_error());                                                            \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

#define CHECK_OK(call)                                                                          \
  do {                                                                                          \
    graphattn_status_t s_ = (call);                                                             \
    if (s_ != GRAPHATTN_OK) {                                                                   \
      fprintf(stderr, "%s:%d: %s returned %s; last error: \"%s\"\n", __FILE__, __LINE__, #call, \
              graphattn_status_string(s_), graphattn_last_error());                             \
      exit(1);                                                                                  \
    }                                                                                           \
    CHECK(graphattn_last_error()[0] == '\0');                                                   \
  } while (0)

/* call must return `status` and leave a last error that contains `needle`. */
#define CHECK_FAILS(call, status, needle)                                         \
  do {                                                                            \
    graphattn_status_t s_ = (call);                                               \
    if (s_ != (status) || !strstr(graphattn_last_error(), (needle))) {            \
      fprintf(stderr,                                                             \
              "%s:%d: %s returned %s (want %s) with last error \"%s\" (want one " \
              "containing \"%s\")\n",                                             \
              __FILE__, __LINE__, #call, graphattn_status_string(s_),             \
              graphattn_status_string(status), graphattn_last_error(), (needle)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

#endif /* GRAPHATTN_TESTS_C_C_CHECK_H_ */
