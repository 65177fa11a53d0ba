"""What a device computes natively: decided by detection, never assumed."""
import torch


def cpu_has_native_bf16() -> bool:
    """True when this CPU computes bf16 natively (AVX512-BF16 or AMX, as oneDNN reports it);
    without it bf16 is emulated and several times slower than fp32."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN
        return False


def native_bf16(device: torch.device) -> bool:
    """True when `device` computes bf16 natively: a CUDA card with bf16 support, or a CPU
    with native bf16 (`cpu_has_native_bf16`)."""
    if device.type == 'cuda':
        return torch.cuda.is_bf16_supported()
    return device.type == 'cpu' and cpu_has_native_bf16()
