"""A classifier trained with Lightning's Trainer, as its users write one for torchrun: the Trainer reads the
launch's environment, makes the process group and wraps the model in DDP; random data, nothing downloaded.

    torchrun --nproc-per-node 2 examples/lightning_train.py --accumulate 2
    ddptop run -- examples/lightning_train.py --accumulate 2
"""

import argparse
import os

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self, features, hidden):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))

    def training_step(self, batch, _index):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()
    features = 128
    examples = args.batch_size * args.accumulate * args.steps * 2
    data = TensorDataset(torch.randn(examples, features), torch.randint(0, 10, (examples,)))
    trainer = L.Trainer(accelerator="auto", devices=int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
                        num_nodes=int(os.environ.get("WORLD_SIZE", 1)) // int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
                        strategy="ddp", max_steps=args.steps, accumulate_grad_batches=args.accumulate,
                        enable_checkpointing=False, logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Classifier(features, args.hidden), DataLoader(data, batch_size=args.batch_size, shuffle=True))


if __name__ == "__main__":
    main()
