"""run_one.py — the job trained by one PyTorch process: the whole training set
(shard 0 of 1, psc's shuffle), TF Adam applied in place after each backward.
Timed from just before the first step to just after the last update."""
import torch

import model as M


def run(spec_path, steps_override, save=""):
    spec = M.load_spec(spec_path)
    net = M.PscModel(spec)
    params = net.params()
    adam = M.TFAdam(params, spec)
    x, y = M.load_data(spec, "train", net)
    tx, ty = M.load_data(spec, "test", net)
    plan = M.plan(spec, x.shape[0], 0, 1, M.steps_of(spec, steps_override))
    torch.manual_seed(int(spec.get("seed", 42)))  # dropout
    net.train()
    losses, examples, secs = M.train(net, params, adam, x, y, plan)
    acc, loss = M.evaluate(net, tx, ty)
    if save:
        net.psc_slab().tofile(save)
    return dict(role="one", steps=len(plan), examples=examples, secs=secs, train_loss=M.tail_mean(losses),
                test_accuracy=acc, test_loss=loss)
