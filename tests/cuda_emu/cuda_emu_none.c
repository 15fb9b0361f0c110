/* cuda_emu_none.c — cuda_emu.h's controls where CUDA is real (the CUDA tests
 * built for a GPU): nothing is emulated, so there is no peer-access switch to
 * turn and the emulation has seen no mistake and holds no queued work. */
#include "cuda_emu.h"

int cuda_emu_active(void) { return 0; }
void cuda_emu_set_peer_access(int on) { (void)on; }
long cuda_emu_mistakes(void) { return 0; }
long cuda_emu_pending(void) { return 0; }
