"""nvmath's ``Matmul`` and ``matmul`` over :class:`mathpy.Matmul` / :func:`mathpy.matmul`.

nvmath-python's rules, where mathpy's own API differs: ``a`` and ``b`` positional-only, the rest keyword-only; ``c``
at least 2-D; ``beta`` required with ``c`` (and ignored, with a warning, without it); with ``c`` and no
``result_type`` the result has ``c``'s dtype; host operands run on the GPU ``options.device_id`` (on the CPU engine
when the machine has no GPU); float8 operands need ``quantization_scales``; ``block_scaling`` (MXFP8) is refused
before any work, naming Blackwell on an older GPU; ``plan()`` returns a tuple of :class:`Algorithm`;
``autotune(iterations=10, prune=None)`` returns None; ``reset_operands(a, b, c, *, ...)`` takes the operands
positionally or by name, with no operand, scalar or epilog input it releases the operands (as
:meth:`Matmul.release_operands`), and a package change is a TypeError.
"""

import numpy as np

from ..... import _cuda, _memo, _runtime
from ..... import matmul as _native_matmul
from ....._errors import InvalidPlanStateError
from ....._execution import ExecutionCUDA
from ....._operands import wrap_operand
from .....bindings._types import cuda_data_type, to_dtype
from .....host.matmul import Matmul as _NativeMatmul
from .....host.matmul import MatmulOptions as _NativeOptions
from .....host.matmul import MatmulPlanPreferences as _NativePreferences
from .....host.matmul._options import refuse_block_scaling
from ..._common import check_or_create_options, dtype_name, object_logger, operand_package
from ._algorithm import Algorithm
from ._options import (MatmulOptions, MatmulPlanPreferences, MatmulQuantizationScales, matrix_qualifiers_dtype,
                       memory_limit_bytes)

__all__ = ["Matmul", "matmul"]

_FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
_SUPPORTED = (*_FLOAT8, "bfloat16", "float16", "float32", "float64", "complex64", "complex128")


class _Call:
    """One nvmath call translated into mathpy's terms: the operands (qualifiers applied), alpha and beta, mathpy's
    options, the execution space and the quantization scales."""

    def __init__(self, a, b, c, alpha, beta, qualifiers, quantization_scales, options, logger):
        a_name, b_name = dtype_name(a), dtype_name(b)
        c_name = None if c is None else dtype_name(c)
        for operand, name in (("A", a_name), ("B", b_name), ("C", c_name)):
            if name is not None and name not in _SUPPORTED:
                raise ValueError(f"The dtype of operand {operand} ({name}) is not supported.")
        if (a_name != b_name and not (a_name in _FLOAT8 and b_name in _FLOAT8)) or a_name == b_name == "float8_e5m2":
            raise ValueError(f"Unsupported combination of dtypes for operands A {a_name} and B {b_name}.")
        if c is not None and len(c.shape) < 2:
            raise ValueError("In order to avoid broadcasting behavior ambiguity, `c` must be at least 2-D. Use a "
                             "singleton dimension to convert your input array to 2-D.")
        if c is not None and beta is None:
            raise ValueError("A value for beta must be provided if operand C is provided.")
        if c is None and beta is not None:
            logger.warning(f"Matmul: The provided beta value {beta} is ignored since operand C is not specified.")
            beta = None
        if c is None and options.inplace:
            raise ValueError("The operation cannot be inplace if operand C is not provided.")
        self.a, self.b = _qualified(a, b, qualifiers)
        self.c, self.alpha, self.beta = c, 1 if alpha is None else alpha, beta
        float8 = a_name in _FLOAT8
        result = options.result_type
        if result is None and c_name is not None and c_name != a_name:
            result = cuda_data_type(c_name)  # nvmath: the result takes C's dtype
        d_float8 = (result is None and float8) or (result is not None and to_dtype(result).name in _FLOAT8)
        if options.block_scaling:  # first: MXFP8 scales (uint8 blocks) are not per-tensor scales
            device = wrap_operand(a).device_id
            device = options.device_id if device is None else device
            refuse_block_scaling(to_dtype(cuda_data_type(a_name)),
                                 ExecutionCUDA(device) if _cuda.is_available() else None)
        self.scales = _scales(quantization_scales, float8, d_float8, logger)
        self.options = _native_options(options.compute_type, options.scale_type, result, options.blocking,
                                       bool(options.fast_accumulation), options.inplace, options.result_amax,
                                       options.block_scaling, options.sm_count_target, options.logger,
                                       options.allocator)
        on_host = str(getattr(a, "device", "cpu")) == "cpu"
        self.execution = None
        if on_host:  # nvmath runs host operands on a GPU
            self.execution = {"name": "cuda", "device_id": options.device_id} if _cuda.is_available() else "cpu"
        self.max_workspace = None
        if options.memory_limit != r"80%":  # nvmath's bound on the workspace; mathpy's default (32 MiB) otherwise
            device_bytes = _device_memory(options.device_id) if _cuda.is_available() else None
            self.max_workspace = memory_limit_bytes(options.memory_limit, device_bytes)

    def preferences(self, preferences):
        """mathpy's MatmulPlanPreferences for nvmath's (None stays None when nothing differs from mathpy's)."""
        if preferences is None and self.max_workspace is None:
            return None
        p = check_or_create_options(MatmulPlanPreferences, preferences, "Matrix multiplication plan preferences")
        aux = {"aux_type": p.epilog.aux_type, "aux_amax": bool(p.epilog.aux_amax)}  # mathpy's checks: its plan()
        masks = {"reduction_scheme_mask": None if p.reduction_scheme_mask == 7 else int(p.reduction_scheme_mask),
                 "numerical_impl_mask": None if p.numerical_impl_mask == (1 << 64) - 1 else
                 int(p.numerical_impl_mask), "max_waves_count": float(p.max_waves_count or 0)}
        workspace = {} if self.max_workspace is None else {"max_workspace_bytes": self.max_workspace}
        return _NativePreferences(limit=p.limit, **masks, **workspace, **aux)


def _aux_scale(epilog_inputs, preferences, required):
    """nvmath's epilog input "aux_quantization_scale" (a number or a one-element tensor) as mathpy's "aux_scale":
    nvmath requires it with a float8 ``preferences.epilog.aux_type`` (at planning) and refuses it without one."""
    p = None if preferences is None else check_or_create_options(MatmulPlanPreferences, preferences,
                                                                 "Matrix multiplication plan preferences")
    aux_type = None if p is None else p.epilog.aux_type
    narrow = aux_type is not None and to_dtype(aux_type).name in _FLOAT8
    given = bool(epilog_inputs) and epilog_inputs.get("aux_quantization_scale") is not None
    if given and not narrow:
        raise ValueError("Scales for epilog auxiliary output are supported only when `preferences.epilog.aux_type` is "
                         "set to a narrow-precision (FP8) type.")
    if required and narrow and not given:
        raise ValueError('"aux_quantization_scale" epilog input is required when `preferences.epilog.aux_type` is '
                         'set to a narrow-precision (FP8) type.')
    if not epilog_inputs or "aux_quantization_scale" not in epilog_inputs:
        return epilog_inputs
    return {("aux_scale" if name == "aux_quantization_scale" else name): value
            for name, value in epilog_inputs.items()}


# nvmath's option values -> mathpy's MatmulOptions (made once: the stateless calls key on them)
_native = _memo.Memo("native-options", group="compat", max_entries=256)


def _native_options(*values):
    found = _native.get(values)
    if found is None:
        names = ("compute_type", "scale_type", "result_type", "blocking", "fast_accumulation", "inplace",
                 "result_amax", "block_scaling", "sm_count_target", "logger", "allocator")
        found = _NativeOptions(**dict(zip(names, values)))
        _native.put(values, found)
    return found


def _scales(scales, float8, d_float8, logger):
    """nvmath's quantization_scales checked by its rules, as mathpy's ``{"a": ..., "b": ..., "d": ...}``."""
    if not float8:
        if scales is not None:
            logger.warning("Matmul: The provided scales are ignored, since they are only applicable to "
                           "narrow-precision (FP8 and lower) operations.")
        return None
    if scales is None:
        raise ValueError("Scales are required for narrow-precision (FP8 and lower) operations. Please set "
                         "`quantization_scales` argument.")
    scales = check_or_create_options(MatmulQuantizationScales, scales, "Scale factors")
    if scales.c is not None:
        raise ValueError("Quantization scaling is not supported for C when it is not a narrow-precision (FP8 and "
                         "lower) type.")
    if scales.d is not None and not d_float8:
        raise ValueError("Quantization scaling is not supported for D when it is not a narrow-precision (FP8 and "
                         "lower) type.")
    for name in ("a", "b", "d") if d_float8 else ("a", "b"):
        if getattr(scales, name) is None:
            raise ValueError(f"Scale for {name.upper()} is not specified")
    return {name: getattr(scales, name) for name in ("a", "b", "d") if getattr(scales, name) is not None}


def _qualified(a, b, qualifiers):
    """``a`` and ``b`` with nvmath's is_conjugate qualifiers applied (a conjugated copy in the operand's package)."""
    if qualifiers is None:
        return a, b
    qualifiers = np.asarray(qualifiers)
    if qualifiers.dtype != matrix_qualifiers_dtype or qualifiers.shape != (3,):
        raise ValueError("The qualifiers must be specified as a NumPy array of length 3 corresponding to the "
                         "operands A, B, and C of type 'matrix_qualifiers_dtype'.")
    if qualifiers[2]["is_conjugate"]:
        raise ValueError("The conjugate flag is currently not supported for operand C.")
    return tuple(_conjugated(x) if q and "complex" in dtype_name(x) else x
                 for q, x in ((qualifiers[0]["is_conjugate"], a), (qualifiers[1]["is_conjugate"], b)))


def _conjugated(operand):
    conjugate = operand.conj()
    return conjugate.resolve_conj() if hasattr(conjugate, "resolve_conj") else conjugate


def _used_inputs(epilog, epilog_inputs, logger):
    """``epilog_inputs``, or None (with nvmath's warning) when there is no epilog to use them."""
    if epilog is None and epilog_inputs:
        logger.warning(f"Matmul: The provided epilog inputs {epilog_inputs.keys()} are ignored since an epilog is not "
                       f"specified.")
        return None
    return epilog_inputs


def _device_memory(device_id):
    with _runtime.device_scope(device_id):
        free, total = _runtime.call("cudaMemGetInfo")
    return int(total)


class Matmul:
    """nvmath's stateful matrix multiplication ``epilog(alpha * a @ b + beta * c)`` over :class:`mathpy.Matmul`."""

    def __init__(self, a, b, /, c=None, *, alpha=None, beta=None, qualifiers=None, quantization_scales=None,
                 options=None, stream=None):
        options = check_or_create_options(MatmulOptions, options, "Matrix multiplication options")
        self.options, self.logger = options, object_logger(options.logger)
        self._translated = t = _Call(a, b, c, alpha, beta, qualifiers, quantization_scales, options, self.logger)
        self.package = operand_package(a)
        self.inplace = options.inplace
        self._mm = _NativeMatmul(t.a, t.b, t.c, alpha=t.alpha, beta=t.beta, options=t.options,
                                 execution=t.execution, stream=stream, quantization_scales=t.scales)
        self._algorithms = {}  # mathpy algorithm -> its Algorithm (the same object every time it is handed out)
        self._preferences = None  # plan()'s
        self._freed = False
        self.logger.info("The Matmul operation has been created.")

    def _wrap(self, natives):
        return tuple(self._algorithms.setdefault(n, Algorithm(n)) for n in natives)

    @property
    def algorithms(self):
        """The planned candidates (best first; after :meth:`autotune`, fastest first)."""
        return self._wrap(self._mm.algorithms)

    def plan(self, *, preferences=None, algorithms=None, epilog=None, epilog_inputs=None, stream=None):
        """Plan the product (with an epilog and its inputs); returns the candidate algorithms, best first."""
        self._check_valid()
        epilog_inputs = _aux_scale(_used_inputs(epilog, epilog_inputs, self.logger), preferences, required=True)
        self._preferences = preferences  # (its aux_type decides whether reset_operands takes an aux scale)
        chosen = None if algorithms is None else [alg.native for alg in algorithms]
        natives = self._mm.plan(epilog=epilog, epilog_inputs=epilog_inputs,
                                preferences=self._translated.preferences(preferences), algorithms=chosen,
                                stream=stream)
        self.logger.info("The plan found %d suitable algorithms.", len(natives))
        return self._wrap(natives)

    def autotune(self, iterations=10, prune=None, release_workspace=False, stream=None):
        """Time the candidates on the current operands and order them fastest first (keep the ``prune`` fastest)."""
        self._check_valid()
        timings = self._mm.autotune(iterations, prune, release_workspace=release_workspace, stream=stream)
        self.logger.info("Autotuning: %s", timings)

    def execute(self, *, algorithm=None, release_workspace=False, stream=None):
        """Compute the product; returns the result, or ``(result, aux)`` when the epilog has outputs or
        ``result_amax`` was asked for."""
        self._check_valid()
        return self._mm.execute(stream=stream, algorithm=None if algorithm is None else algorithm.native,
                                release_workspace=release_workspace)

    def reset_operands(self, a=None, b=None, c=None, *, alpha=None, beta=None, quantization_scales=None,
                       epilog_inputs=None, stream=None):
        """Give new operands (same package, device, shapes, strides, dtypes) for the next :meth:`execute`; with no
        argument, release the operands instead (nvmath's rule: every operand must then be given again; nvmath also
        releases them when only ``quantization_scales`` is given, dropping the scales: here those are reset)."""
        self._check_valid()
        if all(v is None for v in (a, b, c, alpha, beta, epilog_inputs, quantization_scales)):
            self.release_operands()
            self.logger.info("The operands have been reset to None.")
            return
        for value in (a, b, c):
            if value is not None and operand_package(value) != self.package:
                raise TypeError(f"Library package mismatch: '{self.package}' => '{operand_package(value)}'")
        if quantization_scales is not None:
            scales = check_or_create_options(MatmulQuantizationScales, quantization_scales, "Scale factors")
            quantization_scales = {n: getattr(scales, n) for n in "abd" if getattr(scales, n) is not None}
        epilog_inputs = _aux_scale(epilog_inputs, self._preferences, required=False)
        self._mm.reset_operands(a=a, b=b, c=c, epilog_inputs=epilog_inputs, alpha=alpha, beta=beta,
                                quantization_scales=quantization_scales, stream=stream)

    reset_operands_unchecked = reset_operands

    def release_operands(self):
        """Drop the references to the operands; :meth:`reset_operands` must give them all again."""
        self._check_valid()
        self._mm.release_operands()

    def free(self):
        """Release the plan and its resources; idempotent."""
        self._freed = True
        self._mm.free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def _check_valid(self):
        if self._freed:
            raise InvalidPlanStateError("The Matmul object cannot be used after resources are free'd")


def matmul(a, b, /, c=None, *, alpha=None, beta=None, epilog=None, epilog_inputs=None, qualifiers=None,
           quantization_scales=None, options=None, preferences=None, algorithm=None, stream=None):
    """``epilog(alpha * a @ b + beta * c)`` with nvmath's rules (see :class:`Matmul`); returns the result, or
    ``(result, aux)`` when there are auxiliary outputs. Goes through :func:`mathpy.matmul` (its plan cache and
    prepared calls make a repeated call cheap), or a stateful plan when ``algorithm`` is given."""
    if algorithm is not None:
        with Matmul(a, b, c, alpha=alpha, beta=beta, qualifiers=qualifiers, quantization_scales=quantization_scales,
                    options=options, stream=stream) as mm:
            mm.plan(preferences=preferences, epilog=epilog, epilog_inputs=epilog_inputs, stream=stream,
                    algorithms=[algorithm])
            return mm.execute(stream=stream)
    options = check_or_create_options(MatmulOptions, options, "Matrix multiplication options")
    logger = object_logger(options.logger)
    t = _Call(a, b, c, alpha, beta, qualifiers, quantization_scales, options, logger)
    epilog_inputs = _aux_scale(_used_inputs(epilog, epilog_inputs, logger), preferences, required=True)
    return _native_matmul(t.a, t.b, t.c, alpha=t.alpha, beta=t.beta, epilog=epilog, epilog_inputs=epilog_inputs,
                          options=t.options, preferences=t.preferences(preferences), execution=t.execution,
                          stream=stream, quantization_scales=t.scales)
