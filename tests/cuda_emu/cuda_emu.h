/* cuda_emu.h — the test-facing controls of the CUDA emulation (tests/cuda_emu),
 * callable from C. The emulated test build links the emulation's; the CUDA
 * tests built for a real GPU link cuda_emu_none.c, where nothing is emulated.
 *
 * Environment, read at the first CUDA call:
 *   PSC_EMU_DEVICES  number of emulated devices (default 2, 0..16)
 *   PSC_EMU_PEER     1 (default): cudaDeviceCanAccessPeer says yes between
 *                    different devices; 0: no device reaches another directly
 */
#ifndef PSC_CUDA_EMU_H
#define PSC_CUDA_EMU_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the CUDA runtime is this emulation, 0 on a real GPU. */
int cuda_emu_active(void);
/* Sets whether devices can reach each other (cudaDeviceCanAccessPeer) and
 * disables every peer access enabled so far, as a new process would see it.
 * Call it between towers' lifetimes, not while a tower runs. */
void cuda_emu_set_peer_access(int on);
/* Mistakes detected so far (each one also printed and failing its call). */
long cuda_emu_mistakes(void);
/* Stream operations queued and not yet run, over all streams. */
long cuda_emu_pending(void);

#ifdef __cplusplus
}
#endif

#endif
