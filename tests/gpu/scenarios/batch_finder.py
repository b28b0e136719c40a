"""Lightning's batch-size finder (Tuner.scale_batch_size, binsearch) on ResNet-50: a program
that catches OOMs on purpose (issue 21). The images are made on the GPU in the step, so the
data loader costs nothing. Prints `result: batch size N` and the OOMs PyTorch raised."""

import os
import sys

import torch
import torch.nn.functional as F
import torchvision
import lightning.pytorch as pl
from lightning.pytorch.tuner import Tuner

SIDE = 224


class Labels(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        return i % 1000


class ResNet(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.batch_size = 2
        self.net = torchvision.models.resnet50()

    def train_dataloader(self):
        return torch.utils.data.DataLoader(Labels(), batch_size=self.batch_size)

    def training_step(self, labels, _):
        images = torch.randn(labels.shape[0], 3, SIDE, SIDE, device=self.device)
        return F.cross_entropy(self.net(images), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    torch.manual_seed(0)
    root = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
    trainer = pl.Trainer(accelerator="gpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=root)
    found = Tuner(trainer).scale_batch_size(ResNet(), mode="binsearch")
    print(f"ooms caught: {torch.cuda.memory_stats().get('num_ooms', 0)}")
    print(f"result: batch size {found}")


if __name__ == "__main__":
    main()
