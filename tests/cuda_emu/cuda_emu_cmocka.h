/* cuda_emu_cmocka.h — the last test of a CUDA test program (cmocka): the
 * emulation reported no mistake anywhere above, also none in a call whose
 * failure the code under test only logs (destroy), and left no stream work
 * queued. On a real GPU (cuda_emu_none.c) there is nothing to see. Include
 * after <cmocka.h>. */
#ifndef PSC_CUDA_EMU_CMOCKA_H
#define PSC_CUDA_EMU_CMOCKA_H

#include "cuda_emu.h"

static void test_emu_no_mistakes(void **state)
{
    (void)state;
    long m = cuda_emu_mistakes();
    if (m) fail_msg("the CUDA emulation reported %ld mistake(s) (\"cuda emu: MISTAKE\" lines above)", m);
    assert_int_equal(cuda_emu_pending(), 0);
}

#endif
