"""The runtime layer: interpreter switch, persistent autotune cache (hit, miss, corrupt, concurrent)."""
import json
import multiprocessing as mp
import os
import warnings
from typing import NamedTuple

import pytest
import torch

from triton_kernels import runtime


def test_interpreter_switch_on_cpu():
    if not torch.cuda.is_available():
        assert runtime.is_interpreter() and os.environ["TRITON_INTERPRET"] == "1"
        assert runtime.device_name() == "cpu-interpreter"


def test_bucket():
    assert [runtime.bucket(n) for n in (1, 16, 17, 1000, 1024)] == [16, 16, 32, 1024, 1024]


def _fake_tuner(name="unit"):
    def kernel_src():  # stands in for a jitted kernel: only its source is hashed
        return 1
    cfgs = [runtime.Config({"B": b}, 4, 2) for b in (16, 32, 64)]
    return runtime.Autotuner(name, kernel_src, cfgs, interpret_config=cfgs[0])


def test_config_json_roundtrip():
    c = runtime.Config({"BLOCK_M": 64}, 8, 3)
    assert runtime.Config.from_json(json.loads(json.dumps(c.to_json()))) == c


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(runtime.CACHE_ENV, str(tmp_path))
    return tmp_path


def test_cache_path_keys(cache):
    t = _fake_tuner()
    p = t.cache_path()
    assert p.parent == cache and runtime.device_slug() in p.name and t._source_hash in p.name


class _Key(NamedTuple):
    name: str
    n: int = 0


def _simulate_tune(t, key, best):
    t._store(t.key_str(key), best, 0.5, [{"config": best.to_json(), "ms": 0.5}], 0.1)


def test_cache_hit_and_miss(cache, monkeypatch):
    t = _fake_tuner()
    monkeypatch.setattr(runtime, "INTERPRET", False)
    monkeypatch.setenv(runtime.TUNE_ENV, "1")
    tuned = []
    monkeypatch.setattr(t, "_tune", lambda k, run, cfgs: tuned.append(k) or cfgs[-1])
    _simulate_tune(t, _Key("a", 1), t.configs[1])
    assert t.pick(_Key("a", 1), run=None) == t.configs[1]          # disk hit, no tuning
    assert tuned == [] and t.events[-1][1] == "hit"
    assert t.pick(_Key("b", 2), run=None) == t.configs[-1]         # miss -> tune
    assert tuned == [t.key_str(_Key("b", 2))]
    assert t.pick(_Key("a", 1), run=None, tracing=True) == t.configs[1]
    t2 = _fake_tuner()                                           # a new process sees the file
    monkeypatch.setattr(t2, "_tune", lambda *a: pytest.fail("should not tune"))
    assert t2.pick(_Key("a", 1), run=None) == t.configs[1]
    assert t2.pick(_Key("zzz"), run=None, tracing=True) == t2.configs[0]  # fake inputs: never time


def test_interpreter_uses_designated_config(cache):
    t = _fake_tuner()
    if runtime.INTERPRET:
        assert t.pick(_Key("k"), run=lambda c: pytest.fail("must not run")) == t.interpret_config


def test_corrupt_cache_file_is_ignored(cache, monkeypatch):
    t = _fake_tuner()
    monkeypatch.setattr(runtime, "INTERPRET", False)
    monkeypatch.setenv(runtime.TUNE_ENV, "1")
    t.cache_path().write_text("{not json")
    monkeypatch.setattr(t, "_tune", lambda k, run, cfgs: cfgs[0])
    with pytest.warns(RuntimeWarning, match="corrupt"):
        assert t.pick(_Key("k"), run=None) == t.configs[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _simulate_tune(t, _Key("k2"), t.configs[2])  # overwrites the corrupt file with a valid one
    assert json.loads(t.cache_path().read_text())[t.key_str(_Key("k2"))]["best"]["kwargs"] == {"B": 64}


def _cache_is_usable_again(t):
    """After a corrupt cache: the store path rewrites it (or warns), and a fresh read sees the entry."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _simulate_tune(t, _Key("k2"), t.configs[2])
    assert runtime.read_json(t.cache_path())[t.key_str(_Key("k2"))]["best"]["kwargs"] == {"B": 64}


def test_cache_file_not_utf8_is_ignored(cache):
    """Read path (what pick uses) and store path: a warning and an empty cache (so the key is tuned
    again), never an exception; the next store replaces the file."""
    t = _fake_tuner()
    t.cache_path().write_bytes(b'{"k": \xff\xfe\x00 not utf-8}')
    with pytest.warns(RuntimeWarning, match="ignoring corrupt autotune cache .*utf-8"):
        assert runtime.read_json(t.cache_path()) == {}
    _cache_is_usable_again(t)


def test_cache_file_that_is_a_directory_is_ignored(cache):
    t = _fake_tuner()
    t.cache_path().mkdir()
    with pytest.warns(RuntimeWarning, match="ignoring corrupt autotune cache .*Is a directory"):
        assert runtime.read_json(t.cache_path()) == {}
    with pytest.warns(RuntimeWarning) as record:
        _simulate_tune(t, _Key("k"), t.configs[1])
    assert [str(w.message).split(" /")[0] for w in record] == ["ignoring corrupt autotune cache",
                                                               "could not write autotune cache"]
    assert t.cache_path().is_dir() and not [f for f in cache.iterdir() if f.name.endswith(".tmp")]


def test_cache_env_pointing_at_a_file_is_ignored(tmp_path, monkeypatch):
    not_a_dir = tmp_path / "cache-file"
    not_a_dir.write_text("x")
    monkeypatch.setenv(runtime.CACHE_ENV, str(not_a_dir))
    t = _fake_tuner()
    assert t.cache_path().parent == not_a_dir
    with pytest.warns(RuntimeWarning, match=f"{not_a_dir} is not a directory .check \\${runtime.CACHE_ENV}"):
        assert runtime.read_json(t.cache_path()) == {}
    with pytest.warns(RuntimeWarning, match="could not write autotune cache"):
        _simulate_tune(t, _Key("k"), t.configs[1])
    assert not_a_dir.read_text() == "x"


def _writer(path_env, i):
    os.environ[runtime.CACHE_ENV] = path_env
    t = _fake_tuner()
    for j in range(20):
        _simulate_tune(t, _Key(f"w{i}", j), t.configs[j % 3])


def test_concurrent_writers_merge(cache):
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(cache), i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    data = json.loads(_fake_tuner().cache_path().read_text())
    assert len(data) == 80  # every writer's every entry survived; the file is valid JSON


def test_atomic_write_leaves_no_temp(tmp_path):
    p = tmp_path / "x.json"
    runtime.atomic_write_text(p, "{}")
    runtime.atomic_write_text(p, '{"a": 1}')
    assert json.loads(p.read_text()) == {"a": 1}
    assert [f.name for f in tmp_path.iterdir() if f.name.endswith(".tmp")] == []


def test_check_tensor_errors():
    with pytest.raises(ValueError, match="x must be a torch.Tensor"):
        runtime.check_tensor("x", [1, 2])
    with pytest.raises(ValueError, match="y has dtype"):
        runtime.check_tensor("y", torch.zeros(2, dtype=torch.int8), dtypes=[torch.float32])


def test_tuning_off_uses_first_candidate(cache, monkeypatch):
    t = _fake_tuner()
    monkeypatch.setattr(runtime, "INTERPRET", False)
    monkeypatch.setenv(runtime.TUNE_ENV, "0")
    assert t.pick(_Key("k"), run=lambda c: pytest.fail("must not time")) == t.configs[0]


def test_candidates_built_only_when_needed(cache, monkeypatch):
    """The launch hot path: a remembered key costs one dict lookup; a candidate list given as a callable
    is built only on a miss."""
    t = _fake_tuner()
    monkeypatch.setattr(runtime, "INTERPRET", False)
    monkeypatch.setenv(runtime.TUNE_ENV, "1")
    monkeypatch.setattr(t, "_tune", lambda k, run, cfgs: cfgs[0])
    built = []

    def candidates():
        built.append(1)
        return t.configs[::-1]

    assert t.pick(_Key("m", 7), run=None, configs=candidates) == t.configs[-1]  # miss: built, "tuned"
    assert t.pick(_Key("m", 7), run=None, configs=candidates) == t.configs[-1]  # hit: not built again
    assert len(built) == 1
    assert hash(t.configs[0]) == hash(runtime.Config.from_json(t.configs[0].to_json()))


def test_cache_entries_are_readable_and_old_format_is_ignored(cache, monkeypatch):
    """A NamedTuple key is written as a dict of its fields (dtypes by name); a file of the older format
    (keys as unnamed lists) is ignored with a warning, never a crash, and replaced by the next tuning."""
    class _GemmLikeKey(NamedTuple):
        m: int
        dtype: torch.dtype
        act: str
        has_bias: bool

    t = _fake_tuner()
    monkeypatch.setattr(runtime, "INTERPRET", False)
    monkeypatch.setenv(runtime.TUNE_ENV, "1")
    monkeypatch.setattr(t, "_tune", lambda k, run, cfgs: cfgs[-1])
    key = _GemmLikeKey(256, torch.bfloat16, "relu", True)
    assert t.key_str(key) == '{"m":256,"dtype":"bfloat16","act":"relu","has_bias":true}'
    old = {'[256,"torch.bfloat16","relu",true]': {"best": t.configs[1].to_json()}}
    t.cache_path().write_text(json.dumps(old))
    with pytest.warns(RuntimeWarning, match="older format"):
        assert t.pick(key, run=None) == t.configs[-1]  # the old entry is not used: tuned afresh
    _simulate_tune(t, key, t.configs[2])
    data = json.loads(t.cache_path().read_text())
    assert list(data) == [t.key_str(key)]  # the old entry is gone
    assert data[t.key_str(key)]["key"] == {"m": 256, "dtype": "bfloat16", "act": "relu", "has_bias": True}


def test_config_strings_and_the_call_signature_cache_bound():
    """The torch ops carry a config as a string (config_str / config_from round-trip, "" for None); a
    cache of prepared eager calls is emptied when it reaches MAX_CALL_SIGNATURES, and an unhashable
    signature (key None) is never kept."""
    c = runtime.Config({"BLOCK_M": 2}, 4, 1)
    assert runtime.config_from(runtime.config_str(c)) == c
    assert runtime.config_str(None) == "" and runtime.config_from("") is None
    calls = {}
    for i in range(runtime.MAX_CALL_SIGNATURES + 3):
        assert runtime.remember_call(calls, i, f"call {i}") == f"call {i}"
    assert len(calls) == 3
    assert runtime.remember_call(calls, None, "once") == "once" and len(calls) == 3


def _twice_and_sum(x: torch.Tensor) -> list[torch.Tensor]:
    return [x * 2, x.sum()]


_TWICE_AND_SUM = runtime.register_op("tk_test::twice_and_sum", _twice_and_sum)


def test_an_op_without_derivative_never_detaches():
    """A registered op without a backward, called in grad mode on a tensor that needs a gradient (a backward
    op inside a double backward), gives outputs whose backward raises a RuntimeError naming the op, as the
    dispatcher's op does; without grad mode (a plain backward) or a gradient to track, plain outputs."""
    x = torch.randn(5, requires_grad=True)
    twice, total = _TWICE_AND_SUM(x)
    assert torch.equal(twice, x.detach() * 2) and twice.requires_grad and total.requires_grad
    for out in (twice.sum(), total):
        with pytest.raises(RuntimeError, match="double backward is not supported by tk_test::twice_and_sum"):
            torch.autograd.grad(out, x, retain_graph=True)
    with pytest.raises(RuntimeError, match="no autograd formula"):  # the dispatcher's op raises too
        torch.autograd.grad(_TWICE_AND_SUM.op(x)[0].sum(), x)
    with torch.no_grad():
        assert not any(t.requires_grad for t in _TWICE_AND_SUM(x))
    assert not any(t.requires_grad for t in _TWICE_AND_SUM(x.detach()))


def test_tuning_times_the_finalists_again_interleaved(cache, monkeypatch):
    """First pass: B=16 looks fastest (timed while the clocks ramped, say), B=32 within 15 %, B=64 far
    behind. The finalists are timed again in interleaved rounds, where B=32 is the faster: it wins, both
    trials record their final median, and B=64 is not timed again."""
    t = _fake_tuner()
    first = {16: 1.0, 32: 1.1, 64: 2.0}
    again = {16: 1.3, 32: 1.05}
    seen, current = [], {}

    def fake_time(fn, warmup=3, rep=10, flush_l2=True, lead_ms=0.0):
        assert lead_ms == runtime.TUNER_LEAD_MS  # trials time the kernels, not the host path
        fn()
        b = current["B"]
        seen.append(b)
        table = again if seen.count(b) > 1 else first
        return [table[b]] * rep

    monkeypatch.setattr(runtime, "cuda_time_ms", fake_time)
    best = t._tune("k", lambda cfg: current.update(cfg.kwargs), t.configs)
    assert best.kwargs == {"B": 32}
    assert seen[:3] == [16, 32, 64] and seen[3:] == [16, 32] * runtime.FINAL_ROUNDS
    trials = t.trials["k"]
    assert [tr.get("final_ms") for tr in trials] == [1.3, 1.05, None]



@pytest.mark.gpu
def test_gpu_lead_hides_the_host_path_from_kernel_times():
    """A call that spends 0.3 ms on the host before its launch: timed as an eager call the GPU waits for it
    (~0.3 ms); with lead_ms the host work is done while the GPU spins, and the time is the kernel's."""
    import time

    x = torch.empty(1 << 20, device="cuda")

    def call():
        time.sleep(3e-4)
        x.add_(1.0)

    eager = sorted(runtime.cuda_time_ms(call, rep=20))[10]
    kernel = sorted(runtime.cuda_time_ms(call, rep=20, lead_ms=1.0))[10]
    alone = sorted(runtime.cuda_time_ms(lambda: x.add_(1.0), rep=20))[10]
    assert eager > 0.2 and kernel < 0.1 and kernel < 3 * alone + 0.01, (eager, kernel, alone)
