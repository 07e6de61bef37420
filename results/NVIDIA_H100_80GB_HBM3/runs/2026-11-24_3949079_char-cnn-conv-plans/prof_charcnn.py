# Host path of one Char-CNN Triton forward (batch 512 bf16, inference): wall per back-to-back call, the
# same with a sync after each, and a cProfile of 100 calls.
import cProfile, pstats, time, torch
from models.char_cnn import CharCNN
torch.manual_seed(0)
m = CharCNN(backend="triton").cuda().to(torch.bfloat16).eval()
for batch in (128, 512):
    x = torch.randint(0, 70, (batch, 1014), dtype=torch.uint8, device="cuda")
    with torch.no_grad():
        for _ in range(20): m(x)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(100): m(x)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t) / 100
        t = time.perf_counter()
        for _ in range(100): m(x); torch.cuda.synchronize()
        sync = (time.perf_counter() - t) / 100
        # host only: time to enqueue, measured while the GPU is kept far behind? enqueue 100 after a long sleep kernel
        torch.cuda._sleep(int(2e9)); t = time.perf_counter()
        for _ in range(50): m(x)
        host = (time.perf_counter() - t) / 50
        torch.cuda.synchronize()
    print(f"batch {batch}: back-to-back {wall*1e3:.3f} ms, with sync {sync*1e3:.3f} ms, host enqueue only {host*1e3:.3f} ms")
x = torch.randint(0, 70, (512, 1014), dtype=torch.uint8, device="cuda")
pr = cProfile.Profile()
with torch.no_grad():
    torch.cuda._sleep(int(4e9)); pr.enable()
    for _ in range(50): m(x)
    pr.disable(); torch.cuda.synchronize()
st = pstats.Stats(pr); st.sort_stats("tottime").print_stats(30); st.sort_stats("cumulative").print_stats(30)
