"""A task for a pool worker that reports its torch threads (importable by a spawned worker, unlike a test's own)."""


def torch_threads() -> int:
    """torch's intra-op threads in this process (torch imported here if it was not yet)."""
    import torch

    return torch.get_num_threads()
