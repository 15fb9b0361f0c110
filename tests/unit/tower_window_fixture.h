/* tower_window_fixture.h — a conv / pool window for the towers' op tests
 * (test_tower_ops.c, test_tower_conv.c): square kernel k, stride s, `same`
 * or `valid` padding worked out here by TF's rule (model_spec.c), filters
 * output channels (0 for a pool). Header-only, for tests.
 */
#ifndef PSC_TOWER_WINDOW_FIXTURE_H
#define PSC_TOWER_WINDOW_FIXTURE_H

#include "psc.h"
#include "tower_walk.h"

static inline tower_window_t test_window(int h, int w, int c, int k, int s, int same, int filters)
{
    tower_window_t g = {.in_h = h, .in_w = w, .in_c = c, .kh = k, .kw = k, .sh = s, .sw = s, .filters = filters};
    g.out_h = same ? (h + s - 1) / s : (h - k) / s + 1;
    g.out_w = same ? (w + s - 1) / s : (w - k) / s + 1;
    g.pad_top = same ? PSC_MAX((g.out_h - 1) * s + k - h, 0) / 2 : 0;
    g.pad_left = same ? PSC_MAX((g.out_w - 1) * s + k - w, 0) / 2 : 0;
    g.col_k = k * k * c;
    g.in_size = h * w * c;
    return g;
}

#endif
