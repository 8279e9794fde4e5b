"""Vision models on the meta device: ResNet (v1.5), ViT, EfficientNet and a plain CNN stack.

Architectures follow torchvision's reference definitions, so parameter counts match the
published ones (ResNet-50 25,557,032; ViT-B/16 86,567,656; EfficientNet-B0 5,288,548).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

META = torch.device("meta")

RESNET_BLOCKS = {
    18: (2, 2, 2, 2),
    34: (3, 4, 6, 3),
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
}


@dataclass(frozen=True)
class ResNetSpec:
    depth: int = 50
    width: int = 64
    num_classes: int = 1000
    image_size: int = 224


@dataclass(frozen=True)
class ViTSpec:
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    ffn: int = 3072
    patch: int = 16
    image_size: int = 224
    num_classes: int = 1000
    channels: int = 3


@dataclass(frozen=True)
class EfficientNetSpec:
    width_mult: float = 1.0
    depth_mult: float = 1.0
    image_size: int = 224
    num_classes: int = 1000


@dataclass(frozen=True)
class CnnSpec:
    """A plain stack: per stage ``channels[i]`` output channels, ``blocks[i]`` conv-BN-ReLU
    layers of ``kernel``, the first with stride 2; then global pooling and a classifier."""

    channels: tuple[int, ...]
    blocks: tuple[int, ...]
    kernel: int = 3
    in_channels: int = 3
    image_size: int = 224
    num_classes: int = 1000


def _f(dtype: torch.dtype) -> dict[str, Any]:
    return {"device": META, "dtype": dtype}


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int, f: dict[str, Any]) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False, **f)
        self.bn1 = nn.BatchNorm2d(width, **f)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False, **f)
        self.bn2 = nn.BatchNorm2d(width, **f)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False, **f)
        self.bn3 = nn.BatchNorm2d(cout, **f)
        self.down: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False, **f), nn.BatchNorm2d(cout, **f)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.down(x) if self.down is not None else x))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int, f: dict[str, Any]) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride=stride, padding=1, bias=False, **f)
        self.bn1 = nn.BatchNorm2d(width, **f)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False, **f)
        self.bn2 = nn.BatchNorm2d(width, **f)
        self.down: nn.Module | None = None
        if stride != 1 or cin != width:
            self.down = nn.Sequential(
                nn.Conv2d(cin, width, 1, stride=stride, bias=False, **f), nn.BatchNorm2d(width, **f)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.down(x) if self.down is not None else x))


class ResNet(nn.Module):
    """ResNet v1.5 (stride on the 3x3 convolution), as torchvision and NVIDIA's DLE define it."""

    def __init__(self, spec: ResNetSpec, dtype: torch.dtype) -> None:
        super().__init__()
        f = _f(dtype)
        block = Bottleneck if spec.depth >= 50 else BasicBlock
        self.stem = nn.Sequential(
            nn.Conv2d(3, spec.width, 7, stride=2, padding=3, bias=False, **f),
            nn.BatchNorm2d(spec.width, **f),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        layers: list[nn.Module] = []
        cin = spec.width
        for stage, count in enumerate(RESNET_BLOCKS[spec.depth]):
            width = spec.width * 2**stage
            for i in range(count):
                layers.append(block(cin, width, 2 if (i == 0 and stage > 0) else 1, f))
                cin = width * block.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, spec.num_classes, **f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class ViT(nn.Module):
    """Vision Transformer (pre-norm encoder, class token, learned positions)."""

    wants_context = True  # attention follows the run's choice (flash or materialized)

    def __init__(self, spec: ViTSpec, dtype: torch.dtype) -> None:
        super().__init__()
        f = _f(dtype)
        self.spec = spec
        tokens = (spec.image_size // spec.patch) ** 2 + 1
        self.patch = nn.Conv2d(spec.channels, spec.hidden, spec.patch, stride=spec.patch, **f)
        self.cls = nn.Parameter(torch.empty(1, 1, spec.hidden, **f))
        self.pos = nn.Parameter(torch.empty(1, tokens, spec.hidden, **f))
        self.blocks = nn.ModuleList(_ViTBlock(spec, f) for _ in range(spec.layers))
        self.norm = nn.LayerNorm(spec.hidden, **f)
        self.head = nn.Linear(spec.hidden, spec.num_classes, **f)

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1) + self.pos
        for block in self.blocks:
            x = block(x, ctx.attend)
        return self.head(self.norm(x)[:, 0])


class _ViTBlock(nn.Module):
    def __init__(self, spec: ViTSpec, f: dict[str, Any]) -> None:
        super().__init__()
        self.heads = spec.heads
        self.norm1 = nn.LayerNorm(spec.hidden, **f)
        self.qkv = nn.Linear(spec.hidden, 3 * spec.hidden, **f)
        self.proj = nn.Linear(spec.hidden, spec.hidden, **f)
        self.norm2 = nn.LayerNorm(spec.hidden, **f)
        self.fc1 = nn.Linear(spec.hidden, spec.ffn, **f)
        self.fc2 = nn.Linear(spec.ffn, spec.hidden, **f)

    def forward(self, x: torch.Tensor, attend: Any) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        out = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), False, None)
        x = x + self.proj(out.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


# EfficientNet-B0 stages: (expand ratio, kernel, stride, in, out, repeats)
EFFNET_B0 = (
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)


def _divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class _MBConv(nn.Module):
    def __init__(
        self, cin: int, cout: int, expand: int, k: int, stride: int, f: dict[str, Any]
    ) -> None:
        super().__init__()
        mid = _divisible(cin * expand)
        squeeze = max(1, cin // 4)
        self.residual = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if mid != cin:
            layers += [nn.Conv2d(cin, mid, 1, bias=False, **f), nn.BatchNorm2d(mid, **f), nn.SiLU()]
        layers += [
            nn.Conv2d(mid, mid, k, stride, k // 2, groups=mid, bias=False, **f),
            nn.BatchNorm2d(mid, **f),
            nn.SiLU(),
        ]
        self.expand_dw = nn.Sequential(*layers)
        self.se_reduce = nn.Conv2d(mid, squeeze, 1, **f)
        self.se_expand = nn.Conv2d(squeeze, mid, 1, **f)
        self.project = nn.Sequential(
            nn.Conv2d(mid, cout, 1, bias=False, **f), nn.BatchNorm2d(cout, **f)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.expand_dw(x)
        s = torch.sigmoid(self.se_expand(F.silu(self.se_reduce(F.adaptive_avg_pool2d(h, 1)))))
        out = self.project(h * s)
        return out + x if self.residual else out


class EfficientNet(nn.Module):
    """EfficientNet (B0 stages scaled by width and depth multipliers), as torchvision builds it."""

    def __init__(self, spec: EfficientNetSpec, dtype: torch.dtype) -> None:
        super().__init__()
        f = _f(dtype)
        stem = _divisible(32 * spec.width_mult)
        layers: list[nn.Module] = [
            nn.Conv2d(3, stem, 3, 2, 1, bias=False, **f),
            nn.BatchNorm2d(stem, **f),
            nn.SiLU(),
        ]
        for expand, k, stride, base_in, base_out, repeats in EFFNET_B0:
            cin, cout = (
                _divisible(base_in * spec.width_mult),
                _divisible(base_out * spec.width_mult),
            )
            for i in range(math.ceil(repeats * spec.depth_mult)):
                layers.append(
                    _MBConv(cin if i == 0 else cout, cout, expand, k, stride if i == 0 else 1, f)
                )
        last_in = _divisible(320 * spec.width_mult)
        last = 4 * last_in
        layers += [
            nn.Conv2d(last_in, last, 1, bias=False, **f),
            nn.BatchNorm2d(last, **f),
            nn.SiLU(),
        ]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(last, spec.num_classes, **f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class Cnn(nn.Module):
    def __init__(self, spec: CnnSpec, dtype: torch.dtype) -> None:
        super().__init__()
        f = _f(dtype)
        layers: list[nn.Module] = []
        cin = spec.in_channels
        for cout, count in zip(spec.channels, spec.blocks, strict=True):
            for i in range(count):
                layers += [
                    nn.Conv2d(
                        cin,
                        cout,
                        spec.kernel,
                        2 if i == 0 else 1,
                        spec.kernel // 2,
                        bias=False,
                        **f,
                    ),
                    nn.BatchNorm2d(cout, **f),
                    nn.ReLU(),
                ]
                cin = cout
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(cin, spec.num_classes, **f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))
