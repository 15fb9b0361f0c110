"""run_rpc.py — a torch.distributed.rpc parameter server: rank 0 ("ps") holds
the weights and TF Adam's slots; ranks 1..W ("trainer0".."trainerW-1") train
shards 0..W-1. Asynchronous: each trainer, every step, sends its gradient with
one rpc_sync(update_and_fetch) and gets the weights back; the PS applies each
gradient when it arrives (under one lock, Adam's t counting the updates
applied), as psc's PS applies each push. TensorPipe over TCP only (the "uv"
transport, the "basic" channel: no shared memory), on 127.0.0.1.

The PS evaluates the final weights on the test set after every trainer is
done (rpc.shutdown waits for all), as psc's chief does after its cluster."""
import threading

import torch
import torch.distributed.rpc as rpc

import model as M

_ps = {}  # the PS's state, in the PS process only


def _get_params():
    """RPC: the current weights (copies)."""
    with _ps["lock"]:
        return [p.detach().clone() for p in _ps["params"]]


def _update_and_fetch(grads):
    """RPC: applies one gradient with TF Adam and returns the new weights
    (copies, taken under the lock: the reply is sent after it is released)."""
    with _ps["lock"]:
        _ps["adam"].apply(_ps["params"], grads)
        return [p.detach().clone() for p in _ps["params"]]


def _options(port):
    return rpc.TensorPipeRpcBackendOptions(init_method="tcp://127.0.0.1:%d" % port, num_worker_threads=4,
                                           rpc_timeout=120, _transports=["uv"], _channels=["basic"])


def run(spec_path, steps_override, rank, world, port, save=""):
    spec = M.load_spec(spec_path)
    net = M.PscModel(spec)
    if rank == 0:
        params = [p.detach() for p in net.params()]
        _ps.update(params=params, adam=M.TFAdam(params, spec), lock=threading.Lock())
        tx, ty = M.load_data(spec, "test", net)
        rpc.init_rpc("ps", rank=0, world_size=world, rpc_backend_options=_options(port))
        rpc.shutdown()  # waits until every trainer has shut down
        acc, loss = M.evaluate(net, tx, ty)
        if save:
            net.psc_slab().tofile(save)
        M.report(role="ps", updates=_ps["adam"].t, test_accuracy=acc, test_loss=loss)
        return
    shard, shards = rank - 1, world - 1
    torch.manual_seed(int(spec.get("seed", 42)) * 1000003 + shard)  # dropout
    params = net.params()
    x, y = M.load_data(spec, "train", net)
    plan = M.plan(spec, x.shape[0], shard, shards, M.steps_of(spec, steps_override))
    rpc.init_rpc("trainer%d" % shard, rank=rank, world_size=world, rpc_backend_options=_options(port))
    with torch.no_grad():
        for p, v in zip(params, rpc.rpc_sync("ps", _get_params)):
            p.copy_(v)
    net.train()
    losses, examples = [], 0
    t0 = M.now()
    for idx in plan:
        losses.append(M.forward_backward(net, params, x[idx], y[idx]))
        fresh = rpc.rpc_sync("ps", _update_and_fetch, args=([p.grad for p in params],))
        with torch.no_grad():
            for p, v in zip(params, fresh):
                p.copy_(v)
        examples += idx.shape[0]
    secs = M.now() - t0
    rpc.shutdown()
    M.report(role="trainer", steps=len(plan), examples=examples, secs=secs, train_loss=M.tail_mean(losses))
