"""run_ddp.py — torch.nn.parallel.DistributedDataParallel over gloo (TCP,
127.0.0.1): rank r of W trains shard r; each backward all-reduces the mean
gradient (DDP's buckets, default size), then every rank applies the same TF
Adam update, so all hold the same weights: synchronous, like psc's sync
replicas with R = N = W. Rank 0 evaluates the final weights on the test set."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import model as M


def run(spec_path, steps_override, rank, world, port, save=""):
    spec = M.load_spec(spec_path)
    net = M.PscModel(spec)
    params = net.params()
    adam = M.TFAdam(params, spec)
    x, y = M.load_data(spec, "train", net)
    tx, ty = M.load_data(spec, "test", net) if rank == 0 else (None, None)
    plan = M.plan(spec, x.shape[0], rank, world, M.steps_of(spec, steps_override))
    torch.manual_seed(int(spec.get("seed", 42)) * 1000003 + rank)  # dropout
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    ddp = DistributedDataParallel(net)  # broadcasts rank 0's weights (the same anyway)
    ddp.train()
    dist.barrier()
    losses, examples, secs = M.train(ddp, params, adam, x, y, plan)
    dist.barrier()
    res = dict(role="rank%d" % rank, steps=len(plan), examples=examples, secs=secs, train_loss=M.tail_mean(losses))
    if rank == 0:
        res["test_accuracy"], res["test_loss"] = M.evaluate(net, tx, ty)
        if save:
            net.psc_slab().tofile(save)
    dist.destroy_process_group()
    M.report(**res)
