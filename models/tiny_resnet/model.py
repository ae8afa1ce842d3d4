"""A tiny ResNet: conv-bn-relu stem, one residual block, global average pool, linear classifier."""
import torch
from torch import nn


def _conv_bn(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout))


class TinyResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = _conv_bn(3, 8)
        self.block1 = _conv_bn(8, 8)
        self.block2 = _conv_bn(8, 8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(image))
        y = torch.relu(self.block1(x))
        y = self.block2(y)
        x = torch.relu(x + y)
        x = torch.flatten(self.pool(x), 1)
        return self.fc(x)


def model() -> nn.Module:
    torch.manual_seed(0)
    net = TinyResNet()
    with torch.no_grad():  # running statistics as training would leave them, not the identity defaults
        for bn in (m for m in net.modules() if isinstance(m, nn.BatchNorm2d)):
            bn.running_mean.copy_(0.2 * torch.randn(bn.num_features))
            bn.running_var.copy_(0.5 + torch.rand(bn.num_features))
            bn.weight.copy_(1.0 + 0.2 * torch.randn(bn.num_features))
            bn.bias.copy_(0.1 * torch.randn(bn.num_features))
    return net.eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.zeros(1, 3, 16, 16),)


def calibration_data() -> torch.Tensor:
    """32 seeded RGB images: smooth colour gradients plus noise, values in [0, 1)."""
    gen = torch.Generator().manual_seed(1)
    ramp = torch.linspace(0, 1, 16)
    tilt = torch.rand(32, 3, 2, generator=gen)
    images = tilt[..., 0, None, None] * ramp[:, None] + tilt[..., 1, None, None] * ramp[None, :]
    images = 0.5 * images + 0.2 * torch.rand(32, 3, 16, 16, generator=gen)
    return images.clamp(0, 1).reshape(32, 1, 3, 16, 16)
