"""ctr_model.py — a psc recommendation job spec (deploy/jobs/ctr.json: a DLRM
with a wide part) as one PyTorch process: the model, the tables and their
optimizers as psc's PS applies them, the training loop and the evaluation.

The model (worker/tower/tower_ctr.c, docs/recommendation.md "The CTR tower"):
  b     = bottom MLP(dense features)          the dense layers before the join
  e_s   = row of slot s's id in its table      (an empty bag: a zero row)
  z     = interaction: [b, <v_i, v_j> for i < j over v = (b, e_1 .. e_S)],
          pairs row by row (0,1), (0,2), .., (1,2), ..; or concat: [b, e_1 .. e_S]
  logit = top MLP(z) + sum over the wide slots of their 1-wide rows
  loss  = mean sigmoid cross-entropy
Slots are the features of the embedding (and, apart, the wide) layers in layer
order. Dense kernels (in, out) and biases in psc's variable order and values
(pscdata.init_value: glorot-uniform from variable i's own psc_rng).

The tables. psc declares them with `rows` rows (10^8 in ctr.json) and creates a
row on its PS when it is first pulled, with psc_table_row_init's value. Here a
table holds only the rows whose ids occur in the training or test files
(ctrdata: the ids hashed as psc hashes them, initialized as psc initializes
them), plus one zero row for empty bags; an id seen only in the test file
keeps its initial value, as psc's read-only evaluation reads it. Each row's
record is [w | slots] in one float32 tensor, as a PS row record.

A step does what psc's worker and PS do for one batch: the batch's ids are
de-duplicated per table (torch.unique; psc's loader does it in its prefetch
thread), the unique rows gathered, forward and backward (the row gradients
are the sums over the row's occurrences, as psc's client sums duplicates),
then the updates:
  dense variables  TF Adam (model.TFAdam), t = the step count;
  table rows       each table's optimizer (the table's "optimizer", else the
                   job's) on the batch's rows only, as optim_apply_row does:
    adam     LazyAdam with a per-row t (the row's own update count; psc's
             sparse_table keeps it in the row's record):
             lr_t = lr sqrt(1 - b2^t) / (1 - b1^t) (double, rounded to float);
             m += (g - m)(1 - b1); v += (g^2 - v)(1 - b2); w -= m lr_t / (sqrt(v) + eps)
             (torch.optim.SparseAdam and tfa's LazyAdam bias-correct with the
             optimizer's global step instead: the same first step, but a row
             first touched at step 1000 moves 2.5 lr there (3.2 lr in the
             limit), ~lr here and on psc);
    ftrl     TF's ApplyFtrl (no l2 shrinkage), lr_power -0.5 by sqrt:
             na = acc + g^2; lin += g - (sqrt(na) - sqrt(acc)) / lr w;
             w = |lin| > l1 ? (sign(lin) l1 - lin) / (sqrt(na) / lr + 2 l2) : 0; acc = na;
    adagrad  acc += g^2; w -= g lr / sqrt(acc);   sgd  w -= lr g.
The order of the float operations is optim.c's.

What is not implemented (an error names the key): other data formats, hash_ids
false, valued bags, schedules, eviction, admission, sync, dropout.
"""
import json
import time

import numpy as np
import torch
import torch.nn.functional as F

import ctrdata
import model as M
import pscdata

TABLE_OPTIMIZERS = ("adam", "ftrl", "adagrad", "sgd")


def load_spec(path):
    """The job spec (dict), checked for what the CTR peer implements."""
    with open(path) as f:
        spec = json.load(f)
    model = spec["model"]
    if model.get("loss") != "sigmoid_cross_entropy":
        raise ValueError("%s: model.loss: the CTR peer trains sigmoid_cross_entropy only" % path)
    if spec.get("data", {}).get("format") != "criteo":
        raise ValueError("%s: data.format: the CTR peer reads criteo only" % path)
    for key in ("sync", "overlap_push_pull", "warm_start"):
        if key in spec:
            raise ValueError("%s: %s is not implemented by the CTR peer" % (path, key))
    opt = spec.get("optimizer", {})
    if opt.get("name") != "adam" or "schedule" in opt:
        raise ValueError("%s: optimizer: the CTR peer implements adam without a schedule for the dense part" % path)
    for t in spec.get("tables", []):
        o = t.get("optimizer", opt)
        if o.get("name") not in TABLE_OPTIMIZERS or "schedule" in o:
            raise ValueError("%s: tables %s: optimizer %s is not implemented by the CTR peer" % (path, t["name"], o))
        for key in ("eviction", "admission"):
            if key in t:
                raise ValueError("%s: tables %s: %s is not implemented by the CTR peer" % (path, t["name"], key))
    return spec


class Table:
    """One sparse table: the rows its slots use, each a record [w | slots]."""

    def __init__(self, spec, tspec, ids):
        self.name = tspec["name"]
        self.rows = int(tspec["rows"])
        self.dim = int(tspec["dim"])
        o = dict(tspec.get("optimizer", spec["optimizer"]))
        self.kind = o["name"]
        f32 = lambda v: float(np.float32(v))  # the spec's floats are C floats on psc
        self.lr = f32(o.get("learning_rate", 0.001))
        self.b1, self.b2 = f32(o.get("beta1", 0.9)), f32(o.get("beta2", 0.999))
        self.eps = f32(o.get("epsilon", 1e-8))
        self.omb1, self.omb2 = float(np.float32(1) - np.float32(self.b1)), float(np.float32(1) - np.float32(self.b2))
        self.l1 = f32(o.get("l1_regularization_strength", 0.0))
        self.l2 = f32(o.get("l2_regularization_strength", 0.0))
        self.lr_power = f32(o.get("learning_rate_power", -0.5))
        self.acc0 = f32(o.get("initial_accumulator_value", 0.1))
        nslots = {"adam": 2, "ftrl": 2, "adagrad": 1, "sgd": 0}[self.kind]
        self.ids = ids  # global ids, ascending; record i is id ids[i], record len(ids) the empty bag's
        n, d = ids.shape[0], self.dim
        rec = np.zeros((n + 1, d * (1 + nslots)), dtype=np.float32)
        rec[:n, :d] = ctrdata.table_row_init(tspec.get("initializer"), int(spec.get("seed", 42)), self.name, ids, d)
        if self.kind in ("ftrl", "adagrad"):
            rec[:n, d:2 * d] = self.acc0
        self.rec = torch.from_numpy(rec)
        self.t = torch.zeros(n + 1, dtype=torch.int64)  # each row's update count (LazyAdam's t)
        self.pad = n

    @torch.no_grad()
    def apply(self, uq, r, g):
        """Updates records r (the rows uq, gathered) by their gradients g (u, dim) and writes them back."""
        d = self.dim
        w = r[:, :d]
        t = self.t.index_select(0, uq) + 1  # every row counts its updates, as a PS record does
        self.t.index_copy_(0, uq, t)
        if self.kind == "adam":
            td = t.double().unsqueeze(1)
            lr_t = (self.lr * torch.sqrt(1.0 - self.b2 ** td) / (1.0 - self.b1 ** td)).float()
            m, v = r[:, d:2 * d], r[:, 2 * d:]
            m.add_((g - m) * self.omb1)
            v.add_((g * g - v) * self.omb2)
            w.sub_((m * lr_t) / (v.sqrt() + self.eps))
        elif self.kind == "ftrl":
            acc, lin = r[:, d:2 * d], r[:, 2 * d:]
            na = acc + g * g
            if self.lr_power == -0.5:
                pn, pa = na.sqrt(), acc.sqrt()
            else:
                pn, pa = na.pow(-self.lr_power), acc.pow(-self.lr_power)
            lin.add_(g - (pn - pa) / self.lr * w)
            q = (torch.where(lin > 0, self.l1, -self.l1) - lin) / (pn / self.lr + 2.0 * self.l2)
            w.copy_(torch.where(lin.abs() > self.l1, q, torch.zeros_like(q)))
            acc.copy_(na)
        elif self.kind == "adagrad":
            acc = r[:, d:2 * d]
            acc.add_(g * g)
            w.sub_(g * self.lr * (1.0 / acc.sqrt()))
        else:
            w.sub_(self.lr * g)
        self.rec.index_copy_(0, uq, r)


class CtrPeer:
    """The job spec's model over its data: tables, dense parameters, the data
    as tensors, and train / evaluate."""

    def __init__(self, spec, train, test):
        """train, test: ctrdata.read_criteo dicts (test may be None)."""
        self.spec = spec
        seed = int(spec.get("seed", 42))
        tspecs = {t["name"]: t for t in spec.get("tables", [])}
        # ---- layers: the lookups, the join, the bottom and top MLPs ----
        layers = spec["model"]["layers"]
        joins = [i for i, L in enumerate(layers) if L["type"] in ("interaction", "concat")]
        self.join = layers[joins[0]]["type"] if joins else None
        self.lookups = []  # (kind, table name, features)
        self.bottom, self.top = [], []
        for i, L in enumerate(layers):
            t = L["type"]
            if t in ("embedding", "wide"):
                if L.get("hash_ids", True) is not True:
                    raise ValueError("model.layers[%d]: hash_ids false is not implemented by the CTR peer" % i)
                if L["table"] not in tspecs:
                    raise ValueError("model.layers[%d]: no table %s" % (i, L["table"]))
                feats = L["features"] if isinstance(L["features"], list) else [L["features"]]
                self.lookups.append((t, L["table"], feats))
            elif t == "dense":
                act = L.get("activation", "linear")
                if act not in ("linear", "relu", "sigmoid", "tanh"):
                    raise ValueError("model.layers[%d]: activation %s is not implemented" % (i, act))
                layer = {"units": int(L["units"]), "act": act, "use_bias": L.get("use_bias", True),
                         "name": L.get("name")}
                (self.top if not joins or i > joins[0] else self.bottom).append(layer)
            elif t not in ("interaction", "concat"):
                raise ValueError("model.layers[%d]: type %s is not implemented by the CTR peer" % (i, t))
        # the widths (docs/recommendation.md "Widths")
        emb_dims = [int(tspecs[tb]["dim"]) for k, tb, fs in self.lookups if k == "embedding" for _ in fs]
        width = ctrdata.NUM_DENSE
        for layer in self.bottom:
            layer["in"], width = width, layer["units"]
        if self.join == "interaction":
            if len(set(emb_dims)) != 1 or width != emb_dims[0]:
                raise ValueError("interaction: the embeddings and the bottom MLP's output must be as wide")
            P = len(emb_dims) + 1
            self.iu = torch.triu_indices(P, P, offset=1)  # pairs row by row, as psc counts them
            width += P * (P - 1) // 2
        elif self.join == "concat":
            width += sum(emb_dims)
        for layer in self.top:
            layer["in"], width = width, layer["units"]
        if not self.top or width != 1 or self.top[-1]["act"] != "linear":
            raise ValueError("model.layers: the last dense layer must have 1 unit, linear")
        # the dense variables in psc's order (the dense layers in layer order;
        # Keras names), variable i (global_step = 0) from psc_rng(psc_seed_mix(seed, i))
        self.params, self.names = [], []
        index = 1
        unnamed = 0
        for layer in self.bottom + self.top:
            name = layer["name"]
            if not name:  # Keras's names count the unnamed layers only (job_spec.c)
                name = "dense" if unnamed == 0 else "dense_%d" % unnamed
                unnamed += 1
            layer["w"] = self._param(name + "/kernel", pscdata.init_value(index, (layer["in"], layer["units"]), seed))
            index += 1
            layer["b"] = None
            if layer["use_bias"]:
                layer["b"] = self._param(name + "/bias", pscdata.init_value(index, (layer["units"],), seed))
                index += 1
        # ---- ids: hashed as psc hashes them; each table keeps the ids its slots use ----
        self.tables = {}
        self.n_train = train["label"].shape[0]
        parts = [train] + ([test] if test is not None else [])
        n_all = sum(p["label"].shape[0] for p in parts)
        self.idx = [None] * len(self.lookups)  # per lookup: (n, S) record indices, the table's pad for an empty bag
        done = {}  # two tables over the same (rows, features) share their ids and index arrays (one unique a step)
        for tb in dict.fromkeys(tb for _, tb, _ in self.lookups):
            rows = int(tspecs[tb]["rows"])
            mine = [j for j, (_, t2, _) in enumerate(self.lookups) if t2 == tb]
            key = (rows, tuple(tuple(self.lookups[j][2]) for j in mine))
            if key not in done:
                gids = []
                for j in mine:
                    g = np.empty((n_all, len(self.lookups[j][2])), dtype=np.int64)
                    for s, f in enumerate(self.lookups[j][2]):
                        if not (f.startswith("C") and f[1:].isdigit() and 1 <= int(f[1:]) <= ctrdata.NUM_CAT):
                            raise ValueError("features: %s is not a Criteo categorical feature (C1..C26)" % f)
                        c = int(f[1:]) - 1
                        keys = np.concatenate([p["keys"][:, c] for p in parts])
                        present = np.concatenate([p["present"][:, c] for p in parts])
                        g[:, s] = np.where(present, ctrdata.feature_id_hash(keys, f, rows), -1)
                    gids.append(g)
                uniq, inv = np.unique(np.concatenate([g.ravel() for g in gids]), return_inverse=True)
                if uniq[0] < 0:  # the empty bags: -1 sorts first; they go to the pad record after the ids
                    uniq = uniq[1:]
                    inv = np.where(inv == 0, uniq.shape[0], inv - 1)
                idx, off = [], 0
                for g in gids:
                    idx.append(torch.from_numpy(inv[off:off + g.size].reshape(g.shape).astype(np.int64)))
                    off += g.size
                done[key] = (uniq, idx)
            uniq, idx = done[key]
            self.tables[tb] = Table(spec, tspecs[tb], uniq)
            for j, x in zip(mine, idx):
                self.idx[j] = x
        self.dense = torch.from_numpy(np.concatenate([p["dense"] for p in parts]))
        self.label = torch.from_numpy(np.concatenate([p["label"] for p in parts]))
        self.table_lookups = {tb: [j for j, (_, t2, _) in enumerate(self.lookups) if t2 == tb] for tb in self.tables}
        self.emb_lookups = [j for j, (k, _, _) in enumerate(self.lookups) if k == "embedding"]
        self.wide_lookups = [j for j, (k, _, _) in enumerate(self.lookups) if k == "wide"]
        self.adam = M.TFAdam(self.params, spec)

    def _param(self, name, value):
        p = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(value)))
        self.params.append(p)
        self.names.append(name)
        return p

    # ---- a step ----

    def _gather(self, rows, train):
        """Per table: (unique record indices, their records, the rows as a leaf
        w (u, dim) requiring grad when training); per lookup: inverse (B, S)."""
        uniq = {}
        got = {}
        inv = [None] * len(self.lookups)
        for tb, T in self.tables.items():
            mine = self.table_lookups[tb]
            ids = [self.idx[j][rows] for j in mine]
            key = tuple(id(self.idx[j]) for j in mine)
            if key not in uniq:
                flat = ids[0].reshape(-1) if len(ids) == 1 else torch.cat([x.reshape(-1) for x in ids])
                uniq[key] = torch.unique(flat, return_inverse=True)
            uq, iv = uniq[key]
            r = T.rec.index_select(0, uq)
            w = r[:, :T.dim].clone().requires_grad_(train)
            got[tb] = (uq, r, w)
            off = 0
            for j, x in zip(mine, ids):
                inv[j] = iv[off:off + x.numel()].view(x.shape)
                off += x.numel()
        return got, inv

    def _forward(self, rows, train):
        """Logits (B,) of the examples `rows` (a slice or an index tensor)."""
        x = self.dense[rows]
        got, inv = self._gather(rows, train)
        for layer in self.bottom:
            x = self._dense(layer, x)
        b = x
        embs = [F.embedding(inv[j], got[self.lookups[j][1]][2]) for j in self.emb_lookups]
        if self.join == "interaction":
            v = torch.cat([b.unsqueeze(1)] + embs, 1)  # (B, P, D)
            zz = torch.bmm(v, v.transpose(1, 2))
            z = torch.cat([b, zz[:, self.iu[0], self.iu[1]]], 1)
        elif self.join == "concat":
            z = torch.cat([b] + [e.flatten(1) for e in embs], 1)
        else:
            z = b
        for layer in self.top:
            z = self._dense(layer, z)
        logit = z.squeeze(1)
        for j in self.wide_lookups:
            logit = logit + F.embedding(inv[j], got[self.lookups[j][1]][2]).sum((1, 2))
        return logit, got

    @staticmethod
    def _dense(layer, x):
        x = torch.addmm(layer["b"], x, layer["w"]) if layer["b"] is not None else x @ layer["w"]
        act = layer["act"]
        if act == "relu":
            return torch.relu(x)
        if act == "sigmoid":
            return torch.sigmoid(x)
        if act == "tanh":
            return torch.tanh(x)
        return x

    def step(self, rows):
        """One training step on examples `rows`: forward, backward, every
        update. Returns the batch's mean loss (a 0-dim tensor)."""
        for p in self.params:
            p.grad = None
        logit, got = self._forward(rows, True)
        loss = F.binary_cross_entropy_with_logits(logit, self.label[rows])
        loss.backward()
        self.adam.apply(self.params, [p.grad for p in self.params])
        for tb, (uq, r, w) in got.items():
            T = self.tables[tb]
            n = uq.shape[0] - (1 if int(uq[-1]) == T.pad else 0)  # the empty bag's row is never updated
            T.apply(uq[:n], r[:n], w.grad[:n])
        return loss.detach()

    # ---- the run ----

    def plan(self, steps=0, train_examples=0, shuffle=True, file_sizes=None):
        """The batches (slices or index tensors into the training examples),
        computed before the clock starts: the spec's epochs (or `steps`),
        each epoch over the files in psc's order for that epoch."""
        spec = self.spec
        batch = int(spec.get("batch_size_per_replica", 64))
        epochs = int(spec.get("epochs", 1)) or 1
        sizes = file_sizes or [self.n_train]
        starts = np.cumsum([0] + sizes[:-1])
        out = []
        for e in range(epochs):
            order = ctrdata.file_order(len(sizes), int(spec.get("seed", 42)), e, shuffle)
            rows = np.concatenate([np.arange(starts[f], starts[f] + sizes[f]) for f in order])
            if train_examples > 0:
                rows = rows[:train_examples]
            for a in range(0, rows.shape[0], batch):
                seg = rows[a:a + batch]
                if seg[-1] - seg[0] == seg.shape[0] - 1:
                    out.append(slice(int(seg[0]), int(seg[-1]) + 1))
                else:
                    out.append(torch.from_numpy(seg))
                if steps and len(out) == steps:
                    return out
        return out

    def train(self, plan):
        """Every step of plan; (losses, examples, seconds) timed from just
        before the first step to just after the last update."""
        losses, examples = [], 0
        t0 = time.perf_counter()
        for rows in plan:
            losses.append(self.step(rows))
            examples += (rows.stop - rows.start) if isinstance(rows, slice) else rows.shape[0]
        secs = time.perf_counter() - t0
        return [float(l) for l in losses], examples, secs

    @torch.no_grad()
    def evaluate(self, chunk=8192):
        """(AUC, log loss, logits) on the test examples (after the training ones)."""
        n = self.label.shape[0]
        logits = []
        for a in range(self.n_train, n, chunk):
            logits.append(self._forward(slice(a, min(n, a + chunk)), False)[0])
        z = torch.cat(logits).numpy()
        y = self.label[self.n_train:].numpy()
        return ctrdata.auc(z, y), ctrdata.log_loss(z, y), z

    def state(self):
        """{name: numpy array}: the dense variables, and per table its ids and
        values (psctl export's names: NAME/ids, NAME/values)."""
        out = {}
        for name, p in zip(self.names, self.params):
            out[name] = p.detach().numpy().copy()
        for tb, T in self.tables.items():
            out[tb + "/ids"] = T.ids
            out[tb + "/values"] = T.rec[:-1, :T.dim].numpy().copy()
            out[tb + "/t"] = T.t[:-1].numpy().copy()
        return out
