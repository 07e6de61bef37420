"""Argmax agreement of the bf16 backends with eager fp32 on the 1,000 held-out AG News rows, per weights file,
and the reference's top-2 margins (an experiment script: run folder only)."""
import json, sys, time
import torch
from bench.char_cnn import FULL_DIMS, load_text, load_weights, eval_logits, _inference_fns
from models.char_cnn import CharCNN, encode

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
data = load_text(None)
idx = encode(data["eval_texts"], FULL_DIMS["length"]).cuda()
labels = data["eval_labels"]
out = {}
for path in sys.argv[1:]:
    t0 = time.time()
    state, dims, note = load_weights(path, FULL_DIMS)
    ref = CharCNN(**dims).cuda().eval().requires_grad_(False)
    ref.load_state_dict(state)
    with torch.no_grad():
        r = eval_logits(lambda i, oh: ref.forward_eager(oh), idx, 256, torch.float32, ref.alphabet_size)
    top = r.topk(2, dim=1).values
    rel = ((top[:, 0] - top[:, 1]) / r.abs().amax(1)).cpu()
    row = {"note": note, "acc_fp32": 100.0 * (r.argmax(1).cpu() == labels).float().mean().item(),
           "rel_margin_below": {str(t): int((rel < t).sum()) for t in (1e-3, 3e-3, 1e-2)}}
    for dtype in (torch.bfloat16, torch.float16):
        m = CharCNN(**dims).cuda().eval().requires_grad_(False)
        m.load_state_dict(state)
        m.to(dtype)
        fns = _inference_fns(m, None)
        for b in ("eager", "triton"):
            lg = eval_logits(fns[b], idx, 512, dtype, m.alphabet_size)
            row[f"{b}_{str(dtype)[6:]}"] = 100.0 * (lg.argmax(1) == r.argmax(1)).float().mean().item()
    row["seconds"] = time.time() - t0
    out[path] = row
    print(path, json.dumps(row), flush=True)
json.dump(out, open(sys.argv[0].replace(".py", ".json") if False else "/tmp/cc_eval.json", "w"), indent=1)
