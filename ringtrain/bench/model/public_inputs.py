"""The public inputs of the GPU projection, each with where it was published (pure).

Nothing here is measured on this machine or fitted to the efficiencies it is compared with.
Every number names its source (SOURCES); docs/BENCH.md explains each. Where a public input is
uncertain, ALTERNATIVES gives the other published value, and the report shows the prediction
across them instead of choosing the one that fits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ringtrain.bench.model import layer_costs
from ringtrain.bench.model.gpu_projection import Cluster, Workload

GBIT = 1e9 / 8
MIB = 2**20
US = 1e-6


@dataclass(frozen=True, slots=True)
class Source:
    key: str
    url: str
    gives: str


SOURCES = (
    Source("horovod-docs",
           "https://github.com/horovod/horovod/blob/master/docs/benchmarks.rst",
           "512 GPUs = 128 servers x 4 Pascal GPUs, RoCE 25 Gbit/s; 90% for Inception V3 and "
           "ResNet-101, 68% for VGG-16; tf_cnn_benchmarks --batch_size 64"),
    Source("horovod-readme-128",
           "https://github.com/alsrgv/horovod (README of the first release, 2017)",
           "128 GPUs = 32 servers x 4 Pascal GPUs, RoCE 25 Gbit/s; 90% for Inception V3 and "
           "ResNet-101, 79% for VGG-16"),
    Source("tf-benchmarks",
           "https://github.com/tensorflow/docs/blob/master/site/en/r1/guide/performance/"
           "benchmarks.md (tensorflow.org/performance/benchmarks, May 2017)",
           "1 x P100 (DGX-1), synthetic data, batch 64: InceptionV3 142, ResNet-50 219, "
           "ResNet-152 91.8, VGG16 154 img/s; batch 32: 128, 195, 82.7, 144 img/s"),
    Source("tf-cnn-defaults",
           "https://github.com/tensorflow/benchmarks/tree/master/scripts/tf_cnn_benchmarks/"
           "models (inception_model.py, resnet_model.py, vgg_model.py)",
           "default batch per GPU: 32 for inception3, 64 for the VGGs (the docs' ResNet-101 "
           "command passes --batch_size 64)"),
    Source("horovod-0.21",
           "https://github.com/horovod/horovod/releases/tag/v0.21.0",
           "'Changed default cycle time from 5ms to 1ms and fusion threshold from 64MB to "
           "128MB': 5 ms and 64 MiB before (and in 2017)"),
    Source("horovod-fusion",
           "https://github.com/horovod/horovod/blob/master/docs/tensor-fusion.rst",
           "tensors ready in a cycle are fused into buffers of up to HOROVOD_FUSION_THRESHOLD "
           "bytes, one all-reduce per buffer"),
    Source("nccl-tuning",
           "https://github.com/NVIDIA/nccl/blob/01afd20a77b5804e0ecf1042509dd9d20ebf9e93/"
           "src/graph/tuning.cc (NCCL 2.7-era table)",
           "ring/Simple latency model: 8.4 us per call + 9.6 us per network step, 5.7 us per "
           "PCIe step, 3.4 us per NVLink step; x1.9 for large multi-node all-reduce "
           "('plateau effect'); PCIe ~12 GB/s"),
    Source("nccl-nic",
           "https://github.com/NVIDIA/nccl-tests/issues/119 (NCCL maintainer)",
           "'24GB/s is the peak performance per 200G NIC (12 GB/s for 100G NICs)': 0.96 of "
           "the line rate"),
    Source("p100-whitepaper",
           "https://images.nvidia.com/content/pdf/tesla/whitepaper/"
           "pascal-architecture-whitepaper.pdf",
           "P100: NVLink 20 GB/s per direction per link; 10.6 TFLOPS FP32 (SXM2, DGX-1) "
           "against 9.3 TFLOPS (PCIe card)"),
    Source("keras-apps",
           "https://www.tensorflow.org/api_docs/python/tf/keras/applications "
           "(counted by layer_costs_gen.py)",
           "per-layer trainable parameters and forward FLOPs of ResNet101, InceptionV3, VGG16"),
    Source("backward-2x",
           "https://arxiv.org/abs/2001.08361 (Kaplan et al. 2020, section 2.1)",
           "a backward pass costs twice the forward FLOPs (C ~ 6N per token: 2N forward)"),
)

MODELS = ("resnet101", "inception3", "vgg16")
LABELS = {"resnet101": "ResNet-101", "inception3": "Inception V3", "vgg16": "VGG-16"}
# published scaling efficiency: GPUs -> model -> efficiency
PUBLISHED = {
    512: {"resnet101": 0.90, "inception3": 0.90, "vgg16": 0.68},
    128: {"resnet101": 0.90, "inception3": 0.90, "vgg16": 0.79},
}
PUBLISHED_SOURCE = {512: "horovod-docs", 128: "horovod-readme-128"}

# img/s of one P100 (DGX-1, synthetic data), tf-benchmarks: batch -> model -> img/s
P100_IMG_S = {64: {"inception3": 142.0, "resnet50": 219.0, "resnet152": 91.8, "vgg16": 154.0},
              32: {"inception3": 128.0, "resnet50": 195.0, "resnet152": 82.7, "vgg16": 144.0}}
BATCH = 64  # Horovod's benchmark command (horovod-docs), VGG's default (tf-cnn-defaults)
# the docs' sample output of that command: 16 GPUs, ResNet-101, batch 64
HOROVOD_SAMPLE_IMG_S = 1656.82 / 16
SXM2_OVER_PCIE = 10.6 / 9.3  # p100-whitepaper: FP32 peak, DGX-1's SXM2 over the PCIe card


def images_per_s(model: str, batch: int = BATCH) -> float:
    """One P100's rate. ResNet-101 is not on the TensorFlow page: its time per image is
    interpolated between ResNet-50's and ResNet-152's by forward FLOPs (layer_costs)."""
    table = P100_IMG_S[batch]
    if model in table:
        return table[model]
    if model != "resnet101":
        raise KeyError(model)
    flops = {m: layer_costs.TOTALS[m][2] for m in ("resnet50", "resnet101", "resnet152")}
    t50, t152 = 1.0 / table["resnet50"], 1.0 / table["resnet152"]
    share = (flops["resnet101"] - flops["resnet50"]) / (flops["resnet152"] - flops["resnet50"])
    return 1.0 / (t50 + share * (t152 - t50))


def workload(model: str, *, batch: int = BATCH, img_s: float | None = None) -> Workload:
    units = tuple((4.0 * params, float(flops)) for _, params, flops in layer_costs.UNITS[model])
    rate = img_s if img_s is not None else images_per_s(model, batch)
    return Workload(model=model, units=units, step_s=batch / rate)


def cluster(gpus: int = 512) -> Cluster:
    """The published setup with NCCL's own numbers: hierarchical all-reduce (4 GPUs on PCIe,
    then the servers' ring on RoCE), Horovod's 2017 defaults."""
    return Cluster(
        servers=gpus // 4, gpus_per_server=4,
        net_Bps=0.96 * 25 * GBIT, net_lat_s=9.6 * US,        # nccl-nic, nccl-tuning
        intra_Bps=12e9, intra_lat_s=5.7 * US,                # nccl-tuning (PCIe)
        call_lat_s=8.4 * US,                                  # nccl-tuning
        fusion_bytes=64 * MIB, cycle_s=5e-3,                  # horovod-0.21
        hierarchical=True, bwd_per_fwd=2.0)                   # backward-2x


# Public inputs with more than one published value: label -> (what changes, source).
# Each is applied to the base alone, and all of them together span the range.
ALTERNATIVES: dict[str, str] = {
    "pcie-p100": "PCIe P100 instead of DGX-1's SXM2: step time x 10.6/9.3 (p100-whitepaper)",
    "inception-batch-32": "Inception V3 at batch 32, tf_cnn_benchmarks' default for it (64 for "
                          "the others, as in the docs' command): TF's batch-32 rate",
    "resnet101-sample": "ResNet-101 at the docs' sample rate, 1656.82/16 img/s per GPU",
    "nvlink": "NVLink inside the server: 20 GB/s (p100-whitepaper), 3.4 us (nccl-tuning)",
    "flat-ring": "one flat NCCL ring over all GPUs instead of the hierarchical all-reduce",
    "plateau-1.9": "NCCL's x1.9 latency for large multi-node all-reduce (nccl-tuning)",
}


def apply(names: tuple[str, ...], model: str, gpus: int) -> tuple[Workload, Cluster]:
    """The base workload and cluster with the named alternatives applied."""
    batch = 32 if "inception-batch-32" in names and model == "inception3" else BATCH
    img_s = None
    if "resnet101-sample" in names and model == "resnet101":
        img_s = HOROVOD_SAMPLE_IMG_S
    w = workload(model, batch=batch, img_s=img_s)
    if "pcie-p100" in names:
        w = replace(w, step_s=w.step_s * SXM2_OVER_PCIE)
    c = cluster(gpus)
    if "nvlink" in names:
        c = replace(c, intra_Bps=20e9, intra_lat_s=3.4 * US)
    if "flat-ring" in names:
        c = replace(c, hierarchical=False)
    if "plateau-1.9" in names:
        c = replace(c, net_lat_s=c.net_lat_s * 1.9, intra_lat_s=c.intra_lat_s * 1.9,
                    call_lat_s=c.call_lat_s * 1.9)
    return w, c
