# SPDX-License-Identifier: Apache-2.0
"""graphattn.cache: a KernelCache in tmp_path, precompile (NVRTC only, no GPU), list, stats, dir."""

import os

import pytest

import graphattn
from graphattn.cache import KernelCache, default_cache

WRITE_SPEC = "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90"


def test_precompile_list_stats_dir(tmp_path):
    d = tmp_path / "cache"
    cache = KernelCache(dir=str(d))
    assert cache.dir == str(d)
    assert cache.list() == []
    (r,) = cache.precompile([WRITE_SPEC], threads=1)
    assert (r.spec, r.origin, r.ok, r.error) == (WRITE_SPEC, "compiled", True, "")
    assert r.ms > 0
    s = cache.stats()
    assert (s.misses, s.compiles, s.compile_failures, s.memory_hits, s.disk_hits) == (
        1, 1, 0, 0, 0)
    assert s.compile_ms > 0
    (e,) = cache.list()
    assert (e.spec, e.arch, e.ok, e.status) == (WRITE_SPEC, 90, True, "ok")
    assert len(e.key) == 32 and int(e.key, 16) >= 0
    assert e.file_bytes > 0 and e.compiled_at_ms > 0 and e.last_used_ms > 0
    assert any(e.key in name for name in os.listdir(d))

    # The same cache again: memory. A new cache on the same directory: disk.
    assert cache.precompile(WRITE_SPEC)[0].origin == "memory"
    assert cache.stats().memory_hits == 1
    other = KernelCache(dir=d)  # a path object works too
    assert other.precompile([WRITE_SPEC])[0].origin == "disk"
    assert other.stats().disk_hits == 1 and other.stats().compiles == 0


def test_backend_specs_precompile_for_sm90(tmp_path):
    b = graphattn.AttentionBackend(num_heads=32, num_kv_heads=8, head_size=128,
                                   max_model_len=4096, max_num_seqs=16, arch=90)
    cache = KernelCache(dir=str(tmp_path / "cache"))
    results = cache.precompile(b.required_specs(), threads=0)
    # with the mixed graphs' _dsp and _dsp_long decodes
    assert len(results) == 5 and all(r.ok for r in results)
    assert sorted(e.spec for e in cache.list()) == sorted(b.required_specs())


def test_failed_specs_raise_with_every_result(tmp_path):
    cache = KernelCache(dir=str(tmp_path / "cache"))
    bad = "decode_h100_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90"
    with pytest.raises(graphattn.GraphattnError) as info:
        cache.precompile([WRITE_SPEC, bad, "bogus"])
    err = info.value
    assert "2 of 3 specs failed" in err.message and bad in err.message
    assert [r.ok for r in err.results] == [True, False, False]
    assert "head size 100 is not supported" in err.results[1].error
    assert err.results[1].origin is None
    assert "malformed spec string 'bogus'" in err.results[2].error
    results = cache.precompile([bad], raise_on_error=False)
    assert not results[0].ok and cache.stats().compiles == 1


def test_argument_errors(tmp_path):
    cache = KernelCache(dir=str(tmp_path / "cache"))
    with pytest.raises(TypeError, match=r"specs\[1\] must be a spec string, got 7"):
        cache.precompile([WRITE_SPEC, 7])
    with pytest.raises(ValueError, match="threads -1 is out of range"):
        cache.precompile([WRITE_SPEC], threads=-1)
    with pytest.raises(TypeError, match="dir must be a str or path"):
        KernelCache(dir=5)
    with pytest.raises(TypeError, match="use_disk must be a bool"):
        KernelCache(dir=str(tmp_path), use_disk="yes")
    assert cache.precompile([]) == []


def test_memory_only_cache(tmp_path):
    cache = KernelCache(use_disk=False)
    assert cache.dir == ""
    cache.precompile([WRITE_SPEC])
    assert cache.list() == [] and cache.stats().compiles == 1
    assert "memory only" in repr(cache)


def test_dump_source_writes_the_source(tmp_path):
    d = tmp_path / "cache"
    KernelCache(dir=str(d), dump_source=True).precompile([WRITE_SPEC])
    (entry,) = KernelCache(dir=d).list()
    source = d / (entry.key + ".cu")
    assert source.is_file(), "no dumped source among %s" % sorted(os.listdir(d))
    assert "cache_write" in source.read_text()


def test_default_cache_follows_graphattn_cache_dir():
    c = default_cache()
    assert c is default_cache()
    assert c.dir == os.environ["GRAPHATTN_CACHE_DIR"]  # set by conftest before first use
    assert "default" in repr(c)


def test_a_directory_others_can_write_is_not_used(tmp_path, caplog):
    d = tmp_path / "group"
    d.mkdir()
    os.chmod(d, 0o770)
    with caplog.at_level("WARNING", logger="graphattn"):
        cache = KernelCache(dir=str(d))
    assert cache.dir == "" and "memory only" in repr(cache)
    # The library's warning arrives through the logging module (graphattn._log).
    assert any(r.name == "graphattn" and r.levelname == "WARNING"
               and "writable by its group" in r.getMessage() for r in caplog.records)
    cache.precompile([WRITE_SPEC])
    assert os.listdir(d) == [] and cache.list() == []

    shared = KernelCache(dir=str(d), shared_dir=True)  # a group's deliberate opt-in
    assert shared.dir == str(d)
    shared.precompile([WRITE_SPEC])
    (entry,) = shared.list()
    assert entry.ok and entry.spec == WRITE_SPEC
    assert shared.stats().write_failures == 0

    os.chmod(d, 0o777)  # world-writable: never
    assert KernelCache(dir=str(d), shared_dir=True).dir == ""
