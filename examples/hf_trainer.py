"""A text classifier trained with the Hugging Face Trainer, as its users write one: a tiny BERT made from a config
(nothing downloaded) on random tokens labelled by their first, the Trainer choosing its device, its process group
and its DDP.

    torchrun --nproc-per-node 2 examples/hf_trainer.py --accumulate 2
    ddptop run -- examples/hf_trainer.py --accumulate 2
"""

import argparse
import tempfile

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    """Random tokens labelled by their first (a token in the vocabulary's lower half or not): there is something
    to learn, so the gradient has a direction the noise can be measured against."""

    def __init__(self, length, seq_len, vocab):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (length, seq_len), generator=generator)
        self.labels = (self.ids[:, 0] < vocab // 2).long()

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "attention_mask": torch.ones_like(self.ids[index]),
                "labels": self.labels[index]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    args = parser.parse_args()
    config = BertConfig(vocab_size=1000, hidden_size=args.hidden, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=args.hidden * 2, max_position_embeddings=args.seq_len, num_labels=2)
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(
            output_dir=out, per_device_train_batch_size=args.batch_size, gradient_accumulation_steps=args.accumulate,
            max_steps=args.steps, learning_rate=1e-4, logging_steps=50, save_strategy="no", report_to=[],
            dataloader_num_workers=0, use_cpu=not torch.cuda.is_available(), disable_tqdm=True)
        data = RandomTokens(args.batch_size * args.accumulate * args.steps * 2, args.seq_len, config.vocab_size)
        Trainer(model=BertForSequenceClassification(config), args=training, train_dataset=data).train()


if __name__ == "__main__":
    main()
