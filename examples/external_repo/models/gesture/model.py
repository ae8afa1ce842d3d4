"""A gesture classifier on 32 steps of 3-axis accelerometer data: two 1-D convolutions, global pooling, a linear layer."""
import math

import torch
from torch import nn


class GestureNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(3, 8, kernel_size=5, padding=2)
        self.conv2 = nn.Conv1d(8, 16, kernel_size=3, padding=1, stride=2)
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(16, 4)

    def forward(self, motion: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(motion))
        x = torch.relu(self.conv2(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def model() -> nn.Module:
    torch.manual_seed(0)
    return GestureNet().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.zeros(1, 3, 32),)


def calibration_data() -> torch.Tensor:
    """24 seeded recordings: a sine wave per axis with a random frequency and phase, plus noise."""
    gen = torch.Generator().manual_seed(1)
    t = torch.arange(32.0) / 32
    freq = 1 + 3 * torch.rand(24, 3, 1, generator=gen)
    phase = 2 * math.pi * torch.rand(24, 3, 1, generator=gen)
    waves = torch.sin(2 * math.pi * freq * t + phase) + 0.1 * torch.randn(24, 3, 32, generator=gen)
    return waves.reshape(24, 1, 3, 32)
