"""Runtime layer shared by every kernel in the playground.

* Interpreter detection: on a machine without CUDA, ``TRITON_INTERPRET=1`` is set *before* triton is
  imported, so ``import triton_kernels`` just works on a CPU box (kernels then run in Triton's
  interpreter, for correctness only).
* Device helpers: the device kernels should run on, a readable device name, dtype helpers.
* :class:`Autotuner`: picks the fastest launch configuration per (shape bucket, dtypes) key and keeps
  it in a persistent on-disk cache keyed by device name, triton version and kernel source hash.
  Every config it tries is recorded (``trials``) so autotune sweeps can reuse the timings.
  Under the interpreter it runs one designated config without timing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import hashlib
import inspect
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor

# --------------------------------------------------------------------------------------------------
# Interpreter detection. Must run before the first `import triton` anywhere in the process.
# --------------------------------------------------------------------------------------------------
if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    if "triton" in sys.modules:  # pragma: no cover - depends on import order of the caller
        warnings.warn(
            "triton was imported before triton_kernels on a machine without CUDA; set "
            "TRITON_INTERPRET=1 in the environment so kernels run in the interpreter",
            RuntimeWarning,
            stacklevel=2,
        )
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402  (must follow the interpreter switch)

INTERPRET: bool = os.environ.get("TRITON_INTERPRET", "0") == "1"


def is_interpreter() -> bool:
    """True when Triton kernels run in the CPU interpreter (no performance meaning)."""
    return INTERPRET


def default_device() -> torch.device:
    """The device kernels run on: the current CUDA device, else the CPU (interpreter)."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def device_name(device: torch.device | str | None = None) -> str:
    """A readable device name, e.g. 'NVIDIA H100 80GB HBM3' or 'cpu-interpreter'."""
    device = torch.device(device) if device is not None else default_device()
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu-interpreter"


def device_slug(device: torch.device | str | None = None) -> str:
    """File-system friendly device name, used for results/<device>/ and cache keys."""
    name = device_name(device)
    out = "".join(c if c.isalnum() else "_" for c in name).strip("_")
    while "__" in out:
        out = out.replace("__", "_")
    return out


def synchronize(device: torch.device | str | None = None) -> None:
    device = torch.device(device) if device is not None else default_device()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def num_sms(device: torch.device | str | None = None, default: int = 1) -> int:
    """Streaming multiprocessors of a CUDA device (cached by torch); ``default`` in the interpreter or
    off the GPU, where launchers size grids for a stand-in machine."""
    device = torch.device(device) if device is not None else default_device()
    if INTERPRET or device.type != "cuda":
        return default
    return torch.cuda.get_device_properties(device).multi_processor_count


_SM_COUNTS: dict[tuple, int] = {}  # (device index, stand-in count) -> streaming multiprocessors


def sm_count(t: torch.Tensor, default: int = 2) -> int:
    """num_sms of t's device, asked once per device; ``default`` (a launcher's stand-in) off the GPU."""
    key = (t.get_device(), default)
    if key not in _SM_COUNTS:
        _SM_COUNTS[key] = num_sms(t.device, default=default)
    return _SM_COUNTS[key]


_DEPENDENT_LAUNCH: dict = {}  # device -> whether its kernels can be programmatic dependent launches


def dependent_launch(device: torch.device) -> bool:
    """Whether kernels on ``device`` can chain by programmatic dependent launch (sm_90 and later; never in
    the interpreter): a kernel launched with ``launch_pdl=True`` may start once the kernel ahead of it
    lets it (``gdc_launch_dependents``), and reads what that kernel writes only after ``gdc_wait``."""
    ok = _DEPENDENT_LAUNCH.get(device)
    if ok is None:
        ok = _DEPENDENT_LAUNCH[device] = (not INTERPRET and device.type == "cuda"
                                          and torch.cuda.get_device_capability(device) >= (9, 0))
    return ok


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints: triton.cdiv's arithmetic without its constexpr wrapping (host hot paths)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def bucket(n: int, minimum: int = 16) -> int:
    """Shape bucket used in autotune keys: the next power of two, at least ``minimum``."""
    return max(minimum, next_power_of_2(n))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


_TL_DTYPES = {}


def tl_dtype(dtype: torch.dtype):
    """The triton.language dtype matching a torch dtype."""
    import triton.language as tl

    if not _TL_DTYPES:
        _TL_DTYPES.update(
            {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16,
             torch.float64: tl.float64, torch.int32: tl.int32, torch.int64: tl.int64}
        )
    return _TL_DTYPES[dtype]


# --------------------------------------------------------------------------------------------------
# Input validation shared by launchers: errors name the argument, raised before any launch.
# --------------------------------------------------------------------------------------------------
def is_dense(t: torch.Tensor) -> bool:
    """Whether t's elements fill its storage span in one of the layouts the multi-tensor kernels walk in storage
    order: contiguous, or channels_last for a 4-d tensor."""
    return t.is_contiguous() or (t.ndim == 4 and t.is_contiguous(memory_format=torch.channels_last))


def check_dense(name: str, t: torch.Tensor) -> None:
    """Raise a ValueError naming ``name`` unless t is dense (:func:`is_dense`) with fewer than 2**31 elements: what
    the multi-tensor kernels (foreach_cast, sgd), which walk each tensor in storage order with int32 offsets, take."""
    if not is_dense(t):
        raise ValueError(f"{name} must be contiguous or channels_last (dense), got strides {t.stride()}")
    if t.numel() >= 2**31:
        raise ValueError(f"{name} has {t.numel()} elements; at most 2**31 - 1 per tensor")


def first_outside(t: torch.Tensor, n: int, ignore: Optional[int] = None) -> Optional[int]:
    """The first value of the integer tensor t outside [0, n) (other than ``ignore``), or None: what an index
    check names. Reads t: one host sync for a tensor on the GPU."""
    bad = (t < 0) | (t >= n)
    if ignore is not None:
        bad &= t != ignore
    return int(t[bad].reshape(-1)[0]) if bool(bad.any()) else None


# the dtypes an op whose kernels store their outputs in the input's dtype computes right in the CPU interpreter:
# its bf16 stores truncate instead of rounding to nearest (up to 1 ulp off torch's result)
INTERPRETER_STORE_DTYPES = (torch.float32, torch.float16)


def check_tensor(
    name: str,
    t: Any,
    *,
    ndim: int | Sequence[int] | None = None,
    dtypes: Iterable[torch.dtype] | None = None,
    device: torch.device | None = None,
    interpreter_dtypes: Iterable[torch.dtype] | None = None,
) -> None:
    """Raise a ValueError naming ``name`` unless ``t`` is a tensor of the given ndim, dtype and device.

    ``interpreter_dtypes``: the dtypes this op computes correctly in the CPU interpreter (e.g. no
    bfloat16 ``tl.dot`` there); others are refused on the CPU before any launch."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.ndim not in allowed:
            raise ValueError(f"{name} must have {' or '.join(map(str, allowed))} dims, got shape {tuple(t.shape)}")
    if dtypes is not None:
        if not isinstance(dtypes, tuple):
            dtypes = tuple(dtypes)
        if t.dtype not in dtypes:
            raise ValueError(f"{name} has dtype {t.dtype}; supported: {', '.join(map(str, dtypes))}")
    if device is not None and t.device is not device and t.device != device:
        raise ValueError(f"{name} is on {t.device} but the other inputs are on {device}")
    if t.device.type == "meta":
        raise ValueError(f"{name} is a meta tensor: Triton kernels need real memory (CUDA, or the CPU in the "
                         "interpreter); use the torch.nn twin to propagate shapes")
    if INTERPRET and interpreter_dtypes is not None and t.dtype not in tuple(interpreter_dtypes):
        raise ValueError(f"{name} has dtype {t.dtype}, which Triton's CPU interpreter cannot compute for this op "
                         f"(it has no {dtype_name(t.dtype)} arithmetic and would return wrong values); "
                         f"use {', '.join(map(str, interpreter_dtypes))} on the CPU, or run on a CUDA GPU")
    if not INTERPRET and t.device.type != "cuda":
        raise ValueError(f"{name} must be a CUDA tensor (got {t.device}); CPU tensors run only in the interpreter")


def check_choice(name: str, value: Any, choices: Sequence) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_bias(bias: Any, n: int, expected: str, dtypes: Iterable[torch.dtype], device: torch.device) -> None:
    """A 1-D bias of ``n`` elements (``expected`` names n in the error, e.g. "C_out=256")."""
    check_tensor("bias", bias, ndim=1, dtypes=dtypes, device=device)
    if bias.shape[0] != n:
        raise ValueError(f"bias has {bias.shape[0]} elements, expected {expected}")


def check_same(name_a: str, a: Any, name_b: str, b: Any, what: str = "dtype") -> None:
    if getattr(a, what) != getattr(b, what):
        raise ValueError(f"{name_b} has {what} {getattr(b, what)} but {name_a} has {getattr(a, what)}")


# --------------------------------------------------------------------------------------------------
# Autotuning with a persistent cache.
# --------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Config:
    """One launch configuration: constexpr meta-parameters plus num_warps / num_stages."""

    kwargs: dict
    num_warps: int = 4
    num_stages: int = 3

    def to_json(self) -> dict:
        return {"kwargs": dict(self.kwargs), "num_warps": self.num_warps, "num_stages": self.num_stages}

    @classmethod
    def from_json(cls, d: dict) -> "Config":
        return cls(dict(d["kwargs"]), int(d["num_warps"]), int(d["num_stages"]))

    def __str__(self) -> str:
        kw = ", ".join(f"{k}={v}" for k, v in self.kwargs.items())
        return f"{kw}, warps={self.num_warps}, stages={self.num_stages}"

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.kwargs.items())), self.num_warps, self.num_stages))


@functools.lru_cache(maxsize=256)
def config_str(config: Optional[Config]) -> str:
    """A config as the string a torch op carries ("" = the tuned one); made once per distinct config."""
    return "" if config is None else json.dumps(config.to_json(), sort_keys=True)


@functools.lru_cache(maxsize=256)
def config_from(text: str) -> Optional[Config]:
    """The config a torch op's string names (None for ""); parsed once per distinct string."""
    return Config.from_json(json.loads(text)) if text else None


CACHE_ENV = "TRITON_PLAYGROUND_CACHE"
TUNE_ENV = "TRITON_PLAYGROUND_AUTOTUNE"  # "0": never time configs (use the cache, else the first candidate)


def tuning_enabled() -> bool:
    return os.environ.get(TUNE_ENV, "1") != "0"


def cache_dir() -> Path:
    """Where tuned configs live: $TRITON_PLAYGROUND_CACHE, else ~/.cache/triton_playground/autotune."""
    root = os.environ.get(CACHE_ENV)
    if root:
        return Path(root)
    return Path.home() / ".cache" / "triton_playground" / "autotune"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so readers never see a partial file (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _file_lock(path: Path):
    """Advisory exclusive lock (fcntl) so concurrent writers merge instead of overwriting."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "a+") as f:
        try:
            import fcntl

            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        except (ImportError, OSError):  # pragma: no cover - non-POSIX
            pass
        yield


def read_json(path: Path) -> dict:
    """Read a JSON cache file; a missing file is empty. One that cannot be used (not UTF-8, not a JSON
    object, a directory, under a cache folder that is a file) is ignored with a RuntimeWarning: the
    caller then tunes again (and _store replaces the file where it can)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("top level is not an object")
        return data
    except FileNotFoundError:
        return {}
    except NotADirectoryError:
        reason = f"{path.parent} is not a directory (check ${CACHE_ENV})"
    except (OSError, ValueError, RecursionError) as e:  # UnicodeDecodeError, JSONDecodeError are ValueErrors
        reason = str(e)
    warnings.warn(f"ignoring corrupt autotune cache {path}: {reason}", RuntimeWarning, stacklevel=2)
    return {}


_FLUSH: torch.Tensor | None = None


class CudaEventTimer:
    """CUDA-event pairs around pieces of GPU work, read after one synchronisation at the end::

        timer = CudaEventTimer()
        for batch in batches:
            with timer.span():
                step(batch)
        per_batch_ms = timer.times_ms()

    Every CUDA-event timing in the playground goes through this class."""

    def __init__(self) -> None:
        self._pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    @contextlib.contextmanager
    def span(self):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        self._pairs.append((start, end))

    def times_ms(self) -> list[float]:
        """Elapsed ms of every span so far, in order (synchronises the device once)."""
        torch.cuda.synchronize()
        return [start.elapsed_time(end) for start, end in self._pairs]


def cuda_time_ms(fn: Callable[[], Any], *, warmup: int = 3, rep: int = 10, flush_l2: bool = True,
                 lead_ms: float = 0.0) -> list[float]:
    """Per-repetition times (ms) of ``fn`` with CUDA events, the L2 flushed (a 256 MB write, larger
    than any L2) before each repetition when ``flush_l2``. Shared by the autotuner and the harness.

    A repetition's time includes any wait of the GPU for ``fn``'s host work before its launches (what an eager
    call costs). ``lead_ms`` > 0 queues a GPU spin of at least that long (at clocks up to 2 GHz) before each
    start event, so the host's work is done while the GPU spins and the times are the kernels' alone (what
    a tuner compares: a slow or busy host, or a garbage collection, then moves no config's time); Python's
    garbage collector is paused while the repetitions are queued."""
    global _FLUSH
    if flush_l2 and _FLUSH is None:
        _FLUSH = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    timer = CudaEventTimer()
    cycles = int(lead_ms * 2e6)
    collecting = gc.isenabled()
    if cycles:
        gc.disable()
    try:
        for _ in range(rep):
            if flush_l2:
                _FLUSH.zero_()
            if cycles:
                torch.cuda._sleep(cycles)
            with timer.span():
                fn()
    finally:
        if collecting:
            gc.enable()
    return timer.times_ms()


def _median(xs: Sequence[float]) -> float:
    ys = sorted(xs)
    n = len(ys)
    return ys[n // 2] if n % 2 else 0.5 * (ys[n // 2 - 1] + ys[n // 2])


def key_fields(key: Any) -> Any:
    """A tuning key as plain JSON values: a NamedTuple becomes a dict of its fields; dtypes are written
    as their names (``"bfloat16"``), devices and other objects as ``str``."""
    if isinstance(key, tuple) and hasattr(key, "_fields"):
        return {name: key_fields(value) for name, value in zip(key._fields, key)}
    if isinstance(key, (list, tuple)):
        return [key_fields(value) for value in key]
    if isinstance(key, torch.dtype):
        return str(key).removeprefix("torch.")
    if key is None or isinstance(key, (bool, int, float, str)):
        return key
    return str(key)


def _named_entries(data: dict) -> dict:
    """The cache entries written under named keys (a JSON object, see Autotuner.key_str); older files
    keyed entries by unnamed lists."""
    return {k: v for k, v in data.items() if k.startswith("{")}


class Autotuner:
    """Choose and remember the best :class:`Config` of a kernel per key.

    Parameters
    ----------
    name: short name of the kernel family (file name of its cache).
    kernel: the ``@triton.jit`` function (its source is hashed into the cache key).
    configs: candidate configs tried on the GPU.
    interpret_config: the one config run under the interpreter (never timed).
    prune: optional ``prune(configs, *args) -> configs`` dropping configs that cannot suit a shape.
    verbose: print one line per tuning / cache hit (also enabled by TRITON_PLAYGROUND_VERBOSE=1).

    Use::

        tuner = Autotuner("gemm", _gemm_kernel, CONFIGS, interpret_config=SMALL)
        cfg = tuner.pick(key, lambda cfg: launch(cfg))   # launch(cfg) runs the kernel once
    """

    def __init__(
        self,
        name: str,
        kernel: Any,
        configs: Sequence[Config],
        *,
        interpret_config: Config,
        verbose: bool | None = None,
        warmup: int = 3,
        rep: int = 10,
    ) -> None:
        self.name = name
        self.kernel = kernel
        self.configs = list(configs)
        self.interpret_config = interpret_config
        self.verbose = verbose if verbose is not None else os.environ.get("TRITON_PLAYGROUND_VERBOSE") == "1"
        self.warmup, self.rep = warmup, rep
        self._memory: dict[Any, Config] = {}  # in-process choices, by key
        self.trials: dict[str, list[dict]] = {}  # key -> [{config, ms}] for every config tried
        self.events: list[tuple[str, str]] = []  # (key, "hit" | "tuned" | "memory") log for reports
        self.picks = 0  # calls of pick(): a launcher's steady state makes none (its launch plan is kept)
        self._source_hash = self._hash_source(kernel, self.configs)

    # -- keys ---------------------------------------------------------------------------------------
    @staticmethod
    def _hash_source(kernel: Any, configs: Sequence[Config]) -> str:
        fns = kernel if isinstance(kernel, (list, tuple)) else [kernel]
        h = hashlib.sha256()
        for k in fns:
            fn = getattr(k, "fn", k)
            try:
                h.update(inspect.getsource(fn).encode())
            except (OSError, TypeError):
                h.update(repr(fn).encode())
        for c in configs:
            h.update(json.dumps(c.to_json(), sort_keys=True).encode())
        return h.hexdigest()[:16]

    def cache_path(self) -> Path:
        dev = device_slug()
        tv = triton.__version__.replace("+", "_")
        return cache_dir() / f"{self.name}-{dev}-triton{tv}-{self._source_hash}.json"

    @staticmethod
    def key_str(key: Any) -> str:
        """The cache file's name for ``key``: a tuning key is a small NamedTuple, written as a readable
        JSON object of its fields (``{"m":256,"dtype":"bfloat16","act":"relu","has_bias":true,...}``)."""
        if isinstance(key, str):
            return key
        return json.dumps(key_fields(key), separators=(",", ":"))

    # -- the main entry -----------------------------------------------------------------------------
    def pick(self, key: Any, run: Callable[[Config], Any],
             configs: Sequence[Config] | Callable[[], Sequence[Config]] | None = None,
             tracing: bool = False, interpret_config: Config | None = None) -> Config:
        """The config for ``key``; ``run(cfg)`` launches the kernel once with ``cfg`` (used for timing).

        ``tracing``: the inputs are fake (torch.compile is tracing the op), so nothing can be timed:
        a remembered or cached config is used if there is one, else the first candidate (candidates
        are ordered best-guess first). The same holds when $TRITON_PLAYGROUND_AUTOTUNE=0.
        ``interpret_config``: the config to run under the interpreter for this key (default: the tuner's).
        """
        self.picks += 1
        if not hasattr(key, "_fields"):
            raise TypeError(f"{self.name}: a tuning key is a NamedTuple (its fields name the cache entry), "
                            f"got {type(key).__name__}")
        if INTERPRET:
            return interpret_config or self.interpret_config
        cfg = self._memory.get(key)  # the hot path: one dict lookup per launch (a NamedTuple: hashable)
        if cfg is not None:
            return cfg
        k = self.key_str(key)
        if callable(configs):  # a candidate list built only when it is needed
            configs = configs()
        configs = list(configs) if configs is not None else self.configs
        entry = self._read_cache().get(k)
        if entry is not None:
            try:
                cfg = Config.from_json(entry["best"])
                self._memory[key] = cfg
                self.trials.setdefault(k, entry.get("trials", []))
                self._log(k, "hit", f"cache hit -> {cfg}")
                return cfg
            except (KeyError, TypeError, ValueError):
                warnings.warn(f"ignoring malformed cache entry {k} in {self.cache_path()}", RuntimeWarning)
        if tracing:
            return configs[0]
        if not tuning_enabled():  # untimed: the best-guess candidate, remembered like a tuned one
            self._memory[key] = configs[0]
            return configs[0]
        best = self._memory[key] = self._tune(k, run, configs)
        return best

    def _read_cache(self) -> dict:
        """The cache file's entries; entries of an older format (keys written as unnamed lists) are
        ignored with a warning, and replaced when this key is tuned again."""
        data = read_json(self.cache_path())
        current = _named_entries(data)
        if len(current) < len(data):
            warnings.warn(f"ignoring {len(data) - len(current)} autotune cache entries of an older format "
                          f"(unnamed keys) in {self.cache_path()}; they are retuned as needed", RuntimeWarning,
                          stacklevel=3)
        return current

    def _tune(self, k: str, run: Callable[[Config], Any], configs: list[Config]) -> Config:
        t0 = time.perf_counter()
        precompile([functools.partial(run, cfg) for cfg in configs])  # in parallel, into Triton's disk cache
        trials = []
        for cfg in configs:
            try:
                ms = _median(cuda_time_ms(lambda: run(cfg), warmup=self.warmup, rep=self.rep, lead_ms=TUNER_LEAD_MS))
            except Exception as e:  # out of resources, compile failure: record and move on
                trials.append({"config": cfg.to_json(), "ms": None, "error": type(e).__name__})
                continue
            trials.append({"config": cfg.to_json(), "ms": ms})
        if all(t["ms"] is None for t in trials):
            raise RuntimeError(f"{self.name}: no config ran for key {k}; trials: {trials}")
        best, best_ms = self._final_round(run, configs, trials)
        elapsed = time.perf_counter() - t0
        self.trials[k] = trials
        self._store(k, best, best_ms, trials, elapsed)
        self._log(k, "tuned", f"tuned {len(configs)} configs in {elapsed:.1f}s -> {best} ({best_ms:.4f} ms)")
        return best

    def _final_round(self, run, configs: list[Config], trials: list) -> tuple:
        """The first pass times each candidate once, one after another, so a config timed while the clocks
        ramp or the host stalls can lose to a slower one. The finalists -- up to FINALISTS within
        FINAL_MARGIN of the best -- are timed again in FINAL_ROUNDS interleaved rounds; the lowest median of
        all their times wins (recorded per trial as ``final_ms``). Returns (config, its time)."""
        timed = sorted(((t["ms"], i) for i, t in enumerate(trials) if t["ms"] is not None))
        best_ms, best = timed[0]
        finalists = [i for ms, i in timed[:FINALISTS] if ms <= best_ms * FINAL_MARGIN]
        if len(finalists) < 2:
            return configs[best], best_ms
        times: dict[int, list[float]] = {i: [] for i in finalists}
        for _ in range(FINAL_ROUNDS):
            for i in finalists:
                times[i] += cuda_time_ms(lambda i=i: run(configs[i]), warmup=1, rep=self.rep, lead_ms=TUNER_LEAD_MS)
        for i in finalists:
            trials[i]["final_ms"] = _median(times[i])
        won = min(finalists, key=lambda i: trials[i]["final_ms"])
        return configs[won], trials[won]["final_ms"]

    def _store(self, k: str, best: Config, best_ms: float, trials: list, elapsed: float) -> None:
        path = self.cache_path()
        entry = {
            "key": json.loads(k) if k.startswith("{") else k,
            "best": best.to_json(), "best_ms": best_ms, "trials": trials, "tune_seconds": elapsed,
            "device": device_name(), "triton": triton.__version__, "torch": torch.__version__,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        try:
            with _file_lock(path):
                data = _named_entries(read_json(path))  # merge with what other processes wrote; older format out
                data[k] = entry
                atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True))
        except OSError as e:  # a read-only cache must never break a run
            warnings.warn(f"could not write autotune cache {path}: {e}", RuntimeWarning)

    def _log(self, k: str, what: str, msg: str) -> None:
        self.events.append((k, what))
        if self.verbose:
            print(f"[autotune {self.name}] {k}: {msg}", file=sys.stderr)

    def clear_memory(self) -> None:
        """Forget in-process choices (the on-disk cache is kept)."""
        self._memory.clear()


ALL_TUNERS: dict[str, Autotuner] = {}
FINALISTS, FINAL_MARGIN, FINAL_ROUNDS = 3, 1.15, 5  # the tuner's interleaved second round (Autotuner._final_round)
# GPU spin queued before each timed trial (cuda_time_ms's lead_ms): the tuner compares kernel times, which the
# host path of a trial launch (up to ~0.1 ms in Python, more on a slow or busy host) must not leak into
TUNER_LEAD_MS = 0.5


def register_tuner(t: Autotuner) -> Autotuner:
    ALL_TUNERS[t.name] = t
    return t


# --------------------------------------------------------------------------------------------------
# Launching
# --------------------------------------------------------------------------------------------------
_TRACING_TENSORS = (FakeTensor, FunctionalTensor)


def is_fake(*ts: Any) -> bool:
    """True when any tensor is a FakeTensor / FunctionalTensor, i.e. torch.compile is tracing."""
    return any(isinstance(t, _TRACING_TENSORS) for t in ts)


def is_tracing(*ts: Any) -> bool:
    """True while torch.compile traces (or these tensors are fake): the registered op must be called
    then; an eager call on real tensors may call the launchers themselves (no op outputs to fill)."""
    return torch.compiler.is_compiling() or is_fake(*ts)


def launch(kernel: Any, grid: Any, *args: Any, **kwargs: Any) -> None:
    """Launch a ``@triton.jit`` kernel: ``kernel[grid](*args, **kwargs)``, with less host time.

    On the GPU the constexprs and launch options among ``kwargs`` select a :class:`launcher.BoundKernel`
    (made once per distinct set), which launches the compiled kernel directly (see launcher.py). While
    torch.compile traces (fake or functional tensors) the launch is wrapped with
    ``torch.library.wrap_triton`` so the compiler records the kernel. In the interpreter it is Triton's
    own call, skipped while an op's fake implementation traces (op_registration)."""
    if INTERPRET:
        if not traced_interpreter_launch(*args, *kwargs.values()):
            kernel[grid](*args, **kwargs)
    else:
        launch_bound(kernel, grid, args, kwargs)


from .graphs import capture_graph, own_cublas_workspaces  # noqa: E402,F401  (re-exported)
from .compile_pool import precompile  # noqa: E402
from .eager_node import (MAX_CALL_SIGNATURES, PLAIN_TENSORS, EagerNode, are_plain,  # noqa: E402,F401  (re-exported)
                         remember_call, tensor_signature)
from .launcher import launch_bound  # noqa: E402  (launcher.py imports this module's helpers)
from .op_registration import define_op, register_op, traced_interpreter_launch  # noqa: E402,F401  (re-exported)
from .torch_precision import (torch_conv_precision, torch_matmul_operands,  # noqa: E402,F401  (re-exported)
                              torch_matmul_precision)
