"""Per-clock arithmetic width of a GPU's cores, and the FP32 peak that follows from its clock.

NVIDIA lanes per SM come from the arithmetic-instruction throughput table of the CUDA C++
Programming Guide ("32-bit floating-point add, multiply, multiply-add", results per clock
cycle per multiprocessor):
https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#arithmetic-instructions
AMD compute units have 64 FP32 lanes; where AMD's published FP32 figure counts dual-issue
(RDNA 3) or packed FP32 (CDNA 3), a CU does 128 FP32 FMAs per clock in that figure.

Dense FP16 tensor FLOPs per SM per clock (FP16 accumulate, no sparsity) follow from the
architecture whitepapers: Volta 8 tensor cores x 64 FMA; Turing, GA10x, Ada and GB20x
4 x 128 FMA (1,024 FLOPs); GA100 4 x 256 FMA; Hopper twice GA100; Blackwell B200 twice Hopper.
"""

from __future__ import annotations

from knowledge.records import Gpu

# CUDA compute capability -> FP32 FMA lanes per SM.
NVIDIA_FP32_LANES_PER_SM = {
    "3.0": 192,
    "3.7": 192,
    "5.2": 128,
    "6.0": 64,
    "6.1": 128,
    "7.0": 64,
    "7.5": 64,
    "8.0": 64,
    "8.6": 128,
    "8.9": 128,
    "9.0": 128,
    "10.0": 128,
    "10.3": 128,
    "12.0": 128,
}

# AMD architecture -> FP32 FMA lanes per CU *as counted in the catalog's fp32_tflops*.
# CDNA 1/2 records carry AMD's non-packed vector figure (MI210: 22.6, packed 45.3);
# AMD's CDNA 3 "FP32 vector" (MI300X: 163.4) and RDNA 3 figures count 2 per lane.
AMD_FP32_LANES_PER_CU = {
    "vega": 64,
    "rdna1": 64,
    "rdna2": 64,
    "rdna3": 128,
    "rdna4": 128,
    "cdna1": 64,
    "cdna2": 64,
    "cdna3": 128,
    "cdna4": 128,
}


# CUDA compute capability -> dense FP16 tensor FLOPs per SM per clock, FP16 accumulate.
NVIDIA_FP16_TENSOR_FLOPS_PER_SM = {
    "7.0": 1024,
    "7.5": 1024,
    "8.0": 2048,
    "8.6": 1024,
    "8.9": 1024,
    "9.0": 4096,
    "10.0": 8192,
    "10.3": 8192,
    "12.0": 1024,
}


def fp32_lanes_per_sm(gpu: Gpu) -> int:
    """FP32 FMA lanes per SM (AMD: per CU, as the vendor's FP32 figure counts them)."""
    if gpu.vendor == "amd":
        return AMD_FP32_LANES_PER_CU[gpu.architecture]
    if gpu.compute_capability is None:
        raise ValueError(f"{gpu.id}: no compute capability to look the lane count up by")
    return NVIDIA_FP32_LANES_PER_SM[gpu.compute_capability]


def fp32_tflops_at_boost(gpu: Gpu) -> float:
    """Dense FP32 peak, TFLOPS: 2 FLOPs per FMA x lanes per SM x SM-cycles per second."""
    return 2 * fp32_lanes_per_sm(gpu) * gpu.sm_cycles_per_s / 1e12


def fp16_tensor_tflops_at_boost(gpu: Gpu) -> float:
    """Dense FP16 tensor peak with FP16 accumulate at the boost clock, TFLOPS (NVIDIA only)."""
    if gpu.vendor != "nvidia" or gpu.compute_capability is None:
        raise ValueError(f"{gpu.id}: tensor FLOPs per clock are tabulated for NVIDIA GPUs only")
    return NVIDIA_FP16_TENSOR_FLOPS_PER_SM[gpu.compute_capability] * gpu.sm_cycles_per_s / 1e12
