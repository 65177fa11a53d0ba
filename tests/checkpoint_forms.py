"""Checkpoints in the form PeCo's launcher wrote before checkpoints were plain data: the
message hub's HistoryBuffers pickled as HistoryBuffer objects (less mmengine's bound
statistics methods, which no safe unpickler rebuilds). The gate still reads them;
tools/plain_checkpoint.py rewrites them."""
import torch


class OldFormHistoryBuffer:
    """Pickles as a HistoryBuffer with `buf`'s data and no statistics methods."""

    def __init__(self, buf) -> None:
        self.cls = type(buf)
        self.state = {k: v for k, v in vars(buf).items() if k != 'statistics_methods'}

    def __reduce_ex__(self, protocol: int) -> tuple:
        return self.cls, (), self.state  # HistoryBuffer(), then its __setstate__(state)


def old_form_hub(hub_state: dict) -> dict:
    """A MessageHub.state_dict() with its buffers in the old form (in place)."""
    scalars = hub_state['log_scalars']
    for key, buf in scalars.items():
        scalars[key] = OldFormHistoryBuffer(buf)
    return hub_state


def save_old_form(path, hub, **ckpt) -> None:
    """A checkpoint in the old form at `path`: `ckpt` plus `hub`'s state."""
    torch.save({**ckpt, 'message_hub': old_form_hub(hub.state_dict())}, path)
