/* predict_out.c — see predict_out.h. */
#include "predict_out.h"

void psc_predict_header(FILE *f, int sigmoid, int outputs)
{
    if (sigmoid) {
        fputs("index\tlabel\tprobability\n", f);
        return;
    }
    fputs("index\tlabel\tclass", f);
    for (int c = 0; c < outputs; c++) fprintf(f, "\tp%d", c);
    fputc('\n', f);
}

void psc_predict_line(FILE *f, int64_t index, float label, int sigmoid, const float *probs, int outputs)
{
    fprintf(f, "%lld\t%.8g", (long long)index, (double)label);
    if (!sigmoid) {
        int best = 0;
        for (int c = 1; c < outputs; c++)
            if (probs[c] > probs[best]) best = c;
        fprintf(f, "\t%d", best);
    }
    for (int c = 0; c < outputs; c++) fprintf(f, "\t%.8g", (double)probs[c]);
    fputc('\n', f);
}
