"""CPU seconds of one SmolLM2-135M MLP projection (576 -> 1,536) forward and backward on a (2, 1,500, 576) batch,
float32 against bfloat16 autocast, interleaved (issue 43, session 21). CPU time (all threads of the process)
rather than wall time, so that a loaded machine's share of the cores cancels out of the ratio. Example:
`python3 experiments/matmul_dtype_ab.py --threads 1`."""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description="float32 vs bfloat16 autocast, one linear layer, CPU seconds")
    parser.add_argument("--threads", type=int, default=2)
    torch.set_num_threads(parser.parse_args().threads)
    torch.manual_seed(0)
    linear = torch.nn.Linear(576, 1536, bias=False)
    inputs = torch.randn(2, 1500, 576, requires_grad=True)

    def run(bf16: bool) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = linear(inputs)
        out.float().sum().backward()

    seconds: dict[str, list[float]] = {"float32": [], "bfloat16": []}
    for round_ in range(6):  # round 0 warms up and is not counted
        for name in seconds:
            started = time.process_time()
            for _ in range(5):
                run(name == "bfloat16")
            if round_:
                seconds[name].append(time.process_time() - started)
    for name, runs in seconds.items():
        print(f"{name}: median {statistics.median(runs):.3f} CPU s per 5 forward+backward "
              f"({', '.join(f'{s:.3f}' for s in runs)})")
    print(f"cpu capability {torch.backends.cpu.get_cpu_capability()}")


if __name__ == "__main__":
    main()
