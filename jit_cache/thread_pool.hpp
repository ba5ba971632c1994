// SPDX-License-Identifier: Apache-2.0
// A bounded parallel-for over [0, n): the precompile pool.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace graphattn::detail {

// Runs fn(i) for every i in [0, n) on min(threads, n) threads (threads 0: hardware threads).
// fn must not throw.
template <typename Fn>
void parallel_for(size_t n, unsigned threads, Fn&& fn) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const size_t workers = std::min<size_t>(threads, n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < workers; ++t) pool.emplace_back(work);
  if (workers > 0) work();
  for (auto& t : pool) t.join();
}

}  // namespace graphattn::detail
