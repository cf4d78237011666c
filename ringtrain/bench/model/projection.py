"""Project the scaling efficiency of a published setup from the fitted model (pure).

Horovod's documentation (benchmarks page, after Sergeev & Del Balso 2018): 128 servers with 4
Pascal GPUs each (512 GPUs), 25 Gb/s RoCE, TensorFlow; ResNet-101 scaled at about 90% and
VGG-16 at about 68%. The projection for one model:

    S      gradient bytes = 4 x parameters (float32)
    T_c    ring all-reduce of S over N workers in fused buffers of F bytes (Horovod's tensor
           fusion): ceil(S/F) * 2(N-1) a  +  2(N-1)/N S/B  +  (N-1)/N S g
           a and g from the fit on this machine; B the published link (goodput fraction applied)
    T_1    single-worker step time (measured by ``ringtrain bench train``)
    efficiency without overlap  = T_1 / (T_1 + T_c)
    efficiency, overlapped      = T_1 / (T_1 + max(0, T_c - overlap * T_1))

``overlap`` is the share of the step during which gradients are ready and Horovod can
all-reduce them behind the rest of the backward pass (about 2/3 of a step is backward).
``needed_step_time`` inverts the formula: the T_1 at which the model reproduces the published
efficiency (so it can be compared with what a given GPU achieves).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ringtrain.bench.model.costmodel import Params

GBIT = 1e9 / 8


@dataclass(frozen=True, slots=True)
class Setup:
    name: str
    workers: int
    servers: int
    link_Bps: float
    published: dict[str, float]


HOROVOD_DOCS = Setup(
    name="Horovod docs: 128 servers x 4 Pascal GPUs, 25 Gb/s RoCE",
    workers=512, servers=128, link_Bps=25 * GBIT,
    published={"resnet101": 0.90, "vgg16": 0.68},
)
PARAMS = {"resnet50": 25_636_712, "resnet101": 44_707_176, "vgg16": 138_357_544}


@dataclass(frozen=True, slots=True)
class Projection:
    model: str
    grad_bytes: float
    step_time_s: float
    comm_s: float
    efficiency_no_overlap: float
    efficiency_overlap: float
    published: float | None
    needed_step_time_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def comm_time(fit: Params, setup: Setup, grad_bytes: float, *, fusion_bytes: float,
              goodput: float) -> float:
    n = setup.workers
    calls = math.ceil(grad_bytes / fusion_bytes)
    bandwidth = setup.link_Bps * goodput
    return (calls * 2 * (n - 1) * fit.a + 2 * (n - 1) / n * grad_bytes / bandwidth
            + (n - 1) / n * grad_bytes * fit.g)


def project(fit: Params, setup: Setup, model: str, step_time_s: float, *,
            fusion_bytes: float = 64 * 2**20, goodput: float = 0.9,
            overlap: float = 2 / 3, params: int | None = None) -> Projection:
    grad = 4.0 * (params if params is not None else PARAMS[model])
    tc = comm_time(fit, setup, grad, fusion_bytes=fusion_bytes, goodput=goodput)
    plain = step_time_s / (step_time_s + tc)
    hidden = step_time_s / (step_time_s + max(0.0, tc - overlap * step_time_s))
    pub = setup.published.get(model)
    needed = tc * pub / (1.0 - pub) if pub is not None and pub < 1 else None
    return Projection(model, grad, step_time_s, tc, plain, hidden, pub, needed)
