"""torch.profiler with CUDA activity on a small training loop: prints how many GPU kernels it
recorded. The model allocates on the GPU before the profiler starts, so that an oomscope
subscriber (if any) already holds CUPTI when Kineto subscribes.
Usage: profiler_kernels.py"""
import torch
from torch.profiler import ProfilerActivity, profile

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(256, 1024, device="cuda")
# Warm-up outside the profiler: allocations (and oomscope's CUPTI start) happen here.
for _ in range(2):
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
torch.cuda.synchronize()

with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(5):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()

kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
print(f"result: kernels {len(kernels)}")
print(f"result: distinct kernels {len({e.name for e in kernels})}")
