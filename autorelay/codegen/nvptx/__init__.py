"""NVIDIA GPUs: loop IR with bound loops -> NVPTX LLVM IR -> PTX (llvmlite, libdevice) -> the CUDA
driver (ctypes). `emulate` runs the same GPU-scheduled loop IR on the CPU, blocks and threads as
loops, so GPU schedules are checked where no GPU is."""

from autorelay.codegen.nvptx.backend import NVPTX_BACKEND, NVPTXBackend, PTXCode
from autorelay.codegen.nvptx.driver import NO_DRIVER, CudaDriverError, open_driver
from autorelay.codegen.nvptx.launch import Launch, launch_of

__all__ = ["NO_DRIVER", "NVPTX_BACKEND", "CudaDriverError", "Launch", "NVPTXBackend", "PTXCode",
           "launch_of", "open_driver"]
