"""Megatron-LM knowledge, pure: the checkpoint tree's layout (ckpt.py), read from a listing."""
