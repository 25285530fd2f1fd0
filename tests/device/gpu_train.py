# SPDX-License-Identifier: Apache-2.0
"""A small real training job for the device check (gpu_check.sh): a PyTorch model on one CUDA
GPU, gradients all-reduced through NCCL (a one-rank process group: the real ncclAllReduce path),
named Python functions the profile must show, and its own throughput measurement.

    gpu_train.py SECONDS [--no-nccl]

Prints one JSON line: steps, seconds, steps_per_s, and each phase's share of the step as the
script measures it (time.perf_counter around prep_batch, forward/backward, all-reduce).
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x + self.fc2(torch.relu(self.fc1(x))))


class CheckNet(nn.Module):
    def __init__(self, width=1024, depth=6):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


PREP_ITERS = int(os.environ.get("GPU_TRAIN_PREP_ITERS", "150"))  # 0: a GPU-bound job


def prep_batch(batch, width):
    """CPU-side data preparation: the Python function the profile must name."""
    rows = []
    for i in range(batch if PREP_ITERS else 0):
        s = 0.0
        for j in range(PREP_ITERS):
            s += (i * j) % 7
        rows.append(s)
    x = torch.randn(batch, width)
    if rows:
        x[:, 0] = torch.tensor(rows)
    return x.pin_memory().cuda(non_blocking=True), torch.randint(0, 10, (batch,)).cuda()


def allreduce_grads(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)


def train_step(model, opt, x, y, use_nccl):
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    t = time.perf_counter()
    if use_nccl:
        allreduce_grads(model)
    opt.step()
    return loss, time.perf_counter() - t


def train_loop(seconds, use_nccl):
    width, batch = 1024, 512
    model = CheckNet(width).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(5):  # warm-up: CUDA context, cuBLAS handles, NCCL communicator
        x, y = prep_batch(batch, width)
        train_step(model, opt, x, y, use_nccl)
    torch.cuda.synchronize()
    prep = other = reduce_t = 0.0
    steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        x, y = prep_batch(batch, width)
        t1 = time.perf_counter()
        loss, r = train_step(model, opt, x, y, use_nccl)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        prep += t1 - t0
        other += t2 - t1
        reduce_t += r
        steps += 1
    wall = time.perf_counter() - start
    return {"steps": steps, "seconds": wall, "steps_per_s": steps / wall,
            "prep_batch_share": prep / wall, "train_step_share": other / wall,
            "allreduce_share": reduce_t / wall, "loss": float(loss)}


def main():
    seconds = float(sys.argv[1])
    use_nccl = "--no-nccl" not in sys.argv
    if use_nccl:
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%s" % os.environ.get(
            "MASTER_PORT", "29511"), rank=0, world_size=1)
    out = train_loop(seconds, use_nccl)
    out["nccl"] = use_nccl
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version())) if use_nccl else None
    print(json.dumps(out), flush=True)
    if use_nccl:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
