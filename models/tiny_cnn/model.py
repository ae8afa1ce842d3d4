"""A tiny CNN classifier on 16x16 single-channel images: the smallest model Kiln ships."""
import torch
from torch import nn


class TinyCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, padding=1)
        self.fc = nn.Linear(16 * 8 * 8, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(image)))
        x = torch.relu(self.conv2(x))
        x = torch.flatten(x, 1)
        return self.fc(x)


def model() -> nn.Module:
    torch.manual_seed(0)
    return TinyCNN().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.zeros(1, 1, 16, 16),)


def calibration_data() -> torch.Tensor:
    """32 seeded images in [0, 1): a bright blob on a noisy background, like the data it would see."""
    gen = torch.Generator().manual_seed(1)
    ys, xs = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    centers = torch.rand(32, 2, generator=gen) * 12 + 2
    blobs = torch.exp(-((ys - centers[:, 0, None, None]) ** 2 + (xs - centers[:, 1, None, None]) ** 2) / 8)
    noise = 0.1 * torch.rand(32, 16, 16, generator=gen)
    return (0.9 * blobs + noise).clamp(0, 1).reshape(32, 1, 1, 16, 16)
