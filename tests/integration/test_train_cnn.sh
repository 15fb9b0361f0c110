#!/usr/bin/env bash
# test_train_cnn — a convolutional model (conv-pool-conv-pool-dense-dropout-dense)
# trains through a real cluster (1 ps + 1 worker) whose worker runs two CPU
# towers (--devices cpu,cpu): each step splits the batch of 32 across them and
# pushes their averaged gradient. On 4,000 Fashion-MNIST images for 2 epochs the
# loss must fall and accuracy on 1,000 test images must exceed 0.70; the worker
# must log two towers, both processes exit 0, and global_step equal its steps.
#
# Why 0.70: chance is 0.10; this slice and schedule measured 0.77-0.80 (README
# "Tests"), and a broken conv/pool gradient or tower average stays far below.
source "$(dirname "$0")/lib.sh"
require_dataset

spec=$TMP/cnn.json
cat >"$spec" <<'JSON'
{"model": {"input_shape": [28, 28, 1],
           "layers": [{"type": "conv2d", "filters": 8, "kernel_size": 3, "activation": "relu"},
                      {"type": "max_pool2d"},
                      {"type": "conv2d", "filters": 16, "kernel_size": 3, "padding": "same", "activation": "relu"},
                      {"type": "max_pool2d"},
                      {"type": "flatten"},
                      {"type": "dense", "units": 32, "activation": "relu"},
                      {"type": "dropout", "rate": 0.2},
                      {"type": "dense", "units": 10}]},
 "optimizer": {"name": "adam", "learning_rate": 0.002},
 "data": {"train_examples": 4000, "test_examples": 1000},
 "batch_size_per_replica": 32, "epochs": 2, "seed": 5}
JSON

cluster 1 1
start_ps 0; ps=$LAST_PID
wait_healthy "${PS_ADDR[0]}"
start_worker 0 "$spec" --devices cpu,cpu; w=$LAST_PID
wait_exit "$w" 300
[ "$EXIT_CODE" = 0 ] || fail "worker exited $EXIT_CODE"
wait_exit "$ps" 20
[ "$EXIT_CODE" = 0 ] || fail "ps exited $EXIT_CODE"

grep -q 'towers: cpu,cpu (2)' "$TMP/worker0.log" || fail "the worker did not build two CPU towers"
acc=$(sed -n 's/^test accuracy: //p' "$TMP/worker0.out")
[ -n "$acc" ] || fail "no test accuracy printed"
first=$(grep -o ' loss [0-9.]*' "$TMP/worker0.log" | head -1 | awk '{print $2}')
last=$(grep -o ' loss [0-9.]*' "$TMP/worker0.log" | tail -1 | awk '{print $2}')
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f) }' || fail "loss did not fall: first $first last $last"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.70) }' || fail "accuracy $acc < 0.70"
steps=$(sed -n 's/.*finished \([0-9]*\) steps.*/\1/p' "$TMP/worker0.log")
gs=$(sed -n 's/.*at global_step \([0-9]*\).*/\1/p' "$TMP/worker0.log")
[ "$gs" = "$steps" ] || fail "global_step $gs != steps $steps"
echo "CNN, 1 ps + 1 worker with 2 CPU towers: test accuracy $acc, loss $first -> $last, global_step $gs"
pass "CNN on two CPU towers"
