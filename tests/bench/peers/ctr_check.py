"""ctr_check.py — the CTR peer's own checks (ctr_peer.py check [SPEC EXPORT
STEPS]; tests/bench/peers/ctr_check.sh runs them against a real psc cluster).
Not part of make test: the peer needs PyTorch, which only the benchmark installs.

  1. known answers of psc's C code: fnv1a64, psc_feature_id_hash
     (unit.test_embed_ids), Philox-4x32-10 (Random123's, unit.test_tower_cpu);
  2. AUC: the worked example of docs/recommendation.md (ties: 9.5 / 12), and
     ctrdata.auc against counting every (positive, negative) pair on 3,000
     scores with many ties; log loss against -log(sigmoid(z)) / -log(1 - sigmoid(z)) written
     with log1p, |z| <= 30;
  3. one step's updates by the peer alone, against closed forms: a table row's
     first lazy-Adam step is -lr_t(1) 0.1 g / (sqrt(0.001) |g| + eps)
     (~ -lr sign(g)), equal to torch.optim.SparseAdam's first step; FTRL's
     first step from w = 0, acc = 0.1 is -lr g / sqrt(0.1 + g^2); the rows
     outside the batch (values, slots, t) do not move;
  4. with SPEC, EXPORT (psctl export of psc after STEPS steps of SPEC with
     1 ps + 1 worker) and psc's printed test AUC (PSC_TEST_AUC): the peer
     trains STEPS steps of SPEC and ends at psc's weights: every dense
     variable, every table row psc holds (the rows the steps updated and the
     next batch's, which psc's pull created with their initial values: those
     bit for bit), within CTR_CHECK_TOL (1e-5); the rows the peer updated
     are all among psc's; the test AUC within 2e-4 (psc prints 4 decimals).
Prints one line per check; returns 0 when all hold, 1 otherwise.
"""
import math
import os

import numpy as np
import torch

import ctr_model as CM
import ctrdata


def _ok(name, good, detail):
    print("check %-10s %s  %s" % (name, "ok  " if good else "FAIL", detail), flush=True)
    return bool(good)


def known_answers():
    good = True
    h = [ctrdata.feature_id_hash(np.array([k], dtype=np.uint64), f, r)[0]
         for k, f, r in ((0x68FD1E64, "C1", 10 ** 8), (0x68FD1E64, "C26", 10 ** 8), (12345, "features", 1 << 40),
                         (0, "C3", 1000))]
    good &= _ok("hash", ctrdata.fnv1a64("C1") == 0x090F7F07B5A73A39 and ctrdata.fnv1a64("C26") == 0x0C84D719AB1F3462
                and h == [45122770, 58570165, 996161181073, 675], "fnv1a64 and psc_feature_id_hash: %s" % h)
    kat = (((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
           ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
           ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)))
    same = all(tuple(int(w[0]) for w in ctrdata.philox4x32_10(*[np.array([c], dtype=np.uint64) for c in ctr], *key))
               == want for ctr, key, want in kat)
    good &= _ok("philox", same, "Random123's 3 known answers of Philox-4x32-10")
    return good


def auc_checks():
    good = True
    s = np.array([0.1, 0.4, 0.4, 0.4, 0.8, 0.8, 0.9], dtype=np.float32)
    y = np.array([0, 1, 0, 0, 1, 0, 1], dtype=np.float32)
    a = ctrdata.auc(s, y)
    good &= _ok("auc-doc", abs(a - 9.5 / 12) < 1e-12, "docs/recommendation.md's example: %.6f (9.5 / 12)" % a)
    rng = np.random.default_rng(3)
    z = np.round(rng.normal(size=3000), 1).astype(np.float32)  # ~60 distinct scores: many ties
    yy = (rng.random(3000) < 1 / (1 + np.exp(-z))).astype(np.float32)
    a, b = ctrdata.auc(z, yy), ctrdata.auc_pairs(z, yy)
    good &= _ok("auc-pairs", abs(a - b) < 1e-12, "rank formula %.12f, every pair counted %.12f" % (a, b))
    z = rng.uniform(-30, 30, size=1000)
    ref = np.mean([math.log1p(math.exp(-v)) if t else math.log1p(math.exp(v)) for v, t in zip(z, yy[:1000])])
    ll = ctrdata.log_loss(z, yy[:1000])
    good &= _ok("logloss", abs(ll - ref) < 1e-9 * max(1.0, ref), "%.12f against log1p(exp(-z)) / log1p(exp(z)): %.12f" % (ll, ref))
    return good


def first_step(spec, train, test):
    """The peer's first update of each table against its closed form."""
    good = True
    peer = CM.CtrPeer(spec, train, test)
    rows = peer.plan(1, 0, spec["data"].get("shuffle", True), [train["label"].shape[0]])[0]
    before = {tb: (T.rec.clone(), T.t.clone()) for tb, T in peer.tables.items()}
    for p in peer.params:
        p.grad = None
    logit, got = peer._forward(rows, True)
    torch.nn.functional.binary_cross_entropy_with_logits(logit, peer.label[rows]).backward()
    for tb, (uq, r, w) in got.items():
        T = peer.tables[tb]
        n = uq.shape[0] - (1 if int(uq[-1]) == T.pad else 0)
        g = w.grad[:n].clone().double()
        w0 = r[:n, :T.dim].clone().double()
        T.apply(uq[:n], r[:n].clone(), w.grad[:n])
        w1 = T.rec[uq[:n], :T.dim].double()
        if T.kind == "adam":
            lr_t = T.lr * math.sqrt(1 - T.b2) / (1 - T.b1)
            want = w0 - lr_t * (1 - T.b1) * g / ((1 - T.b2) ** 0.5 * g.abs() + T.eps)
            sa = torch.nn.Parameter(w0.float().clone())
            opt = torch.optim.SparseAdam([sa], lr=T.lr, betas=(T.b1, T.b2), eps=T.eps)
            sa.grad = torch.sparse_coo_tensor(torch.arange(n).unsqueeze(0),
                                              w.grad[:n].clone(), (n, T.dim))
            opt.step()
            err = float((w1 - want).abs().max()) / T.lr
            err_sa = float((w1 - sa.detach().double()).abs().max()) / T.lr
            sign = float((w1 - w0 + T.lr * g.sign()).abs()[g.abs() > 1e-4].max()) / T.lr
            good &= _ok("adam-1", err < 1e-5 and err_sa < 1e-5 and sign < 1e-2,
                        "table %s, %d rows: first lazy-Adam step vs the closed form %.1e lr, vs "
                        "torch.optim.SparseAdam %.1e lr, vs -lr sign(g) (|g| > 1e-4) %.1e lr" % (tb, n, err, err_sa, sign))
        elif T.kind == "ftrl" and T.l1 == 0 and T.l2 == 0 and T.lr_power == -0.5 and float(w0.abs().max()) == 0:
            want = -T.lr * g / torch.sqrt(T.acc0 + g * g)
            err = float((w1 - want).abs().max())
            good &= _ok("ftrl-1", err < 1e-6, "table %s, %d rows: first FTRL step vs -lr g / sqrt(0.1 + g^2): "
                        "max |diff| %.1e" % (tb, n, err))
        rec0, t0 = before[tb]
        other = torch.ones(T.rec.shape[0], dtype=torch.bool)
        other[uq[:n]] = False
        still = torch.equal(T.rec[other], rec0[other]) and torch.equal(T.t[other], t0[other])
        moved = int((T.t != t0).sum())
        good &= _ok("lazy", still and moved == n,
                    "table %s: the %d rows outside the batch unchanged (values, slots, t); t moved on %d rows"
                    % (tb, T.rec.shape[0] - 1 - n, moved))
    return good


def against_psc(spec, train, test, export, steps, tol):
    """The peer after `steps` steps against psc's export after the same steps."""
    good = True
    peer = CM.CtrPeer(spec, train, test)
    plan = peer.plan(steps, 0, spec["data"].get("shuffle", True), [n for n in spec["_file_sizes"]])
    peer.train(plan)
    got = peer.state()
    want = ctrdata.read_safetensors(export)
    worst, names = 0.0, []
    for name in peer.names:
        if name not in want:
            return _ok("dense", False, "psc's export has no %s (it has %s)" % (name, sorted(want)))
        worst = max(worst, float(np.abs(got[name] - want[name].reshape(got[name].shape)).max()))
        names.append(name)
    good &= _ok("dense", worst <= tol, "%d variables after %d steps: max |diff| %.2e" % (len(names), steps, worst))
    for tb, T in peer.tables.items():
        ids, vals = want[tb + "/ids"], want[tb + "/values"]
        pos = np.searchsorted(T.ids, ids)
        known = (pos < T.ids.shape[0]) & (T.ids[np.minimum(pos, T.ids.shape[0] - 1)] == ids)
        if not known.all():
            good &= _ok("rows", False, "table %s: psc holds %d ids the files do not give" % (tb, int((~known).sum())))
            continue
        mine = got[tb + "/values"][pos]
        t = got[tb + "/t"][pos]
        updated = np.flatnonzero(got[tb + "/t"] > 0)
        missing = np.setdiff1d(T.ids[updated], ids).shape[0]
        d_upd = float(np.abs(mine[t > 0] - vals[t > 0]).max()) if (t > 0).any() else 0.0
        init_same = np.array_equal(mine[t == 0], vals[t == 0])
        good &= _ok("rows", missing == 0 and d_upd <= tol and init_same,
                    "table %s: psc holds %d rows: the %d the peer updated (%d missing on psc) max |diff| %.2e; "
                    "the other %d (pulled, not yet updated) bit for bit %s"
                    % (tb, ids.shape[0], int((t > 0).sum()), missing, d_upd, int((t == 0).sum()),
                       "equal" if init_same else "DIFFERENT"))
    psc_auc = os.environ.get("PSC_TEST_AUC", "")
    if psc_auc:
        auc, _, _ = peer.evaluate()
        good &= _ok("auc", abs(auc - float(psc_auc)) <= 2e-4,
                    "test AUC after %d steps: peer %.6f, psc %s" % (steps, auc, psc_auc))
    return good


def main(spec_path, export, steps):
    good = known_answers()
    good &= auc_checks()
    if not spec_path:
        return 0 if good else 1
    spec = CM.load_spec(spec_path)
    files = ctrdata.expand(spec["data"]["train"])
    parts = [ctrdata.read_criteo(f, int(spec["data"].get("train_examples", 0))) for f in files]
    spec["_file_sizes"] = [p["label"].shape[0] for p in parts]
    train = ctrdata.concat(parts)
    test = ctrdata.concat([ctrdata.read_criteo(f, int(spec["data"].get("test_examples", 0)))
                           for f in ctrdata.expand(spec["data"]["test"])])
    good &= first_step(spec, train, test)
    if export:
        good &= against_psc(spec, train, test, export, steps, float(os.environ.get("CTR_CHECK_TOL", "1e-5")))
    return 0 if good else 1
