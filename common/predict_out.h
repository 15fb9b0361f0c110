/* predict_out.h — the lines `psctl predict` and `worker --predict` write
 * (docs/model-life.md, "Scoring a file"): one header line, then one line per
 * example of the input in input order, TAB-separated:
 *
 *   sigmoid models (recommendation):  index  label  probability
 *   softmax models (C classes):       index  label  class  p0 .. p<C-1>
 *
 * index: the example's 0-based position in the input (the files of a glob in
 * sorted order, one stream); label: as the input holds it (0/1, or the IDX
 * class); class: the most probable class (the first of equal ones);
 * probabilities as %.8g (float32 values: relative error below 1e-7).
 * Thread-safety: pure functions over their arguments and the stream.
 */
#ifndef PSC_PREDICT_OUT_H
#define PSC_PREDICT_OUT_H

#include <stdint.h>
#include <stdio.h>

/* The most examples one Predict page may ask for (PredictRequest.max_examples). */
#define PSC_PREDICT_MAX_PAGE 65536

/* The header line. outputs: probabilities per example (softmax: C). */
void psc_predict_header(FILE *f, int sigmoid, int outputs);
/* The line of example `index`: its label and probs (outputs floats). */
void psc_predict_line(FILE *f, int64_t index, float label, int sigmoid, const float *probs, int outputs);

#endif
