"""The job itself: its checkpoint tree (ckpt), its launch environment (envgen) and the fixes for it (fix)."""
