"""Your own model as a ddptop workload: a text classifier taking a dict batch, with a loss of its own.

    PYTHONPATH=examples ddptop run --models my_workload:make_workload

ddptop calls ``make_workload`` in every rank, moves the model to the rank's device, wraps it (DDP, ZeRO-1,
FSDP2) and times ``loss(net, batch).backward()`` plus the optimizer step on one batch from ``make_batch``.
"""

import torch
from torch import nn

from ddptop.protocol.workload import Workload

VOCAB, CLASSES = 8192, 4


class TextClassifier(nn.Module):
    def __init__(self, dim: int = 128, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        layer = nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=4 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.encoder(self.embed(input_ids), src_key_padding_mask=attention_mask == 0)
        keep = attention_mask.unsqueeze(-1).float()
        return self.head((x * keep).sum(1) / keep.sum(1))  # the mean over the real tokens


def make_workload(seq_len: int = 64) -> Workload:
    def make_batch(n: int, device: torch.device) -> dict[str, torch.Tensor]:
        lengths = torch.randint(seq_len // 2, seq_len + 1, (n, 1), device=device)  # padded to seq_len
        return {"input_ids": torch.randint(0, VOCAB, (n, seq_len), device=device),
                "attention_mask": (torch.arange(seq_len, device=device) < lengths).long(),
                "labels": torch.randint(0, CLASSES, (n,), device=device)}

    def loss(net: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = net(batch["input_ids"], batch["attention_mask"])
        return nn.functional.cross_entropy(logits, batch["labels"], label_smoothing=0.1)

    return Workload(TextClassifier(), make_batch, loss, tokens=lambda batch: int(batch["attention_mask"].sum()))
