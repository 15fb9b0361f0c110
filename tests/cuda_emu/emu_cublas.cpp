/* emu_cublas.cpp — cuBLAS for the CUDA emulation (cublas_v2.h).
 *
 * A handle belongs to the device current at cublasCreate and starts on the
 * default stream, as in cuBLAS. cublasSgemm checks what cuBLAS checks
 * (operations, m, n, k >= 0, leading dimensions >= the rows of what they hold)
 * and what a GPU punishes: the handle's device not current, the default stream,
 * a stream of another device, a matrix that is not device memory the handle's
 * device may read, or that runs past its allocation. alpha and beta are read at
 * the call (host pointer mode); the product is queued on the stream and runs as
 * a column-major cblas_sgemm (OpenBLAS) when the stream is synchronized. With
 * beta = 0, C is not read (cuBLAS's rule), so NaN there does not propagate.
 */
#include "cublas_v2.h"
#include "emu_internal.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>

struct cublasContext {
    int device;
    cudaStream_t stream;
    cublasMath_t math;
    cublasPointerMode_t pointer_mode;
    void *workspace;
    size_t workspace_bytes;
};

using namespace emu;

static cublasStatus_t blas_mistake(cublasStatus_t s, const char *call, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cublasStatus_t blas_mistake(cublasStatus_t s, const char *call, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    report(call, "%s (%s)", msg, cublasGetStatusName(s));
    return s;
}

#define EMU_BLAS_STATUS(X)                                                \
    X(CUBLAS_STATUS_SUCCESS, "success")                                   \
    X(CUBLAS_STATUS_NOT_INITIALIZED, "the library was not initialized")   \
    X(CUBLAS_STATUS_ALLOC_FAILED, "the resource allocation failed")       \
    X(CUBLAS_STATUS_INVALID_VALUE, "an invalid numeric value was used as an argument") \
    X(CUBLAS_STATUS_ARCH_MISMATCH, "an absent device architectural feature is required") \
    X(CUBLAS_STATUS_MAPPING_ERROR, "an access to GPU memory space failed") \
    X(CUBLAS_STATUS_EXECUTION_FAILED, "the GPU program failed to execute") \
    X(CUBLAS_STATUS_INTERNAL_ERROR, "an internal operation failed")       \
    X(CUBLAS_STATUS_NOT_SUPPORTED, "the functionality requested is not supported")

const char *cublasGetStatusString(cublasStatus_t s)
{
#define X(code, text) \
    if (s == code) return text;
    EMU_BLAS_STATUS(X)
#undef X
    return "unknown error";
}

const char *cublasGetStatusName(cublasStatus_t s)
{
#define X(code, text) \
    if (s == code) return #code;
    EMU_BLAS_STATUS(X)
#undef X
    return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    if (!ndev) return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasContext *c = new cublasContext();
    c->device = current_device();
    c->stream = 0;
    c->math = CUBLAS_DEFAULT_MATH;
    c->pointer_mode = CUBLAS_POINTER_MODE_HOST;
    *h = c;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    /* cublasDestroy synchronizes the handle's stream */
    stream_t *st = stream_lookup(h->stream);
    cudaError_t e = st ? flush(st, UINT64_MAX) : cudaSuccess;
    delete h;
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!is_default_stream(s) && !stream_lookup(s))
        return blas_mistake(CUBLAS_STATUS_INVALID_VALUE, "cublasSetStream", "%p is not a live stream", (void *)s);
    h->stream = s;
    /* as cuBLAS: setting the stream resets the workspace to cuBLAS's own pool */
    h->workspace = NULL;
    h->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    *s = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((unsigned)mode > CUBLAS_TF32_TENSOR_OP_MATH) return CUBLAS_STATUS_INVALID_VALUE;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *mode)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->math;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t mode)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_POINTER_MODE_HOST)
        return blas_mistake(CUBLAS_STATUS_NOT_SUPPORTED, "cublasSetPointerMode", "device pointer mode is not emulated");
    h->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *workspace, size_t bytes)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (workspace) {
        const alloc_t *a = find_alloc(workspace, false);
        char w[128];
        if (!a || a->kind != MEM_DEVICE || a->device != h->device)
            return blas_mistake(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace",
                                "workspace %s is not memory of the handle's device %d",
                                describe(workspace, w, sizeof w), h->device);
        if ((char *)workspace + bytes > a->base + a->size)
            return blas_mistake(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace",
                                "workspace of %zu bytes runs past its allocation", bytes);
        if ((uintptr_t)workspace % 256)
            return blas_mistake(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace", "workspace not 256-byte aligned");
    }
    h->workspace = workspace;
    h->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion(cublasHandle_t h, int *version)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!version) return CUBLAS_STATUS_INVALID_VALUE;
    *version = 130000;
    return CUBLAS_STATUS_SUCCESS;
}

/* A column-major (rows, cols) matrix with leading dimension ld at p: device
 * memory the handle's device may read, wholly inside its allocation. */
static cublasStatus_t check_matrix(const char *name, const float *p, int rows, int cols, int ld, int device)
{
    if (!rows || !cols) return CUBLAS_STATUS_SUCCESS;
    char w[128];
    const alloc_t *a = find_alloc(p, false);
    if (!p || !a || a->kind != MEM_DEVICE)
        return blas_mistake(CUBLAS_STATUS_INVALID_VALUE, "cublasSgemm", "%s is %s, not device memory", name,
                            describe(p, w, sizeof w));
    if (!device_ok_for(a, device))
        return blas_mistake(CUBLAS_STATUS_EXECUTION_FAILED, "cublasSgemm",
                            "%s is device %d's memory; the handle's device %d has no peer access to it", name,
                            a->device, device);
    size_t last = ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * sizeof(float);
    if ((const char *)p + last > a->base + a->size)
        return blas_mistake(CUBLAS_STATUS_EXECUTION_FAILED, "cublasSgemm",
                            "%s (%d x %d, ld %d) at %s runs %zu bytes past its allocation's end", name, rows, cols, ld,
                            describe(p, w, sizeof w), (size_t)((const char *)p + last - (a->base + a->size)));
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    /* cuBLAS's own argument checks */
    if ((unsigned)ta > CUBLAS_OP_C || (unsigned)tb > CUBLAS_OP_C)
        return blas_mistake(CUBLAS_STATUS_INVALID_VALUE, "cublasSgemm", "operation %d / %d", (int)ta, (int)tb);
    int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
    int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
    if (m < 0 || n < 0 || k < 0)
        return blas_mistake(CUBLAS_STATUS_INVALID_VALUE, "cublasSgemm", "m %d, n %d, k %d: negative", m, n, k);
    if (lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1))
        return blas_mistake(CUBLAS_STATUS_INVALID_VALUE, "cublasSgemm",
                            "leading dimensions lda %d (op(A) has %d rows stored), ldb %d (%d), ldc %d (%d) "
                            "[transa %s, transb %s, m %d, n %d, k %d]",
                            lda, arows, ldb, brows, ldc, m, ta == CUBLAS_OP_N ? "N" : "T", tb == CUBLAS_OP_N ? "N" : "T",
                            m, n, k);
    /* what a GPU punishes */
    if (h->device != current_device())
        return blas_mistake(CUBLAS_STATUS_EXECUTION_FAILED, "cublasSgemm",
                            "the handle belongs to device %d but device %d is current (a missing cudaSetDevice)",
                            h->device, current_device());
    if (is_default_stream(h->stream))
        return blas_mistake(CUBLAS_STATUS_EXECUTION_FAILED, "cublasSgemm",
                            "the handle runs on the default (legacy) stream: cublasSetStream was not called");
    stream_t *st = stream_lookup(h->stream);
    if (!st) return blas_mistake(CUBLAS_STATUS_EXECUTION_FAILED, "cublasSgemm", "the handle's stream was destroyed");
    if (st->device != h->device)
        return blas_mistake(CUBLAS_STATUS_EXECUTION_FAILED, "cublasSgemm",
                            "the handle's stream belongs to device %d, the handle to device %d", st->device, h->device);
    if (!alpha || !beta) return blas_mistake(CUBLAS_STATUS_INVALID_VALUE, "cublasSgemm", "NULL alpha or beta");
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    cublasStatus_t s;
    if (k && (s = check_matrix("A", A, arows, acols, lda, h->device)) != CUBLAS_STATUS_SUCCESS) return s;
    if (k && (s = check_matrix("B", B, brows, bcols, ldb, h->device)) != CUBLAS_STATUS_SUCCESS) return s;
    if ((s = check_matrix("C", C, m, n, ldc, h->device)) != CUBLAS_STATUS_SUCCESS) return s;
    float al = *alpha, be = *beta; /* host pointer mode: read at the call */
    enqueue(st, [=]() {
        if (be == 0.0f)
            for (int j = 0; j < n; j++) memset(C + (size_t)j * ldc, 0, (size_t)m * sizeof(float));
        if (k)
            cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                        tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, al, A, lda, B, ldb, be, C, ldc);
        else if (be != 1.0f)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) C[(size_t)j * ldc + i] *= be;
        return cudaSuccess;
    });
    return CUBLAS_STATUS_SUCCESS;
}
