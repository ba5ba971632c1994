// SPDX-License-Identifier: Apache-2.0
/* GRAPHATTN_API marks what libgraphattn.so exports. The library is built with hidden
 * visibility, so everything else (detail::, internal helpers) stays inside it. Usable from C
 * and C++. The static library needs no marking; the macro expands the same way for it. */
#ifndef GRAPHATTN_EXPORT_H_
#define GRAPHATTN_EXPORT_H_

#if defined(_WIN32)
#define GRAPHATTN_API
#elif defined(__GNUC__) || defined(__clang__)
#define GRAPHATTN_API __attribute__((visibility("default")))
#else
#define GRAPHATTN_API
#endif

#endif /* GRAPHATTN_EXPORT_H_ */
