"""The training ladder: base -> SFT -> SFT+ADRPO / SFT+GRPO on held-out users, with its report.

Run it as ``python -m train.ladder --config configs/train/ladder_smollm2_cpu.yaml`` (``make
ladder``); its results and history are in ``train/ladder/README.md``.
"""
