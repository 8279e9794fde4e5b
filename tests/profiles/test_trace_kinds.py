"""Kernel classification on real kernel names (from the HTA traces and common libraries)."""

from __future__ import annotations

import pytest

from profiles.trace.kinds import classify_copy, classify_kernel

NAMES = [
    # (name as in a real trace, kind, precision)
    # from this project's H200 traces (PyTorch 2.11, cuBLASLt and cuDNN 9.19)
    ("nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_bias_TNT", "tensor_gemm", "16-bit"),
    ("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_TNN", "tensor_gemm", "16-bit"),
    (
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x128x128_4x1x1_"
        "kernel0_0",
        "tensor_gemm",
        "16-bit",
    ),
    (
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass_80_"
        "tensorop_s1688gemm_128x128_32x3_nn_align4::Params)",
        "tensor_gemm",
        "tf32",
    ),
    (
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16"
        "_stage4_warpsize2x2x1_g1_tensor16x8x8",
        "convolution",
        "tf32",
    ),
    ("ampere_sgemm_128x64_nn", "simt_gemm", None),
    ("volta_sgemm_128x64_nn", "simt_gemm", None),
    ("volta_h884gemm_64x128_ldg8_nn", "tensor_gemm", "16-bit"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn", "tensor_gemm", "16-bit"),
    ("ampere_s16816gemm_128x128_ldg8_stages_32x3_nn", "tensor_gemm", "tf32"),
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1",
        "tensor_gemm",
        "16-bit",
    ),
    (
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(Params)",
        "tensor_gemm",
        "16-bit",
    ),
    (
        "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float>",
        "simt_gemm",
        None,
    ),
    ("cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "convolution", "fp32"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "communication", None),
    (
        "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "communication",
        None,
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1>>(int, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1>)",
        "elementwise",
        None,
    ),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, "
        "float, float const*, float const*, float const*, float*, float*, float*)",
        "reduction",
        None,
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
        "at::native::MeanOps<float, float>, unsigned int, float, 4>>(at::native::ReduceOp)",
        "reduction",
        None,
    ),
    (
        "void splitKreduce_kernel<float, float, float, float, true, false, false>"
        "(cublasSplitKParams<float>, float const*)",
        "reduction",
        None,
    ),
    (
        "void at::native::(anonymous namespace)::indexSelectLargeIndex<float, int, unsigned int, "
        "1, 1, -2, true>(at::cuda::detail::TensorInfo<float, unsigned int>)",
        "elementwise",
        None,
    ),
    (
        "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float>",
        "elementwise",
        None,
    ),
    ("triton_poi_fused_add_mul_0", "elementwise", None),
    ("triton_red_fused_sum_1", "reduction", None),
    (
        "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float "
        "const*)",
        "elementwise",
        None,
    ),
    ("some_custom_kernel_nobody_knows", "other", None),
]


class TestKernelKinds:
    @pytest.mark.parametrize(
        ("name", "kind", "precision"), NAMES, ids=[n[:40] for n, _, _ in NAMES]
    )
    def test_real_names(self, name: str, kind: str, precision: str | None) -> None:
        assert classify_kernel(name) == (kind, precision)

    @pytest.mark.parametrize(
        ("category", "name", "kind"),
        [
            ("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", "memcpy_h2d"),
            ("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", "memcpy_d2h"),
            ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", "memcpy_d2d"),
            ("gpu_memset", "Memset (Device)", "memset"),
        ],
    )
    def test_copies(self, category: str, name: str, kind: str) -> None:
        assert classify_copy(category, name) == kind
