"""NVIDIA's Perfworks host library (``libnvperf_host.so``) through ctypes: replay passes offline.

Perfworks answers, with no GPU and no driver, how many replay passes a set of metrics
needs on a chip: the metrics evaluator turns each metric name into its raw counter
dependencies, and a raw-metrics configuration schedules those counters into passes.
The library ships in the ``nvidia-cuda-cupti`` wheel (``pip install 'ncuflow[passes]'``)
and in every Nsight Compute install; this module finds it, and only the commands that
plan passes import it. Only one copy of the library can live in a process, so the first
one loaded is kept for the life of the process.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ncuflow.errors import NcuflowError

LIBRARY_NAME = "libnvperf_host.so"
ENV_LIBRARY = "NCUFLOW_NVPERF_HOST"

_STATUS_NAMES: dict[int, str] = {
    1: "ERROR", 2: "INTERNAL_ERROR", 3: "NOT_INITIALIZED", 4: "NOT_LOADED",
    5: "FUNCTION_NOT_FOUND", 6: "NOT_SUPPORTED", 7: "NOT_IMPLEMENTED", 8: "INVALID_ARGUMENT",
    9: "INVALID_METRIC_ID", 11: "OUT_OF_MEMORY", 14: "UNSUPPORTED_GPU", 22: "INSUFFICIENT_SPACE",
}
_STATUS_UNSUPPORTED_GPU = 14
_ACTIVITY_KIND_PROFILER = 1


class PerfworksUnavailable(NcuflowError):
    """No usable libnvperf_host.so on this machine."""


class PerfworksError(NcuflowError):
    """A Perfworks call failed."""


class UnsupportedChip(NcuflowError):
    """The library does not model this chip."""


# ----------------------------------------------------------------------------- structs

_size_t = ctypes.c_size_t
_vp = ctypes.c_void_p
_cp = ctypes.c_char_p


class _Params(ctypes.Structure):
    """Every Perfworks parameter block starts with structSize and pPriv."""

    def __init__(self, **fields: object) -> None:
        super().__init__(**fields)
        # NVPA_STRUCT_SIZE: offset of the last field + its size (no tail padding).
        last_name = self._fields_[-1][0]
        last = getattr(type(self), last_name)
        self.structSize = last.offset + last.size


class _InitializeHost(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp))


class _GetSupportedChipNames(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp),
                ("ppChipNames", ctypes.POINTER(_cp)), ("numChipNames", _size_t))


class _ScratchSize(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("pChipName", _cp),
                ("pCounterAvailabilityImage", _vp), ("scratchBufferSize", _size_t))


class _EvaluatorInit(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("pScratchBuffer", _vp),
                ("scratchBufferSize", _size_t), ("pChipName", _cp),
                ("pCounterAvailabilityImage", _vp), ("pCounterDataImage", _vp),
                ("counterDataImageSize", _size_t), ("pMetricsEvaluator", _vp))


class _EvaluatorDestroy(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("pMetricsEvaluator", _vp))


class _MetricEvalRequest(ctypes.Structure):
    # No structSize header: its size (12) and its stride (16) are passed separately.
    _fields_ = (("metricIndex", _size_t), ("metricType", ctypes.c_uint8),
                ("rollupOp", ctypes.c_uint8), ("submetric", ctypes.c_uint16))


_EVAL_REQUEST_SIZE = _MetricEvalRequest.submetric.offset + _MetricEvalRequest.submetric.size
_EVAL_REQUEST_STRIDE = ctypes.sizeof(_MetricEvalRequest)


class _ConvertName(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("pMetricsEvaluator", _vp),
                ("pMetricName", _cp), ("pMetricEvalRequest", ctypes.POINTER(_MetricEvalRequest)),
                ("metricEvalRequestStructSize", _size_t))


class _RawDependencies(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("pMetricsEvaluator", _vp),
                ("pMetricEvalRequests", ctypes.POINTER(_MetricEvalRequest)),
                ("numMetricEvalRequests", _size_t), ("metricEvalRequestStructSize", _size_t),
                ("metricEvalRequestStrideSize", _size_t), ("ppRawDependencies", ctypes.POINTER(_cp)),
                ("numRawDependencies", _size_t), ("ppOptionalRawDependencies", ctypes.POINTER(_cp)),
                ("numOptionalRawDependencies", _size_t))


class _ConfigCreate(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("activityKind", ctypes.c_int),
                ("pChipName", _cp), ("pCounterAvailabilityImage", _vp), ("pRawMetricsConfig", _vp))


class _ConfigOnly(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("pRawMetricsConfig", _vp))


class _BeginPassGroup(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("pRawMetricsConfig", _vp),
                ("maxPassCount", _size_t))


class _RawMetricRequest(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("pMetricName", _cp),
                ("isolated", ctypes.c_uint8), ("keepInstances", ctypes.c_uint8))


class _AddMetrics(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("pRawMetricsConfig", _vp),
                ("pRawMetricRequests", ctypes.POINTER(_RawMetricRequest)),
                ("numMetricRequests", _size_t))


class _GenerateImage(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("pRawMetricsConfig", _vp),
                ("mergeAllPassGroups", ctypes.c_uint8))


class _NumPasses(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("pRawMetricsConfig", _vp),
                ("numPasses", _size_t))


class _MetricNames(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("pMetricsEvaluator", _vp), ("metricType", ctypes.c_uint8),
                ("pMetricNames", ctypes.POINTER(ctypes.c_char)), ("pMetricNameBeginIndices", ctypes.POINTER(_size_t)),
                ("numMetrics", _size_t))


class _ThroughputProperties(_Params):
    _fields_ = (("structSize", _size_t), ("pPriv", _vp), ("pMetricsEvaluator", _vp),
                ("throughputMetricIndex", _size_t), ("pDescription", _cp), ("hwUnit", ctypes.c_uint32),
                ("numCounters", _size_t), ("pCounterIndices", ctypes.POINTER(_size_t)),
                ("numSubThroughputs", _size_t), ("pSubThroughputIndices", ctypes.POINTER(_size_t)))


_COUNTER, _THROUGHPUT = 0, 2  # NVPW_MetricType


# ----------------------------------------------------------------------------- finding it


def library_candidates() -> list[Path]:
    """Where libnvperf_host.so may be, best first (files only; nothing is loaded)."""
    candidates: list[Path] = []
    explicit = os.environ.get(ENV_LIBRARY)
    if explicit:
        candidates.append(Path(explicit))
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        # cu13 wheels put it in nvidia/cu13/lib, cu12 wheels in nvidia/cuda_cupti/lib.
        candidates += sorted(Path(p) for p in glob.glob(os.path.join(root, "*", "lib", LIBRARY_NAME)))
    for ncu in (os.environ.get("NCU"), shutil.which("ncu")):
        if ncu:
            real = Path(ncu).resolve()
            for base in (real.parent, real.parent.parent):
                candidates += sorted(Path(p) for p in glob.glob(str(base / "host" / "*" / LIBRARY_NAME)))
    for pattern in ("/opt/nvidia/nsight-compute/*/host/*/" + LIBRARY_NAME,
                    "/usr/local/cuda*/nsight-compute*/host/*/" + LIBRARY_NAME,
                    "/usr/lib/nsight-compute/host/*/" + LIBRARY_NAME,
                    "/usr/local/cuda*/extras/CUPTI/lib64/" + LIBRARY_NAME,
                    "/usr/local/cuda*/lib/" + LIBRARY_NAME):
        candidates += sorted((Path(p) for p in glob.glob(pattern)), reverse=True)
    return [c for c in dict.fromkeys(candidates) if c.is_file()]


def _unavailable(detail: str) -> PerfworksUnavailable:
    return PerfworksUnavailable(
        f"Cannot predict replay passes: NVIDIA's Perfworks host library ({LIBRARY_NAME}) {detail}.",
        "ncuflow asks Perfworks, offline and without a GPU, how ncu will schedule the counters "
        "of a collection into replay passes; it ships in the nvidia-cuda-cupti wheel and in "
        "every Nsight Compute install.",
        f"Install it with `pip install 'ncuflow[passes]'` (or `pip install nvidia-cuda-cupti`), "
        f"or point {ENV_LIBRARY} at the {LIBRARY_NAME} of an Nsight Compute install "
        "(its host/linux-desktop-*/ folder).",
    )


# ----------------------------------------------------------------------------- the library


class Perfworks:
    """One loaded libnvperf_host.so, initialized for host use."""

    def __init__(self, path: Path) -> None:
        try:
            self.lib = ctypes.CDLL(str(path))
        except OSError as error:
            raise _unavailable(f"at {path} could not be loaded ({error})") from error
        self.path = path
        self._call("NVPW_InitializeHost", _InitializeHost())
        self._chips: tuple[str, ...] | None = None

    def _call(self, function: str, params: ctypes.Structure) -> int:
        entry = getattr(self.lib, function, None)
        if entry is None:
            raise _unavailable(f"at {self.path} has no function {function} (too old a version)")
        entry.restype = ctypes.c_int
        entry.argtypes = (ctypes.c_void_p,)
        status: int = entry(ctypes.byref(params))
        return status

    def _check(self, function: str, params: ctypes.Structure, what: str) -> None:
        status = self._call(function, params)
        if status != 0:
            raise PerfworksError(
                f"Perfworks failed to {what}: {function} returned "
                f"NVPA_STATUS_{_STATUS_NAMES.get(status, str(status))}.",
                f"The library is {self.path}.",
                f"Try another copy of the library (set {ENV_LIBRARY}); a newer nvidia-cuda-cupti "
                "wheel knows newer chips.",
            )

    def chips(self) -> tuple[str, ...]:
        """The chip names the library lists (some of them it cannot evaluate)."""
        if self._chips is None:
            params = _GetSupportedChipNames()
            self._check("NVPW_GetSupportedChipNames", params, "list its chips")
            self._chips = tuple(
                (params.ppChipNames[i] or b"").decode() for i in range(params.numChipNames)
            )
        return self._chips

    @contextmanager
    def evaluator(self, chip: str) -> Iterator[ChipEvaluator]:
        chip_name = chip.upper().encode()
        size = _ScratchSize(pChipName=chip_name)
        status = self._call("NVPW_CUDA_MetricsEvaluator_CalculateScratchBufferSize", size)
        if status != 0:
            known = ", ".join(c.lower() for c in self.chips())
            if status == _STATUS_UNSUPPORTED_GPU or chip.upper() not in self.chips():
                listed = chip.upper() in self.chips()
                raise UnsupportedChip(
                    f"Perfworks ({self.path}) cannot evaluate metrics for the chip {chip!r}.",
                    (f"This version lists {chip.lower()} but rejects it (status {status}); "
                     if listed else "This version does not know that chip name; ")
                    + f"it lists {known}.",
                    "Name a listed chip with --chip (gh100 for H100/H200, ga100 for A100, ga102 "
                    "for RTX 3080/3090/A10/A40, ad102 for RTX 4090/L40, tu104 for T4, tu102 for "
                    f"RTX 2080 Ti...), or use another copy of the library ({ENV_LIBRARY}).",
                )
            self._check("NVPW_CUDA_MetricsEvaluator_CalculateScratchBufferSize", size,
                        f"size the evaluator of {chip}")
        scratch = (ctypes.c_uint8 * size.scratchBufferSize)()
        init = _EvaluatorInit(pScratchBuffer=ctypes.cast(scratch, _vp),
                              scratchBufferSize=size.scratchBufferSize, pChipName=chip_name)
        self._check("NVPW_CUDA_MetricsEvaluator_Initialize", init, f"start the evaluator of {chip}")
        # The scratch buffer must stay referenced while the evaluator lives.
        evaluator = ChipEvaluator(self, chip.lower(), chip_name, init.pMetricsEvaluator, scratch)
        try:
            yield evaluator
        finally:
            self._call("NVPW_MetricsEvaluator_Destroy",
                       _EvaluatorDestroy(pMetricsEvaluator=init.pMetricsEvaluator))


class ChipEvaluator:
    """Perfworks' metrics evaluator for one chip."""

    def __init__(self, perfworks: Perfworks, chip: str, chip_name: bytes, handle: int,
                 scratch: ctypes.Array[ctypes.c_uint8]) -> None:
        self.perfworks = perfworks
        self.chip = chip
        self._chip_name = chip_name
        self._handle = handle
        self._scratch = scratch
        self._cache: dict[str, tuple[str, ...] | None] = {}

    def raw_dependencies(self, metric: str) -> tuple[str, ...] | None:
        """The raw counters a metric needs; None when the chip does not know the name."""
        if metric in self._cache:
            return self._cache[metric]
        request = _MetricEvalRequest()
        convert = _ConvertName(pMetricsEvaluator=self._handle, pMetricName=metric.encode(),
                               pMetricEvalRequest=ctypes.pointer(request),
                               metricEvalRequestStructSize=_EVAL_REQUEST_SIZE)
        result: tuple[str, ...] | None = None
        if self.perfworks._call("NVPW_MetricsEvaluator_ConvertMetricNameToMetricEvalRequest", convert) == 0:
            deps = _RawDependencies(pMetricsEvaluator=self._handle,
                                    pMetricEvalRequests=ctypes.pointer(request),
                                    numMetricEvalRequests=1,
                                    metricEvalRequestStructSize=_EVAL_REQUEST_SIZE,
                                    metricEvalRequestStrideSize=_EVAL_REQUEST_STRIDE)
            # Two calls: the first sizes both arrays, the second fills them.
            self.perfworks._check("NVPW_MetricsEvaluator_GetMetricRawDependencies", deps,
                                  f"count the raw counters of {metric}")
            required = (_cp * max(deps.numRawDependencies, 1))()
            optional = (_cp * max(deps.numOptionalRawDependencies, 1))()
            deps.ppRawDependencies = ctypes.cast(required, ctypes.POINTER(_cp))
            deps.ppOptionalRawDependencies = ctypes.cast(optional, ctypes.POINTER(_cp))
            self.perfworks._check("NVPW_MetricsEvaluator_GetMetricRawDependencies", deps,
                                  f"list the raw counters of {metric}")
            result = tuple((required[i] or b"").decode() for i in range(deps.numRawDependencies))
        self._cache[metric] = result
        return result

    def _names(self, metric_type: int) -> tuple[str, ...]:
        params = _MetricNames(pMetricsEvaluator=self._handle, metricType=metric_type)
        self.perfworks._check("NVPW_MetricsEvaluator_GetMetricNames", params, f"list the metrics of {self.chip}")
        base = ctypes.addressof(params.pMetricNames.contents)
        return tuple(ctypes.string_at(base + params.pMetricNameBeginIndices[i]).decode()
                     for i in range(params.numMetrics))

    def throughput_counters(self, throughput: str) -> tuple[str, ...]:
        """The counters a throughput metric (``sm__throughput``) is the max of, through its
        sub-throughputs: NVIDIA's speed-of-light breakdown on this chip. Empty for an unknown name."""
        counters, throughputs = self._names(_COUNTER), self._names(_THROUGHPUT)
        found: dict[str, None] = {}
        pending = [throughput]
        while pending:
            name = pending.pop()
            if name not in throughputs:
                continue
            params = _ThroughputProperties(pMetricsEvaluator=self._handle, throughputMetricIndex=throughputs.index(name))
            self.perfworks._check("NVPW_MetricsEvaluator_GetThroughputMetricProperties", params,
                                  f"break {name} down on {self.chip}")
            found.update((counters[params.pCounterIndices[i]], None) for i in range(params.numCounters))
            pending.extend(throughputs[params.pSubThroughputIndices[i]] for i in range(params.numSubThroughputs))
        return tuple(found)

    def passes(self, raw_counters: Iterable[str]) -> int:
        """Counter passes Perfworks schedules for these raw counters (0 for none)."""
        names = sorted(set(raw_counters))
        if not names:
            return 0
        pw = self.perfworks
        create = _ConfigCreate(activityKind=_ACTIVITY_KIND_PROFILER, pChipName=self._chip_name)
        pw._check("NVPW_CUDA_RawMetricsConfig_Create_V2", create, f"create a configuration for {self.chip}")
        config = create.pRawMetricsConfig
        try:
            pw._check("NVPW_RawMetricsConfig_BeginPassGroup",
                      _BeginPassGroup(pRawMetricsConfig=config, maxPassCount=1024), "begin a pass group")
            encoded = [n.encode() for n in names]
            requests = (_RawMetricRequest * len(names))()
            for slot, name in zip(requests, encoded, strict=True):
                slot.__init__(pMetricName=name, isolated=1, keepInstances=1)
            pw._check("NVPW_RawMetricsConfig_AddMetrics",
                      _AddMetrics(pRawMetricsConfig=config, pRawMetricRequests=requests,
                                  numMetricRequests=len(names)), "add the raw counters")
            pw._check("NVPW_RawMetricsConfig_EndPassGroup", _ConfigOnly(pRawMetricsConfig=config),
                      "end the pass group")
            pw._check("NVPW_RawMetricsConfig_GenerateConfigImage",
                      _GenerateImage(pRawMetricsConfig=config), "schedule the counters")
            count = _NumPasses(pRawMetricsConfig=config)
            pw._check("NVPW_RawMetricsConfig_GetNumPasses_V2", count, "count the passes")
            return int(count.numPasses)
        finally:
            pw._call("NVPW_RawMetricsConfig_Destroy", _ConfigOnly(pRawMetricsConfig=config))


_LOADED: Perfworks | None = None


def load(path: Path | None = None) -> Perfworks:
    """The process's Perfworks: the first library found (or the one named), loaded once."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    candidates = [path] if path is not None else library_candidates()
    if not candidates:
        raise _unavailable("was not found (no nvidia-cuda-cupti wheel, no Nsight Compute install)")
    failures: list[str] = []
    for candidate in candidates:
        try:
            _LOADED = Perfworks(candidate)
            return _LOADED
        except (PerfworksUnavailable, PerfworksError) as error:
            failures.append(f"{candidate}: {error.what}")
    raise _unavailable("could not be used (" + "; ".join(failures) + ")")
