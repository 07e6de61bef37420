"""Experiment (issue 17): the trained weights stored in bf16 (every value representable in bf16; eager fp32 then
runs exactly those numbers). Argmax agreement with eager fp32 on the 1,000 held-out rows, Triton fused bf16 and
eager bf16, for the fp32-trained weights and for the same weights rounded to bf16 once."""
import json, sys, time
import torch
from bench.char_cnn import FULL_DIMS, load_text, load_weights, eval_logits, _inference_fns
from models.char_cnn import CharCNN, encode

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
data = load_text(None)
idx = encode(data["eval_texts"], FULL_DIMS["length"]).cuda()
labels = data["eval_labels"]
state, dims, note = load_weights(sys.argv[1], FULL_DIMS)
rounded = {k: v.to(torch.bfloat16).float() for k, v in state.items()}
out = {"note": note}
def fp32_logits(st):
    ref = CharCNN(**dims).cuda().eval().requires_grad_(False)
    ref.load_state_dict(st)
    with torch.no_grad():
        return eval_logits(lambda i, oh: ref.forward_eager(oh), idx, 256, torch.float32, ref.alphabet_size)
ref_orig, ref_round = fp32_logits(state), fp32_logits(rounded)
agree = lambda a, b: 100.0 * (a.argmax(1) == b.argmax(1)).float().mean().item()
out["weights_rounded_fp32_math_vs_orig"] = agree(ref_round, ref_orig)
for name, st, ref in (("fp32_trained", state, ref_orig), ("bf16_stored", rounded, ref_round)):
    top = ref.topk(2, dim=1).values
    rel = ((top[:, 0] - top[:, 1]) / ref.abs().amax(1)).cpu()
    row = {"acc_fp32": 100.0 * (ref.argmax(1).cpu() == labels).float().mean().item(),
           "rel_margin_below": {str(t): int((rel < t).sum()) for t in (1e-3, 3e-3, 1e-2)}}
    m = CharCNN(**dims).cuda().eval().requires_grad_(False)
    m.load_state_dict(st)
    m.to(torch.bfloat16)
    fns = _inference_fns(m, None)
    for b in ("eager", "triton"):
        t0 = time.time()
        row[f"{b}_bf16"] = agree(eval_logits(fns[b], idx, 512, torch.bfloat16, m.alphabet_size), ref)
        row[f"{b}_s"] = round(time.time() - t0, 1)
    out[name] = row
    print(name, json.dumps(row), flush=True)
print(json.dumps(out, indent=1))
