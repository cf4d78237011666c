"""Regenerate (or check) ``layer_costs.py`` from ``tf.keras.applications``.

    python -m ringtrain.bench.model.layer_costs_gen            # rewrite layer_costs.py
    python -m ringtrain.bench.model.layer_costs_gen --check    # exit 1 if it differs

The projection (gpu_projection.py) never imports TensorFlow: it reads the numbers this script
wrote. For each model, built with ``weights=None`` at its ImageNet input size, one *unit* per
layer with weights, in the model's topological (forward) order: a Conv2D or Dense layer
together with the BatchNormalization that reads its output (their gradients become ready
together). Each unit carries its trainable parameters and its forward FLOPs per image
(2 x multiply-adds: a conv is 2 kh kw Cin Cout Hout Wout, a dense layer 2 in out). Layers
without weights (activations, pooling, additions) are not counted: they are a few per cent
of the FLOPs of these models.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

TARGET = Path(__file__).with_name("layer_costs.py")

# model key -> (tf.keras.applications constructor, input side in pixels, per-layer table?)
MODELS = {
    "resnet101": ("ResNet101", 224, True),
    "inception3": ("InceptionV3", 299, True),
    "vgg16": ("VGG16", 224, True),
    "resnet50": ("ResNet50", 224, False),
    "resnet152": ("ResNet152", 224, False),
}

HEADER = '''"""Per-layer gradient sizes and FLOPs of the projected models (generated: do not edit).

Written by ``python -m ringtrain.bench.model.layer_costs_gen`` from tf.keras.applications
(TensorFlow {tf_version}); ``--check`` compares. Pure data. UNITS[model] lists, in forward
order, (layer, trainable parameters, forward FLOPs per image) for every layer with weights (a
batch norm is counted with the layer it follows); TOTALS[model] is (count_params(), trainable
parameters, forward FLOPs per image of the weighted layers, input side in pixels).
"""

from __future__ import annotations
'''


def _flops(layer: Any) -> int:
    kind = type(layer).__name__
    if kind == "Conv2D":
        kh, kw = layer.kernel_size
        cin = int(layer.input_shape[-1])
        _, h, w, cout = layer.output_shape
        return 2 * kh * kw * cin * int(cout) * int(h) * int(w)
    if kind == "Dense":
        return 2 * int(layer.input_shape[-1]) * int(layer.units)
    return 0


def _trainable(layer: Any) -> int:
    return sum(int(w.shape.num_elements()) for w in layer.trainable_weights)


def units(model: Any) -> list[tuple[str, int, int]]:
    """(name, trainable parameters, forward FLOPs per image), forward order."""
    out: dict[str, list[Any]] = {}
    for layer in model.layers:
        params = _trainable(layer)
        if not params:
            continue
        if type(layer).__name__ == "BatchNormalization":
            parents = layer._inbound_nodes[0].inbound_layers  # the Keras 2 graph
            parent = parents[0] if isinstance(parents, list) else parents
            if parent.name in out:
                out[parent.name][1] += params
                continue
        out[layer.name] = [layer.name, params, _flops(layer)]
    return [(n, p, f) for n, p, f in out.values()]


def render() -> str:
    import tensorflow as tf

    apps = tf.keras.applications
    lines = [HEADER.format(tf_version=tf.__version__),
             "UNITS: dict[str, tuple[tuple[str, int, int], ...]] = {"]
    totals = []
    for key, (ctor, side, per_layer) in MODELS.items():
        model = getattr(apps, ctor)(weights=None, input_shape=(side, side, 3))
        table = units(model)
        trainable = sum(p for _, p, _ in table)
        flops = sum(f for _, _, f in table)
        totals.append(f'    "{key}": ({model.count_params()}, {trainable}, {flops}, {side}),')
        if per_layer:
            lines.append(f'    "{key}": (')
            lines += [f'        ("{n}", {p}, {f}),' for n, p, f in table]
            lines.append("    ),")
        tf.keras.backend.clear_session()
    lines += ["}", "", "TOTALS: dict[str, tuple[int, int, int, int]] = {", *totals, "}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed file instead of writing it")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        # the header names the TensorFlow version: compare the data below it
        def body(t: str) -> str:
            return t.split("UNITS:", 1)[1]
        same = body(text) == body(TARGET.read_text())
        print(f"{TARGET.name}: {'matches' if same else 'DIFFERS from'} tf.keras.applications")
        return 0 if same else 1
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
