"""nvmath's ``Matmul`` and ``matmul`` over :class:`mathpy.Matmul` / :func:`mathpy.matmul`.

nvmath-python's rules, where mathpy's own API differs: ``a`` and ``b`` positional-only, the rest keyword-only; ``c``
at least 2-D; ``beta`` required with ``c`` (and ignored, with a warning, without it); with ``c`` and no
``result_type`` the result has ``c``'s dtype; host operands run on the GPU ``options.device_id`` (on the CPU engine
when the machine has no GPU); float8 operands need ``quantization_scales``; ``plan()`` returns a tuple of
:class:`Algorithm`; ``autotune(iterations=10, prune=None)`` returns None; ``reset_operands`` is keyword-only and a
package change is a TypeError.
"""

from ..... import _cuda
from .....bindings._types import CudaDataType, cuda_data_type, to_dtype
from .....bindings.cublaslt import MatmulComputeType
from ..... import matmul as _native_matmul
from .....host.matmul import Matmul as _NativeMatmul
from .....host.matmul import MatmulOptions as _NativeOptions
from .....host.matmul import MatmulPlanPreferences as _NativePreferences
from ..._common import check_or_create_options, dtype_name, object_logger, operand_package
from ._algorithm import Algorithm
from ._options import (MatmulNumericalImplFlags, MatmulOptions, MatmulPlanPreferences, MatmulQuantizationScales,
                       MatmulReductionScheme, matrix_qualifiers_dtype, memory_limit_bytes)

__all__ = ["Matmul", "matmul"]

_FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
_SUPPORTED = (*_FLOAT8, "bfloat16", "float16", "float32", "float64", "complex64", "complex128")
_C = CudaDataType
#: nvmath's default compute type for a scale type, as mathpy's compute type names.
_COMPUTE_FOR_SCALE = {_C.CUDA_R_16F: "16F", _C.CUDA_R_16BF: "32F", _C.CUDA_R_32F: "32F", _C.CUDA_C_32F: "32F",
                      _C.CUDA_R_64F: "64F", _C.CUDA_C_64F: "64F"}
_COMPUTE_NAMES = ("16F", "32F", "32F_FAST_TF32", "32F_FAST_16F", "32F_FAST_16BF", "64F")


def _compute_name(compute_type):
    name = MatmulComputeType(compute_type).name.removeprefix("COMPUTE_")
    if name not in _COMPUTE_NAMES:
        raise ValueError(f"Unsupported compute type. The compute type '{compute_type!r}' is not supported by "
                         f"mathpy's matmul; supported are {['COMPUTE_' + n for n in _COMPUTE_NAMES]}")
    return name


def _check_dtypes(a_name, b_name, c_name):
    for operand, name in (("A", a_name), ("B", b_name), ("C", c_name)):
        if name is not None and name not in _SUPPORTED:
            raise ValueError(f"The dtype of operand {operand} ({name}) is not supported.")
    if (a_name != b_name and not (a_name in _FLOAT8 and b_name in _FLOAT8)) or a_name == b_name == "float8_e5m2":
        raise ValueError(f"Unsupported combination of dtypes for operands A {a_name} and B {b_name}.")


def _float8_scales(scales, d_is_float8, has_c, logger, float8):
    """(a_scale, b_scale, d_scale) for mathpy from nvmath's quantization_scales (numbers only)."""
    if not float8:
        if scales is not None:
            logger.warning("Matmul: The provided scales are ignored, since they are only applicable to "
                           "narrow-precision (FP8 and lower) operations.")
        return None, None, None
    if scales is None:
        raise ValueError("Scales are required for narrow-precision (FP8 and lower) operations. Please set "
                         "`quantization_scales` argument.")
    scales = check_or_create_options(MatmulQuantizationScales, scales, "Scale factors")
    if scales.c is not None:
        raise ValueError("Quantization scaling is not supported for C when it is not a narrow-precision (FP8 and "
                         "lower) type.")
    if scales.d is not None and not d_is_float8:
        raise ValueError("Quantization scaling is not supported for D when it is not a narrow-precision (FP8 and "
                         "lower) type.")
    for name in ("a", "b", "d") if d_is_float8 else ("a", "b"):
        value = getattr(scales, name)
        if value is None:
            raise ValueError(f"Scale for {name.upper()} is not specified")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise NotImplementedError(f"quantization_scales.{name} given as a tensor: mathpy takes float8 scales as "
                                      f"numbers")
    return scales.a, scales.b, scales.d


def _conjugated(operand):
    """``operand``'s complex conjugate in its own package (nvmath's is_conjugate qualifier)."""
    conjugate = operand.conj()
    return conjugate.resolve_conj() if hasattr(conjugate, "resolve_conj") else conjugate


class Matmul:
    """nvmath's stateful matrix multiplication ``epilog(alpha * a @ b + beta * c)`` over :class:`mathpy.Matmul`."""

    def __init__(self, a, b, /, c=None, *, alpha=None, beta=None, qualifiers=None, quantization_scales=None,
                 options=None, stream=None):
        options = check_or_create_options(MatmulOptions, options, "Matrix multiplication options")
        if c is None and options.inplace:
            raise ValueError("The operation cannot be inplace if operand C is not provided.")
        self.options, self.logger = options, object_logger(options.logger)
        a_name, b_name = dtype_name(a), dtype_name(b)
        c_name = None if c is None else dtype_name(c)
        _check_dtypes(a_name, b_name, c_name)
        if c is not None and len(c.shape) < 2:
            raise ValueError("In order to avoid broadcasting behavior ambiguity, `c` must be at least 2-D. Use a "
                             "singleton dimension to convert your input array to 2-D.")
        if c is not None and beta is None:
            raise ValueError("A value for beta must be provided if operand C is provided.")
        if c is None and beta is not None:
            self.logger.warning(f"Matmul: The provided beta value {beta} is ignored since operand C is not "
                                f"specified.")
            beta = None
        a, b = self._qualified(a, b, qualifiers)
        for name in ("inplace", "result_amax", "allocator"):
            if getattr(options, name):
                raise NotImplementedError(f"MatmulOptions.{name}: not available in mathpy's matmul yet")
        if options.block_scaling:
            raise NotImplementedError("MatmulOptions.block_scaling (MXFP8) needs a Blackwell GPU (compute capability "
                                      ">= 10.0) and is not implemented by mathpy's matmul")
        if options.sm_count_target:
            raise NotImplementedError("MatmulOptions.sm_count_target: not available in mathpy's matmul yet")

        float8 = a_name in _FLOAT8
        if options.result_type is not None:
            result = to_dtype(options.result_type)
        elif c_name is not None and c_name != a_name:
            result = to_dtype(cuda_data_type(c_name))  # nvmath: the result takes C's dtype
        else:
            result = None
        d_is_float8 = (result is None and float8) or (result is not None and result.name in _FLOAT8)
        a_scale, b_scale, d_scale = _float8_scales(quantization_scales, d_is_float8, c is not None, self.logger,
                                                   float8)
        compute = None
        if options.compute_type is not None:
            compute = _compute_name(options.compute_type)
        elif options.scale_type is not None:
            compute = _COMPUTE_FOR_SCALE.get(CudaDataType(options.scale_type))
            if compute is None:
                raise ValueError(f"Unsupported scale type. The data type '{options.scale_type!r}' is currently not "
                                 f"supported.")
        native = _NativeOptions(compute_type=compute, result_type=result,
                                scale_type=None if options.scale_type is None else to_dtype(options.scale_type),
                                a_scale=a_scale, b_scale=b_scale, d_scale=d_scale, blocking=options.blocking,
                                fast_accumulation=bool(options.fast_accumulation))
        self.package = operand_package(a)
        on_host = getattr(a, "device", None) is None or str(getattr(a, "device", "cpu")) == "cpu"
        execution = None
        if on_host and self.package in ("numpy", "torch"):  # nvmath runs host operands on a GPU
            execution = {"name": "cuda", "device_id": options.device_id} if _cuda.is_available() else "cpu"
        self._max_workspace = None
        if options.memory_limit != r"80%":
            device_bytes = _device_memory(options.device_id) if _cuda.is_available() else None
            self._max_workspace = memory_limit_bytes(options.memory_limit, device_bytes)
        self._mm = _NativeMatmul(a, b, c, alpha=1 if alpha is None else alpha, beta=beta, options=native,
                                 execution=execution, stream=stream)
        self._algorithms = {}  # mathpy algorithm -> its Algorithm (the same object every time it is handed out)
        self._freed = False
        self.logger.info("The Matmul operation has been created.")

    @staticmethod
    def _qualified(a, b, qualifiers):
        if qualifiers is None:
            return a, b
        qualifiers = __import__("numpy").asarray(qualifiers)
        if qualifiers.dtype != matrix_qualifiers_dtype or qualifiers.shape != (3,):
            raise ValueError("The qualifiers must be specified as a NumPy array of length 3 corresponding to the "
                             "operands A, B, and C of type 'matrix_qualifiers_dtype'.")
        if qualifiers[2]["is_conjugate"]:
            raise ValueError("The conjugate flag is currently not supported for operand C.")
        conj_a, conj_b = (bool(q) and "complex" in dtype_name(x) for q, x in
                          ((qualifiers[0]["is_conjugate"], a), (qualifiers[1]["is_conjugate"], b)))
        return (_conjugated(a) if conj_a else a), (_conjugated(b) if conj_b else b)

    def _wrap(self, natives):
        return tuple(self._algorithms.setdefault(n, Algorithm(n)) for n in natives)

    @property
    def algorithms(self):
        """The planned candidates (best first; after :meth:`autotune`, fastest first)."""
        return self._wrap(self._mm.algorithms)

    def plan(self, *, preferences=None, algorithms=None, epilog=None, epilog_inputs=None, stream=None):
        """Plan the product (with an epilog and its inputs); returns the candidate algorithms, best first."""
        self._check_valid()
        preferences = check_or_create_options(MatmulPlanPreferences, preferences,
                                              "Matrix multiplication plan preferences")
        if (preferences.reduction_scheme_mask != MatmulReductionScheme.MASK or preferences.max_waves_count or
                preferences.numerical_impl_mask != MatmulNumericalImplFlags.ALL):
            raise NotImplementedError("MatmulPlanPreferences reduction_scheme_mask / max_waves_count / "
                                      "numerical_impl_mask: mathpy plans with cuBLASLt's defaults")
        if preferences.epilog.aux_type is not None or preferences.epilog.aux_amax:
            raise NotImplementedError("MatmulEpilogPreferences aux_type / aux_amax: not available in mathpy's "
                                      "matmul yet")
        if epilog is None and epilog_inputs:
            self.logger.warning(f"Matmul: The provided epilog inputs {epilog_inputs.keys()} are ignored since an "
                                f"epilog is not specified.")
            epilog_inputs = None
        if epilog_inputs and "aux_quantization_scale" in epilog_inputs:
            raise NotImplementedError("epilog input 'aux_quantization_scale' (float8 epilog aux): not available in "
                                      "mathpy's matmul yet")
        native = _NativePreferences(limit=preferences.limit,
                                    **({} if self._max_workspace is None else
                                       {"max_workspace_bytes": self._max_workspace}))
        chosen = None if algorithms is None else [alg.native for alg in algorithms]
        natives = self._mm.plan(epilog=epilog, epilog_inputs=epilog_inputs, preferences=native, algorithms=chosen)
        self.logger.info("The plan found %d suitable algorithms.", len(natives))
        return self._wrap(natives)

    def autotune(self, iterations=10, prune=None, release_workspace=False, stream=None):
        """Time the candidates on the current operands and order them fastest first."""
        self._check_valid()
        if prune is not None:
            raise NotImplementedError("autotune(prune=...): not available in mathpy's matmul yet")
        timings = self._mm.autotune(iterations)
        self.logger.info("Autotuning: %s", timings)

    def execute(self, *, algorithm=None, release_workspace=False, stream=None):
        """Compute the product; returns the result, or ``(result, aux)`` when the epilog has outputs."""
        self._check_valid()
        if algorithm is not None:
            raise NotImplementedError("execute(algorithm=...): not available in mathpy's matmul yet")
        return self._mm.execute(stream=stream)

    def reset_operands(self, *, a=None, b=None, c=None, alpha=None, beta=None, quantization_scales=None,
                       epilog_inputs=None, stream=None):
        """Give new operands (same package, device, shapes, strides, dtypes) for the next :meth:`execute`."""
        self._check_valid()
        given = {"a": a, "b": b, "c": c}
        if all(v is None for v in (a, b, c, alpha, beta, quantization_scales, epilog_inputs)):
            raise ValueError("reset_operands() needs at least one operand to reset.")
        for name, value in given.items():
            if value is not None and operand_package(value) != self.package:
                raise TypeError(f"Library package mismatch: '{self.package}' => '{operand_package(value)}'")
        if alpha is not None or beta is not None or quantization_scales is not None:
            raise NotImplementedError("reset_operands(alpha=, beta=, quantization_scales=): not available in mathpy's "
                                      "matmul yet")
        self._mm.reset_operands(a=a, b=b, c=c, epilog_inputs=epilog_inputs)

    reset_operands_unchecked = reset_operands

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
            from ..... import InvalidPlanStateError
            raise InvalidPlanStateError("The Matmul object cannot be used after resources are free'd")


def _device_memory(device_id):
    from cuda.bindings import runtime
    status, free, total = runtime.cudaMemGetInfo()
    return int(total)


def matmul(a, b, /, c=None, *, alpha=None, beta=None, epilog=None, epilog_inputs=None, qualifiers=None,
           quantization_scales=None, options=None, preferences=None, algorithm=None, stream=None):
    """``epilog(alpha * a @ b + beta * c)`` with nvmath's rules (see :class:`Matmul`); returns the result, or
    ``(result, aux)`` when the epilog has outputs. A call without options, preferences, qualifiers, scales or
    algorithm goes straight to :func:`mathpy.matmul` (its plan cache makes a repeated call cheap)."""
    plain = options is None and preferences is None and qualifiers is None and quantization_scales is None and \
        algorithm is None
    if plain and (c is None or beta is not None):
        on_device = getattr(a, "device", None) is not None and str(getattr(a, "device", "cpu")) != "cpu"
        same = c is None or dtype_name(c) == dtype_name(a)
        names = dtype_name(a), dtype_name(b)
        plain_dtypes = names[0] == names[1] and names[0] in _SUPPORTED[2:]  # not float8: scales are required
        if on_device and same and plain_dtypes and (c is None or len(c.shape) >= 2):
            if epilog is None and epilog_inputs:
                epilog_inputs = None
            return _native_matmul(a, b, c, alpha=1 if alpha is None else alpha, beta=beta, epilog=epilog,
                                  epilog_inputs=epilog_inputs, stream=stream)
    with Matmul(a, b, c, alpha=alpha, beta=beta, qualifiers=qualifiers, quantization_scales=quantization_scales,
                options=options, stream=stream) as mm:
        mm.plan(preferences=preferences, epilog=epilog, epilog_inputs=epilog_inputs, stream=stream,
                algorithms=None if algorithm is None else [algorithm])
        return mm.execute(stream=stream)
