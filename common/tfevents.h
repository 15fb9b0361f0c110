/* tfevents.h — a TensorBoard event-file writer: scalars a chief logs per step.
 *
 * One writer owns one file
 *   <logdir>/events.out.tfevents.<unix seconds, %010lld>.<hostname>.<pid><suffix>
 * (TensorFlow's EventsWriter names it events.out.tfevents.<seconds>.<hostname><suffix>;
 * TensorBoard's Python writer puts the pid after the hostname, as here). TensorBoard
 * reads every file in the directory whose name contains "tfevents".
 *
 * The file is a TFRecord stream of serialized tensorflow.Event messages, each
 * record framed as
 *   uint64 length (LE) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
 * The first event carries wall_time and file_version "brain.Event:2" (step 0);
 * each scalar is Event{wall_time, step, summary{value{tag, simple_value}}}.
 * The protobuf is encoded by hand in tfevents.c (no .proto in the build).
 *
 * Errors are sticky: once a write fails the record framing in the file may be
 * torn, so every later call returns PSC_EIO without writing; the first failure is
 * logged once with the path. Nothing here aborts on an I/O error.
 *
 * Threads: every function may be called from any thread on the same writer at the
 * same time (one mutex per writer), except psc_tfevents_close, which must be the
 * last call.
 */
#ifndef PSC_TFEVENTS_H
#define PSC_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct psc_tfevents psc_tfevents_t;

/* The file_version string of the first event, as TensorFlow writes it. */
#define PSC_TFEVENTS_FILE_VERSION "brain.Event:2"

/* Creates logdir and its parents if missing (mode 0777 less umask), creates a new
 * event file in it (never an existing one: PSC_EEXISTS if the name is taken, e.g. a
 * second writer of this process in the same second with the same suffix), writes
 * and flushes the file_version event. suffix may be NULL or "" (TensorFlow 2 uses
 * ".v2"); it must not contain '/'. On success *out is a writer the caller owns
 * (psc_tfevents_close frees it). Returns 0, PSC_EINVAL (bad argument) or PSC_EIO
 * (mkdir, open or write failed), with a line naming the path in err. */
int psc_tfevents_open(const char *logdir, const char *suffix, psc_tfevents_t **out, char *err, size_t errlen);

/* Appends Event{wall_time = now (CLOCK_REALTIME, seconds), step, summary{value{tag,
 * simple_value = (float)value}}} to the writer's buffer; it reaches the file when
 * the buffer fills, at psc_tfevents_flush or at close. tag must be a non-empty
 * string. Returns 0, PSC_EINVAL (NULL writer or tag, empty tag) or PSC_EIO (this or
 * an earlier write failed). Thread-safe. */
int psc_tfevents_scalar(psc_tfevents_t *w, int64_t step, const char *tag, double value);

/* Writes buffered events to the file (fflush; no fsync). Returns 0 or PSC_EIO.
 * Thread-safe. */
int psc_tfevents_flush(psc_tfevents_t *w);

/* Flushes, closes the file and frees the writer. NULL ok. A failure is logged
 * with the path (there is no one left to return it to); call psc_tfevents_flush
 * first to see it as a code. No other call on w may run or follow. */
void psc_tfevents_close(psc_tfevents_t *w);

/* The event file's path; owned by w, valid until psc_tfevents_close. Thread-safe. */
const char *psc_tfevents_path(const psc_tfevents_t *w);

#endif
