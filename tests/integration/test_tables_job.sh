#!/usr/bin/env bash
# test_tables_job — a job spec with sparse tables, run by the real programs:
# 2 ps + 2 workers (in-cluster mode) train the demo MLP on a slice while the
# spec also declares two tables (a 2^40-row one, mod, with the job's Adam and
# a cosine_decay schedule; a small div one with its own FTRL optimizer). The
# chief declares every table part on its PS in Create: each ps_server logs
# one part of each table, of 2 parts, with the table's optimizer and strategy
# (part k of table t on ps (P + 2t + k) mod 2, P = 3 dense pieces here); the
# job trains to the end (every process exits 0: the tables change nothing for
# a model that does not use them yet). A spec whose table clashes with a
# model variable is refused by the worker at start (exit 78 naming the key).
source "$(dirname "$0")/lib.sh"
require_dataset

spec=$TMP/job.json
cat >"$spec" <<'JSON'
{"model": {"input_shape": [28, 28, 1],
           "layers": [{"type": "flatten"}, {"type": "dense", "units": 10}]},
 "optimizer": {"name": "adam", "learning_rate": 0.002,
               "schedule": {"name": "cosine_decay", "decay_steps": 200, "warmup_steps": 10}},
 "tables": [{"name": "user_emb", "rows": 1099511627776, "dim": 16},
            {"name": "item_emb", "rows": 1000, "dim": 8, "partition_strategy": "div",
             "initializer": {"name": "zeros"},
             "optimizer": {"name": "ftrl", "learning_rate": 0.05, "l1_regularization_strength": 0.001}}],
 "data": {"train_examples": 2000, "test_examples": 500},
 "batch_size_per_replica": 32, "epochs": 1, "seed": 7}
JSON

train_in_cluster 2 2 "$spec"
# global_step, dense/kernel, dense/bias: 3 pieces; user_emb's parts 1, 0 and item_emb's 1, 0 on ps 0, 1
grep -q "sparse table user_emb: part 1 of 2, 1099511627776 rows declared, dim 16, optimizer adam, mod partition" \
    "$TMP/ps0.log" || fail "ps 0 did not declare user_emb's part 1"
grep -q "sparse table user_emb: part 0 of 2, 1099511627776 rows declared, dim 16, optimizer adam, mod partition" \
    "$TMP/ps1.log" || fail "ps 1 did not declare user_emb's part 0"
grep -q "sparse table item_emb: part 1 of 2, 1000 rows declared, dim 8, optimizer ftrl, div partition" \
    "$TMP/ps0.log" || fail "ps 0 did not declare item_emb's part 1"
grep -q "sparse table item_emb: part 0 of 2, 1000 rows declared, dim 8, optimizer ftrl, div partition" \
    "$TMP/ps1.log" || fail "ps 1 did not declare item_emb's part 0"
grep -q "test accuracy" "$TMP/worker0.out" || fail "the chief printed no evaluation"

# a table that clashes with a model variable: refused at start, naming the key
sed 's/"name": "item_emb"/"name": "dense"/' "$spec" >"$TMP/clash.json"
rc=0
TF_CONFIG=$(tf_config worker 0) "$BIN/worker" --job_spec "$TMP/clash.json" 2>"$TMP/clash.log" || rc=$?
[ "$rc" = 78 ] || fail "a clashing table name exited $rc, expected 78"
grep -q "tables\[1\].name" "$TMP/clash.log" || fail "the refusal does not name the key: $(cat "$TMP/clash.log")"
pass "a job spec with sparse tables"
