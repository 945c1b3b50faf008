"""preflight: is this cluster ready to train? Pre-launch checks for Ascend NPU and NVIDIA GPU clusters."""

__version__ = "0.1.0"
